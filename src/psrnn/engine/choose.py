"""`python -m psrnn select`: the search runs' records checked, then psrnn.engine.selection
picks the point and writes selected.json.

    python -m psrnn select --config config/small.yaml --experiment mnist_ps

select trusted the records: NaN in the first grid point under `ties: draw` divided by an
empty tie set, NaN or Infinity elsewhere failed in the JSON writer, and an accuracy of 7.5 or
the string "0.99" was ranked and drawn from, so Snakemake trained the final runs on a point
an edited or damaged record chose. Every record is now checked first (check_record): one
line naming the run, and nothing written.

The checks live here, not in psrnn.engine.selection: that module is in every study's
training digest (train reads selected.json through it), so an edit to its code would mark
every committed run stale, GPU-made ones included, for a check that training never runs.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from psrnn import config as C
from psrnn.engine import selection
from psrnn.errors import UserError

RANK_LOSSES = ("valid_main_loss", "valid_aux_loss")  # the `loss` tie rule's sum, where recorded


def configure(p: argparse.ArgumentParser) -> None:
    selection.configure(p)


def check_record(experiment: str, point: str, m: Any) -> None:
    """A search run's record as select reads it: `best_valid_acc` a number in [0, 1] and the
    validation losses, where recorded, finite numbers. Anything else is a UserError naming
    the run."""
    where = f"experiment {experiment}, grid point {point} (its search run's metrics.json)"
    if not isinstance(m, dict) or "best_valid_acc" not in m:
        raise UserError(f"{where}: no best_valid_acc; not a finished run's record: delete its folder")

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    acc = m["best_valid_acc"]
    if not number(acc) or not 0.0 <= acc <= 1.0:
        raise UserError(f"{where}: best_valid_acc = {acc!r} is not an accuracy in [0, 1]; delete its folder")
    for key in RANK_LOSSES:
        if key in m and not number(m[key]):
            raise UserError(f"{where}: {key} = {m[key]!r} is not a finite number; delete its folder")


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    if args.experiment in cfg["experiments"] and C.has_grid(cfg, args.experiment):
        for point, record in selection.read_search(cfg, args.experiment).items():
            check_record(args.experiment, point, record)
    return selection.run(args)  # it names an unknown experiment or one without a grid
