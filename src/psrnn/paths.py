"""Where a suite config's runs live and what their folders are called: the points of an
experiment's grid (their ids name the search folders) and the layout under data/<name>/
and results/<name>/ (psrnn.config resolves a run's settings; the workflow, training,
selection and compile ask here for paths).

    data/<name>/prepared/<dataset>/                     prepared splits (data_root)
    results/<name>/runs/<experiment>/seed<k>/           a final run (run_dir)
    results/<name>/search/<experiment>/<point>/         a grid point's search run (search_dir)
    results/<name>/search/<experiment>/selected.json    the search's choice (selection_path)
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from pathlib import Path
from typing import Any

# A grid key whose items are sets of settings that vary together (grid_points)
TIED = "tied"


def grid_points(exp: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """[(point_id, overrides)] for an experiment's grid; [("default", {})] without one.

    The grid is the product of its keys' value lists, each crossed with every item of
    `tied` (settings that vary together) when it has one. Point ids are stable and
    filesystem-safe: keys sorted, e.g. `hidden-64_lr-0.1`.
    """
    # cached by the grid's JSON: Snakemake asks for one point per job, and a full grid
    # has thousands (config/relreg-full.yaml: 6,140), so rebuilding it each time is quadratic
    return [(pid, dict(values)) for pid, values in _grid_points(_grid_key(exp))]


def point_overrides(exp: dict[str, Any], point: str) -> dict[str, Any] | None:
    """The settings of grid point `point` of `exp` (None: no such point)."""
    found = _grid_index(_grid_key(exp)).get(point)
    return None if found is None else dict(found)


def _grid_key(exp: dict[str, Any]) -> str:
    return json.dumps(exp.get("grid") or {}, sort_keys=True)


@functools.lru_cache(maxsize=64)
def _grid_index(grid_json: str) -> dict[str, dict[str, Any]]:
    return dict(_grid_points(grid_json))


@functools.lru_cache(maxsize=64)
def _grid_points(grid_json: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    grid = json.loads(grid_json)
    if not grid:
        return (("default", {}),)
    keys = sorted(k for k in grid if k != TIED)
    points = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        for tied in grid.get(TIED) or [{}]:
            values = {**dict(zip(keys, combo)), **tied}
            pid = "_".join(f"{k}-{_slug(values[k])}" for k in sorted(values))
            points.append((pid, values))
    return tuple(points)


def _slug(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "", text)


def data_root(cfg: dict[str, Any]) -> Path:
    return Path("data") / cfg["name"]


def results_root(cfg: dict[str, Any]) -> Path:
    return Path("results") / cfg["name"]


def run_dir(cfg: dict[str, Any], experiment: str, seed: int) -> Path:
    return results_root(cfg) / "runs" / experiment / f"seed{seed}"


def search_dir(cfg: dict[str, Any], experiment: str, point: str) -> Path:
    return results_root(cfg) / "search" / experiment / point


def selection_path(cfg: dict[str, Any], experiment: str) -> Path:
    return results_root(cfg) / "search" / experiment / "selected.json"


def has_grid(cfg: dict[str, Any], experiment: str) -> bool:
    return bool(cfg["experiments"][experiment].get("grid"))
