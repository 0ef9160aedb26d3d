"""The plan of the training-recipe study (`python -m psrnn recipe`, psrnn.studies.private_shared.recipe
runs it):
the study file (config/recipe.yaml), the runs it defines (experiment x recipe x grid
point), each run's settings, and the short form the table prints of them.

    study = load_study("config/recipe.yaml")
    configs = recipe_configs(study, "data/recipe/prepared")   # run name -> RunConfig
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.studies.private_shared import settings as S

STUDY = C.ROOT / "config" / "recipe.yaml"
STUDY_KEYS = {"suite", "experiments", "digits", "epochs", "seed", "recipes"}
OPTIONAL_KEYS = {"grid", "window_scale"}
# a recipe's own keys besides run settings: which experiments it runs, its own grid
RECIPE_META = ("experiments", "grid")


def load_study(path: str | Path = STUDY) -> dict[str, Any]:
    """The study file, its suite config loaded and validated; unknown keys are an error."""
    path = Path(path)
    study = C.load_yaml(path)
    unknown = sorted(set(study) - STUDY_KEYS - OPTIONAL_KEYS)
    missing = sorted(STUDY_KEYS - set(study))
    if unknown or missing:
        raise C.ConfigError(f"{path}: unknown keys {unknown}, missing keys {missing}")
    if not study["recipes"]:
        raise C.ConfigError(f"{path}: recipes: none listed")
    study["suite_config"] = C.load_suite(path.parent / study["suite"])
    return study


def runs(study: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """run name -> (experiment, recipe, grid point), in the study's order: each recipe on
    each of its experiments (the study's, or the recipe's own `experiments:`, a list or a
    mapping of experiment -> its own grid) at each point of its grid (the experiment's,
    else the recipe's `grid:`, else the study's, else one point)."""
    out = {}
    for recipe, keys in study["recipes"].items():
        keys = keys or {}
        experiments = keys.get("experiments", study["experiments"])
        if not isinstance(experiments, dict):  # a list: each at the recipe's grid
            experiments = dict.fromkeys(experiments)
        for experiment, own in experiments.items():
            grid = own or keys.get("grid", study.get("grid")) or {}  # {experiment: its own grid}
            points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())] or [{}]
            for point in points:
                tag = "".join(f"-{k}{v:g}" if isinstance(v, float) else f"-{k}{v}" for k, v in point.items())
                name = f"{experiment}/{recipe}{tag}"
                out[name] = (experiment, recipe, point)
    return out


def recipe_configs(
    study: dict[str, Any], data_dir: str | Path, only: list[str] | None = None
) -> dict[str, S.RunConfig]:
    """run name (`runs`) -> RunConfig: the suite experiment with the recipe's keys and the
    grid point on top, windows scaled by `window_scale`, run for exactly `epochs` epochs
    (no early stopping) on the CPU from `data_dir`. only: recipe names."""
    names = only or list(study["recipes"])
    unknown = [n for n in names if n not in study["recipes"]]
    if unknown:
        raise C.ConfigError(f"unknown recipe(s) {', '.join(unknown)}; known: {', '.join(study['recipes'])}")
    fixed = {
        "max_epochs": study["epochs"],
        "patience": 0,
        "data_dir": str(data_dir),
        "device": "cpu",
        "progress": "plain",
    }
    scale = study.get("window_scale", 1.0)
    configs = {}
    for name, (experiment, recipe, point) in runs(study).items():
        if recipe not in names:
            continue
        keys = {k: v for k, v in (study["recipes"][recipe] or {}).items() if k not in RECIPE_META}
        try:
            cfg = C.resolve_run(
                study["suite_config"], experiment, study["seed"], overrides={**keys, **point, **fixed}
            )
        except (C.ConfigError, TypeError) as err:
            raise C.ConfigError(f"recipes.{recipe} ({experiment}): {err}") from None
        cfg = dataclasses.replace(cfg, window=max(1, round(cfg.window * scale)))
        if not cfg.has_aux:  # settings that do nothing without decoders: one run for all values
            cfg = dataclasses.replace(cfg, clip_scope="global", decoder_input="teacher")
        if cfg.clip == 0:  # no clipping: the scope does nothing
            cfg = dataclasses.replace(cfg, clip_scope="global")
        configs[name] = cfg
    return configs


def settings(cfg: S.RunConfig) -> str:
    """A run's settings that matter here, as the table prints them."""
    extra = f", momentum {cfg.momentum:g}" if cfg.optimizer == "sgdr" else ""
    clip = f"clip {cfg.clip:g}" + (" per group" if cfg.clip_scope == "groups" and cfg.clip > 0 else "")
    if cfg.clip == 0:
        clip = "no clip"
    aux = ""
    if cfg.has_aux:
        aux = f", {cfg.anchors} x {len(cfg.tasks)} windows of {cfg.window}, decoder input {cfg.decoder_input}"
        aux += (
            ""
            if cfg.aux_anchors == "sum" and cfg.aux_weight == 1
            else f", aux {cfg.aux_anchors} x {cfg.aux_weight:g}"
        )
    return f"{cfg.optimizer}, lr {cfg.lr:g}{extra}, init {cfg.init}, {clip}{aux}"
