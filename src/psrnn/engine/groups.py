"""Which runs train together (psrnn.engine.group): an experiment's grid search cut into groups.

    python -m psrnn train-group --config config/relreg.yaml --experiment proto_both --group cells-4_hidden-8

A study that can batch runs names a `group_key(run)` in its Study (its folder's study.py, psrnn.registry):
runs of one key (one shape: same model kind and size, same data and step settings) train
as one batched model. Runs without a key (another model kind, another study) train one
after another in their group's process. Groups are cut to at most FUSED_MAX (batched) or
ALONE_MAX (one by one) runs, so that the jobs of a large grid spread over the cores.
With the suite's `fused_search: true` the Snakefile's grid search is one job per group
(rule search_group); the job writes every member's run folder and, last, the group's
marker (group_marker), which the selection waits for. This module imports no torch: the
Snakefile asks it for its jobs.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine.settings import RunSettings
from psrnn.paths import _slug

FUSED_MAX = 256  # runs of one batched model (a proto_both shape of relreg-full: 250)
ALONE_MAX = 12  # runs trained one by one in one job


def group_key(run: RunSettings) -> Any:
    """The batching key of a run's settings (None: it trains alone)."""
    ref = registry.of_settings(run).group_key
    return None if ref is None else registry.load(ref)(run)


def search_groups(cfg: dict[str, Any], experiment: str) -> dict[str, list[str]]:
    """Group id -> the grid point ids of `experiment` it trains (with the first seed), in
    grid order. A group of one batching key is named by the grid settings its points
    share (e.g. `cells-4_hidden-8`), with `.2`, `.3`, ... for its further parts; runs
    trained alone are `alone`, `alone.2`, ..."""
    exp = cfg["experiments"][experiment]
    spec = json.dumps(
        {
            "defaults": cfg.get("defaults", {}),
            "experiment": exp,
            "seed": C.search_seed(cfg),
            "study": registry.study_name(cfg),
            "name": cfg["name"],
        },
        sort_keys=True,
    )
    return {k: list(v) for k, v in _search_groups(spec, experiment).items()}


@functools.lru_cache(maxsize=64)
def _search_groups(spec: str, experiment: str) -> dict[str, tuple[str, ...]]:
    s = json.loads(spec)
    cfg = {
        "name": s["name"],
        "study": s["study"],
        "defaults": s["defaults"],
        "seeds": [s["seed"]],
        "experiments": {experiment: s["experiment"]},
    }
    points = C.grid_points(s["experiment"])
    keyed: dict[Any, list[tuple[str, dict[str, Any]]]] = {}
    for pid, values in points:
        key = group_key(C.resolve_run(cfg, experiment, s["seed"], point=pid))
        keyed.setdefault(("alone",) if key is None else key, []).append((pid, values))
    out: dict[str, tuple[str, ...]] = {}
    for key, members in keyed.items():
        alone = key == ("alone",)
        size = ALONE_MAX if alone else FUSED_MAX
        name = "alone" if alone else _shared_name([v for _, v in members])
        for part in range(0, len(members), size):
            suffix = "" if part == 0 else f".{part // size + 1}"
            out[name + suffix] = tuple(pid for pid, _ in members[part : part + size])
    return out


def _shared_name(overrides: list[dict[str, Any]]) -> str:
    """The grid settings every one of `overrides` has alike, as a point id; `all` if none."""
    first = overrides[0]
    shared = {k: v for k, v in first.items() if all(o.get(k) == v for o in overrides)}
    if len(overrides) > 1 and not shared:
        return "all"
    return "_".join(f"{k}-{_slug(v)}" for k, v in sorted(shared.items())) or "all"


# --- the workflow's group jobs (the suite's `fused_search: true`) ---------------------------


def fused_search(cfg: dict[str, Any]) -> bool:
    return bool(cfg.get("fused_search"))


def fused_finals(cfg: dict[str, Any]) -> bool:
    """The final runs of an experiment train in one job (rule final_group)."""
    return bool(cfg.get("fused_finals"))


def group_marker(cfg: dict[str, Any], experiment: str, group: str) -> Path:
    """Written last by a group's job: every member of the group is complete."""
    return C.search_dir(cfg, experiment, "groups") / f"{group}.json"


def markers(cfg: dict[str, Any], experiment: str) -> list[str]:
    return [str(group_marker(cfg, experiment, g)) for g in search_groups(cfg, experiment)]


def search_inputs(cfg: dict[str, Any], experiment: str, point_metrics: list[str]) -> list[str]:
    """What an experiment's selection waits for: its group markers under `fused_search`,
    else every grid point's metrics.json (`point_metrics`, psrnn.workflow.search_metrics)."""
    return markers(cfg, experiment) if fused_search(cfg) and point_metrics else point_metrics


def targets(cfg: dict[str, Any], files: list[str]) -> list[str]:
    """`rule all`'s files (psrnn.workflow.targets) with, under `fused_search`, each grid
    search's group markers in place of its points' metrics.json (the group jobs write
    those as they go; a point is not a job of its own)."""
    if not fused_search(cfg):
        return files
    out, points = [], set()
    for exp in C.enabled_experiments(cfg):
        if C.has_grid(cfg, exp):
            points |= {
                str(C.search_dir(cfg, exp, pid) / "metrics.json")
                for pid, _ in C.grid_points(cfg["experiments"][exp])
            }
            out += markers(cfg, exp)
    return out + [f for f in files if f not in points]
