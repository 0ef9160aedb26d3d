"""`python -m psrnn select`: the search runs' records checked, then psrnn.engine.selection
picks the point by the study's declared selection and writes selected.json.

    python -m psrnn select --config config/small.yaml --experiment mnist_ps

select trusted the records: NaN in the first grid point under `ties: draw` divided by an
empty tie set, NaN or Infinity elsewhere failed in the JSON writer, and an accuracy of 7.5 or
the string "0.99" was ranked and drawn from, so Snakemake trained the final runs on a point
an edited or damaged record chose. Every record is now checked first (check_record): one
line naming the run, and nothing written.

What ranks is the study's (psrnn.registry.Study.selection: metric, "max" or "min", tie
metrics summed, the lower sum winning): a record without any of them is refused by name,
where selection read a missing loss as 0.0. psrnn.engine.selection ranks by
`best_valid_acc`, then `valid_main_loss + valid_aux_loss`; `adapted` hands it records in
that shape (the study's metric as `best_valid_acc`, negated for "min"; the tie metrics'
sum as `valid_main_loss`, `valid_aux_loss` 0), and `named` writes the record with the
study's metric by name. The first two studies' selections are what selection did before, so
their selected.json are byte-identical.

The checks and the adapter live here, not in psrnn.engine.selection: that module is in every
study's training digest (train reads selected.json through it), so an edit to its code
would mark every committed run stale, GPU-made ones included (re-stamped only on a GPU), for
a rule that training never runs.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine import selection
from psrnn.errors import UserError
from psrnn.files import write_json
from psrnn.jobspec import selection_stamp

Selection = registry.Selection
DEFAULT: Selection = registry.BY_ACCURACY
RANKED = "best_valid_acc"  # the key psrnn.engine.selection ranks by (higher wins)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument("--experiment", required=True, help="experiment with a `grid:`")
    p.add_argument("--out", help="where to write (default results/<name>/search/<exp>/selected.json)")


def is_accuracy(sel: Selection) -> bool:
    """A "max" metric named *_acc is an accuracy: a fraction in [0, 1]."""
    return sel[1] == "max" and sel[0].endswith("_acc")


def check_record(experiment: str, point: str, m: Any, sel: Selection = DEFAULT) -> None:
    """A search run's record as select reads it: the study's metric a finite number (an
    accuracy in [0, 1]) and each tie metric a finite number. Anything else is a UserError
    naming the run and the key."""
    where = f"experiment {experiment}, grid point {point} (its search run's metrics.json)"
    metric, _, ties = sel
    for key in (metric, *ties):
        if not isinstance(m, dict) or key not in m:
            raise UserError(f"{where}: no {key}; not a finished run's record: delete its folder")

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    v = m[metric]
    if is_accuracy(sel) and (not number(v) or not 0.0 <= v <= 1.0):
        raise UserError(f"{where}: {metric} = {v!r} is not an accuracy in [0, 1]; delete its folder")
    for key in (metric, *ties):
        if not number(m[key]):
            raise UserError(f"{where}: {key} = {m[key]!r} is not a finite number; delete its folder")


def adapted(m: dict[str, Any], sel: Selection) -> dict[str, float]:
    """A checked record as psrnn.engine.selection ranks it (module docstring)."""
    metric, mode, ties = sel
    value = float(m[metric])
    return {
        RANKED: value if mode == "max" else -value,
        "valid_main_loss": sum(float(m[k]) for k in ties),
        "valid_aux_loss": 0.0,
    }


def named(record: dict[str, Any], records: dict[str, dict[str, Any]], sel: Selection) -> dict[str, Any]:
    """selection's record with the study's metric in place of `best_valid_acc` (as it was for
    a study ranking by it): "metric", "mode", the chosen point's value by the metric's name,
    and each candidate's."""
    metric, mode, _ = sel
    if metric == RANKED and mode == "max":
        return record
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key == RANKED:
            out.update(metric=metric, mode=mode)
            out[metric] = float(records[record["point"]][metric])
        elif key == "candidates":
            out[key] = [{"point": c["point"], metric: float(records[c["point"]][metric])} for c in value]
        else:
            out[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    if args.experiment not in cfg["experiments"]:
        raise UserError(
            f"unknown experiment {args.experiment!r}; known: {', '.join(sorted(cfg['experiments']))}"
        )
    if not C.has_grid(cfg, args.experiment):
        raise UserError(f"experiment {args.experiment} has no `grid:`, nothing to select")
    sel = registry.study_of(cfg).selection
    records = selection.read_search(cfg, args.experiment)
    for point, m in records.items():
        check_record(args.experiment, point, m, sel)
    points = C.grid_points(cfg["experiments"][args.experiment])
    ties = cfg.get("ties", "loss")
    ranked = {p: adapted(m, sel) for p, m in records.items()}
    record = selection.select(args.experiment, points, ranked, ties, list(cfg["seeds"]))
    record = named(record, records, sel)
    record.update(selection_stamp(cfg, args.experiment))
    out = Path(args.out) if args.out else C.selection_path(cfg, args.experiment)
    write_json(out, record)
    metric = sel[0]
    shown = "valid_acc" if metric == RANKED else metric
    for c in record["candidates"]:
        mark = "*" if c["point"] == record["point"] else " "
        print(f"{mark} {c['point']:40s} {shown} {c.get('valid_acc', c.get(metric)):.4f}")
    if ties == "draw":
        print(
            f"{args.experiment}: {len(record['tied'])} of {len(points)} points tied at {shown} "
            f"{record.get(metric, record.get(RANKED)):.4f}; {len(record['draws'])} final runs draw "
            f"from them -> {out}"
        )
    else:
        print(f"{args.experiment}: selected {record['point']} -> {out}")
    return 0
