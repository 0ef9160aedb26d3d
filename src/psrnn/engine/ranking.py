"""What `python -m psrnn select` ranks by, as pure functions of the search runs' records
(psrnn.engine.choose, which reads and writes the files): the records checked
(check_record), adapted to psrnn.engine.selection's ranking (adapted), the record written
with the study's metric by name (named), and the selection they give (chosen). compile
applies the same rule again to check each selected.json (psrnn.report.collect.check_selections),
so they live apart from choose, which reads records as compile does (a module each way
would be an import cycle).
"""

from __future__ import annotations

import math
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine import selection
from psrnn.errors import UserError

Selection = registry.Selection
DEFAULT: Selection = registry.BY_ACCURACY
RANKED = "best_valid_acc"  # the key psrnn.engine.selection ranks by (higher wins)


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


def chosen(
    cfg: dict[str, Any],
    experiment: str,
    records: dict[str, dict[str, Any]],
    points: list[tuple[str, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The selection record (without its stamp) that `records` (grid point -> its search
    run's checked metrics.json) give over `points` (default: the whole grid, in order; each
    must have a record) by the study's selection and the suite's `ties:` rule: what select
    writes, and what compile re-derives to check a selected.json against
    (psrnn.report.collect.check_selections)."""
    sel = registry.study_of(cfg).selection
    points = C.grid_points(cfg["experiments"][experiment]) if points is None else points
    ranked = {p: adapted(m, sel) for p, m in records.items()}
    record = selection.select(experiment, points, ranked, cfg.get("ties", "loss"), list(cfg["seeds"]))
    return named(record, records, sel)
