"""Pick an experiment's best grid point by validation accuracy, and read the choice back:
the ranking behind `python -m psrnn select` (psrnn.engine.choose, which checks the records
and ranks by the study's metric through `select`) and the reader of `train --selected`.

    python -m psrnn select --config config/small.yaml --experiment mnist_ps
    # reads results/small/search/mnist_ps/<point>/metrics.json for every grid point
    # writes results/small/search/mnist_ps/selected.json

selected.json = {"experiment", "point", "overrides" (the point's grid values, what
`train --selected` applies), "best_valid_acc", "candidates": [{"point", "valid_acc"}, ...]
in grid order}. The best point has the highest `best_valid_acc`. Points tied at it are
treated by the suite's `ties:` rule, fixed before any run:

- `loss` (the default): the lower validation loss (main + aux of the best checkpoint)
  wins, then the earlier grid point, so the choice never depends on file-system order.
- `draw`: no tied point wins. The record adds "ties": "draw", "tied" (the tie set, in grid
  order) and "draws": [{"seed", "point", "overrides"}], one per final seed: final run i
  trains the i-th point of the tie set in draw_order (a hash of the experiment and the
  point id; the set repeats when it has fewer points than seeds), so the final runs are a
  sample of the tie set. A hash order, not a random draw over the whole set, keeps every
  other draw where it was when a point joins or leaves the tie set by float rounding. No
  loss decides, so a regulariser's penalty (which lowers the validation accuracy of no
  tied point, but raises or lowers its loss) cannot pick the unregularised point.

The test set is never looked at.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.errors import UserError
from psrnn.files import read_json

TIE_RULES = ("loss", "draw")


def draw_order(experiment: str, tied: list[str]) -> list[str]:
    """The tie set in the order final runs draw it: by SHA-256 of "experiment/point"."""
    return sorted(tied, key=lambda pid: hashlib.sha256(f"{experiment}/{pid}".encode()).hexdigest())


def select(
    experiment: str,
    points: list[tuple[str, dict[str, Any]]],
    metrics: dict[str, dict[str, Any]],
    ties: str = "loss",
    seeds: list[int] | None = None,
) -> dict[str, Any]:
    """The selection record from each grid point's metrics.json (point id -> dict).

    `points` is the grid in order, [(point id, overrides)]; every point must have metrics.
    `ties`: the suite's rule for points tied at the best validation accuracy (module
    docstring); `draw` needs the final runs' `seeds`.
    """
    if ties not in TIE_RULES:
        raise UserError(f"ties: {ties!r} is no tie rule; known: {', '.join(TIE_RULES)}")
    missing = [pid for pid, _ in points if pid not in metrics]
    if missing:
        raise UserError(
            f"experiment {experiment}: no finished search run for grid point(s) "
            f"{', '.join(missing)} (metrics.json missing)"
        )

    def rank(i: int) -> tuple[float, float, int]:
        m = metrics[points[i][0]]
        valid_loss = float(m.get("valid_main_loss", 0.0)) + float(m.get("valid_aux_loss", 0.0))
        return (-float(m["best_valid_acc"]), valid_loss, i)

    best = min(range(len(points)), key=rank)
    pid, overrides = points[best]
    record: dict[str, Any] = {
        "experiment": experiment,
        "point": pid,
        "overrides": overrides,
        "best_valid_acc": float(metrics[pid]["best_valid_acc"]),
        "candidates": [{"point": p, "valid_acc": float(metrics[p]["best_valid_acc"])} for p, _ in points],
    }
    if ties == "draw":
        if not seeds:
            raise UserError(f"experiment {experiment}: ties: draw needs the final runs' seeds")
        top = float(metrics[pid]["best_valid_acc"])
        tied = [p for p, _ in points if float(metrics[p]["best_valid_acc"]) == top]
        order, by_id = draw_order(experiment, tied), dict(points)
        draws = [
            {"seed": seed, "point": order[i % len(order)], "overrides": by_id[order[i % len(order)]]}
            for i, seed in enumerate(seeds)
        ]
        # "point"/"overrides": the first final run's, for readers of one point
        record.update(point=draws[0]["point"], overrides=draws[0]["overrides"])
        record.update(ties="draw", tied=tied, draws=draws)
    return record


def overrides_for(sel: dict[str, Any], seed: int) -> tuple[str | None, dict[str, Any]]:
    """(grid point, its overrides) that a selection gives the final run of `seed`: its
    draw under `ties: draw`, else the one selected point."""
    for d in sel.get("draws") or []:
        if d.get("seed") == seed:
            return d.get("point"), d["overrides"]
    if sel.get("draws"):
        raise UserError(
            f"selected.json of {sel.get('experiment')}: no draw for seed {seed} "
            f"(draws for seeds {', '.join(str(d.get('seed')) for d in sel['draws'])}); run select again"
        )
    return sel.get("point"), sel["overrides"]


def read_selected(path: str | Path, experiment: str) -> dict[str, Any]:
    """A selected.json for `experiment` (`train --selected`, `train-group --selected`); a
    missing file, another experiment's or one without overrides is a UserError naming it."""
    if not Path(path).is_file():
        raise UserError(f"--selected {path}: no such file (`python -m psrnn select` writes it)")
    sel = read_json(path)
    if not isinstance(sel, dict) or not isinstance(sel.get("overrides"), dict):
        raise UserError(f"{path}: not a selected.json (no 'overrides'; `python -m psrnn select` writes it)")
    if sel.get("experiment", experiment) != experiment:
        raise UserError(f"{path} belongs to experiment {sel['experiment']!r}, not {experiment!r}")
    return sel


def refuse_switched_off(suite: dict[str, Any], experiment: str, source: str) -> None:
    """An experiment whose dataset the suite switches off is named as such (train and
    train-group), not met later as 'prepared dataset not found'."""
    dataset = (suite["experiments"].get(experiment) or {}).get("dataset")
    if dataset and experiment not in C.enabled_experiments(suite):
        raise UserError(
            f"{experiment}: its dataset {dataset} is switched off in {source} (datasets.{dataset}.enabled)"
        )


def read_search(cfg: dict[str, Any], experiment: str) -> dict[str, dict[str, Any]]:
    """metrics.json of every finished grid point of `experiment` (point id -> dict)."""
    out = {}
    for pid, _ in C.grid_points(cfg["experiments"][experiment]):
        path = C.search_dir(cfg, experiment, pid) / "metrics.json"
        if path.is_file():
            out[pid] = read_json(path)
    return out
