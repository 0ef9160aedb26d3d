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

The checks and the adapter (psrnn.engine.ranking, re-exported here) are not in
psrnn.engine.selection: that module is in every
study's training digest (train reads selected.json through it), so an edit to its code
would mark every committed run stale, GPU-made ones included (re-stamped only on a GPU), for
a rule that training never runs. Each record is also read as compile reads it
(check_settings: psrnn.report.collect.suite_run), so a record of another grid point's
settings is refused here, before the final runs train on what it would choose.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine import selection
from psrnn.engine.ranking import (  # noqa: F401 (select's rule, re-exported)
    DEFAULT,
    RANKED,
    adapted,
    check_record,
    chosen,
    is_accuracy,
    named,
)
from psrnn.errors import UserError
from psrnn.files import write_json
from psrnn.jobspec import selection_stamp


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument("--experiment", required=True, help="experiment with a `grid:`")
    p.add_argument("--out", help="where to write (default results/<name>/search/<exp>/selected.json)")


def check_settings(cfg: dict[str, Any], experiment: str, records: dict[str, dict[str, Any]]) -> None:
    """Each search record read as compile reads it (psrnn.report.collect.suite_run): a record
    of another grid point's settings, another experiment's or seed's, is one line naming it,
    before any selected.json is written (select once ranked it, and Snakemake trained the
    final runs on what it chose before compile refused it)."""
    from psrnn.report.collect import suite_run

    for point in records:
        path = C.search_dir(cfg, experiment, point) / "metrics.json"
        suite_run(cfg, path, experiment, C.search_seed(cfg), point=point)


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    if args.experiment not in cfg["experiments"]:
        raise UserError(
            f"unknown experiment {args.experiment!r}; known: {', '.join(sorted(cfg['experiments']))}"
        )
    if not C.has_grid(cfg, args.experiment):
        raise UserError(f"experiment {args.experiment} has no `grid:`, nothing to select")
    if args.out and Path(args.out).is_dir():  # `--out /` once failed in os.replace with a traceback
        raise UserError(
            f"--out {args.out}: is a folder; name the file to write (e.g. {Path(args.out) / 'selected.json'})"
        )
    sel = registry.study_of(cfg).selection
    records = selection.read_search(cfg, args.experiment)
    for point, m in records.items():
        check_record(args.experiment, point, m, sel)
    check_settings(cfg, args.experiment, records)
    points = C.grid_points(cfg["experiments"][args.experiment])
    ties = cfg.get("ties", "loss")
    record = chosen(cfg, args.experiment, records)
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
