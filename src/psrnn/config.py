"""Configuration: one run's knobs (`RunConfig`) and the suite config that holds the grid.

    python -m psrnn config config/small.yaml            # validate, print the runs
    python -m psrnn train --config config/small.yaml --experiment mnist_ps --seed 0

A *suite config* (`config/small.yaml`, `config/paper.yaml`) names the datasets, seeds,
defaults and experiments; it is validated against `config/schema.yaml` (JSON Schema
2020-12) before anything runs. Every experiment resolves, per seed, to one flat `RunConfig`:
defaults < experiment < selected grid point < command-line `--set`. Config files and `--set`
values are read by psrnn.yamlfiles (YAML as PyYAML reads it, except that 1e-3 is a number
as in YAML 1.2 and a repeated key is an error). Grid points and the folders of data, runs
and searches: psrnn.paths. Both are importable from here too.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args

from psrnn import studies
from psrnn.datasets import REGISTRY
from psrnn.errors import ConfigError
from psrnn.paths import (  # noqa: F401 (re-exports: grid points and the folder layout)
    TIED,
    data_root,
    grid_points,
    has_grid,
    point_overrides,
    results_root,
    run_dir,
    search_dir,
    selection_path,
)
from psrnn.yamlfiles import ConfigLoader, load_yaml, parse_set, read_yaml  # noqa: F401 (re-exports)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "config" / "schema.yaml"

DATASETS = tuple(REGISTRY)  # mnist, fmnist, cifar10, imdb, dbpedia (psrnn.datasets)
TASKS = ("rec", "pred")
# the choices of RunConfig's enum-like fields (config/schema.yaml lists the same; a test checks)
Optimizer = Literal["sgdr", "adamwr", "adam"]
Init = Literal["torch", "orthogonal", "chrono"]
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
INITS: tuple[str, ...] = get_args(Init)


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run depends on. Field comments are the documentation."""

    # --- data -------------------------------------------------------------------------
    dataset: Literal["mnist", "fmnist", "cifar10", "imdb", "dbpedia"] = "mnist"  # DATASETS
    data_dir: str = ""  # prepared dataset directory (train/valid/test .pt + manifest.json)
    # --- model ------------------------------------------------------------------------
    hidden: int = 128  # main GRU hidden size d
    shared: float = 0.5  # shared proportion r/d: units [0, round(shared*hidden)) feed the decoders
    tasks: tuple[str, ...] = ("rec",)  # auxiliary tasks: "rec" (backwards, before anchor), "pred" (after)
    anchors: int = 1  # anchors m per sequence
    window: int = 50  # window length l of each auxiliary task
    # "stratified" (thesis 3.1: one draw in each of m regions) | "uniform" (Trinh et al.)
    sampling: Literal["stratified", "uniform"] = "stratified"
    # "teacher": decoder step k gets the true x_{k-1}; "estimate": its own previous output
    decoder_input: Literal["teacher", "estimate"] = "teacher"
    decoder_layers: int = 1  # GRU layers of each auxiliary decoder (its hidden size is r)
    # total loss = CE + aux_weight * aux. The sources give no coefficient: the losses are
    # added as they are (paper 3.1, thesis eq. 3.4/3.8; the thesis argues against weighting),
    # so 1 is the sources' loss and anything else an ablation
    aux_weight: float = 1.0
    # how the per-anchor auxiliary losses of a sequence combine: "sum" (the sources' eq.
    # 3.4/3.8, no coefficient) | "mean" over anchors (an ablation: m times smaller)
    aux_anchors: Literal["sum", "mean"] = "sum"
    embedding: int = 0  # text only: >0 learns a character embedding of this size (DBpedia: 100); 0 = one-hot
    head: Literal["linear", "mlp"] = "linear"  # classifier on the full final state: "linear" | "mlp"
    head_hidden: int = 0  # width of the MLP head's hidden layer (0 = same as `hidden`)
    # main GRU: "torch" (PyTorch's uniform) | "orthogonal" (orthogonal recurrent blocks, zero
    # biases) | "chrono" (orthogonal + update-gate bias log U(1, T-1), T = mean training
    # length; models.init_recurrent)
    init: Init = "torch"
    # --- optimisation -----------------------------------------------------------------
    # "sgdr": SGD + momentum + warm restarts (paper) | "adamwr": AdamW + the same warm
    # restarts (Loshchilov & Hutter 2019) | "adam": Adam at a constant rate
    optimizer: Optimizer = "sgdr"
    lr: float = 0.05
    momentum: float = 0.9  # SGD only
    weight_decay: float = 0.0  # L2 in the gradient (sgdr, adam); decoupled decay (adamwr)
    restart_epochs: int = 10  # SGDR T_0 (epochs until the first restart)
    restart_mult: int = 2  # SGDR T_mult (each cycle this many times longer)
    batch_size: int = 128
    # text: sort each pool of this many random batches by length, so a batch pads to near
    # its own length (batch order stays random); 0 = plain random batches
    bucket: int = 0
    # memory bound: a batch of more padded steps (sequences x longest length) than this is
    # run as pieces whose gradients add up to the batch's (data.micro_batches), in training
    # and evaluation alike; 0 = no bound. Peak memory grows with it (metrics.json)
    max_tokens: int = 0
    max_epochs: int = 200
    patience: int = 50  # early stopping on validation accuracy (paper: 50 epochs; 0 = off)
    clip: float = 1.0  # max gradient norm (0 = off; the sources mention no clipping)
    # what one norm covers: "global" (every parameter, torch's clip_grad_norm_) | "groups"
    # (the classifier path, i.e. main GRU, embedding and head, apart from the decoders,
    # each clipped at `clip`), so large decoder gradients cannot shrink the classifier's step
    clip_scope: Literal["global", "groups"] = "global"
    # on a CUDA device, each piece's forward and backward replay as CUDA graphs, one per
    # input shape (psrnn.epoch.GraphedPieces): the same kernels with one launch, so the same
    # numbers (checked on an H200: results/bench/graphs); False = eager launches. No effect
    # on a CPU
    cuda_graphs: bool = True
    # --- bookkeeping ------------------------------------------------------------------
    seed: int = 0
    device: str = "auto"  # "auto" (cuda if available) | "cpu" | "cuda" | "cuda:N" | "mps"
    capture_epochs: tuple[
        int, ...
    ] = ()  # record h_1..h_n after these many training epochs (Figure 3); 0 = at initialisation
    capture_samples: int = 1  # how many test sequences are recorded
    # "auto" (a bar on a terminal, plain lines otherwise) | "bar" | "plain"
    progress: Literal["auto", "bar", "plain"] = "auto"

    @property
    def shared_units(self) -> int:
        """r: the number of shared hidden units."""
        return int(round(self.shared * self.hidden))

    @property
    def has_aux(self) -> bool:
        return self.shared_units > 0 and len(self.tasks) > 0 and self.anchors > 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


RUN_FIELDS = {f.name: f for f in fields(RunConfig)}
# Keys an experiment may carry besides RunConfig fields.
EXPERIMENT_META = ("ref", "grid", "note", "figure")


def coerce_run(values: dict[str, Any], study: str = studies.DEFAULT) -> Any:
    """The study's run settings (RunConfig for the first study) from a plain dict (lists
    become tuples); unknown keys are an error."""
    spec = studies.STUDIES[study]
    cls = studies.load(spec.run_config)
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    if unknown:
        raise ConfigError(f"unknown run setting(s): {', '.join(unknown)}")
    # types and ranges first, by the schema the suite configs are checked against, so
    # that `--set hidden=abc` is named here rather than failing a comparison below
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
    _raise_first_error(_validator("run", study), {k: v for k, v in plain.items() if k != "seed"})
    if "seed" in plain:
        _raise_first_error(_validator("seed", study), plain["seed"], root="seed")
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    cfg = cls(**kw)
    studies.load(spec.check)(cfg)
    return cfg


def check_run(cfg: RunConfig) -> None:
    """Value checks for one run; each error names the key."""

    def bad(key: str, why: str) -> None:
        raise ConfigError(f"{key}={getattr(cfg, key)!r}: {why}")

    if cfg.dataset not in DATASETS:
        bad("dataset", f"unknown dataset, expected one of {', '.join(DATASETS)}")
    if not 0.0 <= cfg.shared <= 1.0:
        bad("shared", "must be in [0, 1]")
    if cfg.hidden < 1:
        bad("hidden", "must be >= 1")
    if cfg.shared > 0 and cfg.shared_units == 0 and cfg.tasks and cfg.anchors > 0:
        bad(
            "shared",
            f"x hidden {cfg.hidden} rounds to 0 shared units: tasks {list(cfg.tasks)} need at least 1",
        )
    if any(t not in TASKS for t in cfg.tasks):
        bad("tasks", f"each task must be one of {', '.join(TASKS)}")
    if cfg.anchors < 0:
        bad("anchors", "must be >= 0")
    if cfg.window < 1:
        bad("window", "must be >= 1")
    if cfg.sampling not in ("stratified", "uniform"):
        bad("sampling", "must be 'stratified' or 'uniform'")
    if cfg.decoder_input not in ("teacher", "estimate"):
        bad("decoder_input", "must be 'teacher' or 'estimate'")
    if cfg.head not in ("linear", "mlp"):
        bad("head", "must be 'linear' or 'mlp'")
    if cfg.optimizer not in OPTIMIZERS:
        bad("optimizer", f"must be one of {', '.join(OPTIMIZERS)}")
    if cfg.init not in INITS:
        bad("init", f"must be one of {', '.join(INITS)}")
    for key in ("lr", "batch_size", "max_epochs", "restart_epochs", "restart_mult", "decoder_layers"):
        if getattr(cfg, key) <= 0:
            bad(key, "must be > 0")
    for key in ("patience", "clip", "weight_decay", "momentum", "aux_weight", "embedding", "capture_samples"):
        if getattr(cfg, key) < 0:
            bad(key, "must be >= 0")


# --- suite configs -----------------------------------------------------------------------


def validate_suite(cfg: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Check a suite config against the JSON Schema, then the cross-key rules.

    Raises ConfigError naming the offending key (e.g. `experiments.mnist_ps.shared`).
    """
    study = cfg.get("study", studies.DEFAULT) if isinstance(cfg, dict) else studies.DEFAULT
    if study not in studies.STUDIES:
        raise ConfigError(f"{source}: study: {study!r} is not a study; known: {', '.join(studies.STUDIES)}")
    _raise_first_error(_validator(None, study), cfg, source=source)
    spec = studies.STUDIES[study]
    for name, exp in cfg["experiments"].items():
        if exp["dataset"] not in cfg["datasets"]:
            raise ConfigError(
                f"{source}: experiments.{name}.dataset: {exp['dataset']!r} is not listed under datasets"
            )
        for point in grid_points(exp):
            values = {
                k: v
                for k, v in {**cfg.get("defaults", {}), **exp, **point[1]}.items()
                if k not in EXPERIMENT_META
            }
            try:
                run = coerce_run(values, study)
            except (ConfigError, TypeError) as err:
                raise ConfigError(f"{source}: experiments.{name}: {err}") from None
            if spec.check_in_suite:
                studies.load(spec.check_in_suite)(cfg, name, run, source)
    return cfg


def suite_schema(study: str = studies.DEFAULT) -> dict[str, Any]:
    """config/schema.yaml, with the study's overlay (its run settings, datasets) replacing
    the same-named entries, and `#/$defs/grid` given one property per run setting: a list
    whose items are checked as that setting is (so a wrong grid value is named before
    any grid point is built)."""
    schema = load_yaml(SCHEMA_PATH)
    schema["properties"]["study"]["enum"] = list(studies.STUDIES)  # every row of the registry
    overlay = studies.STUDIES[study].schema
    if overlay:
        extra = load_yaml(ROOT / overlay)
        schema["properties"].update(extra.get("properties", {}))
        schema["$defs"].update(extra.get("$defs", {}))
    defs = schema["$defs"]
    values = {"type": "array", "minItems": 1, "uniqueItems": True}  # a repeat would train a folder twice
    defs["grid"]["properties"] = {
        key: {**values, "items": {"$ref": f"#/$defs/run/properties/{key}"}}
        for key in defs["run"]["properties"]
        if key not in EXPERIMENT_META
    }
    defs["grid"]["properties"][TIED] = {
        "description": "settings that vary together: each item (some run settings) is one "
        "choice, crossed with the other keys' values (e.g. attention shapes of a table)",
        "type": "array",
        "minItems": 1,
        "items": {"$ref": "#/$defs/run", "minProperties": 1},
    }
    return schema


@functools.cache
def _validator(definition: str | None = None, study: str = studies.DEFAULT) -> Any:
    """A JSON Schema validator of a whole suite config of `study`, or of one of its `$defs`
    (run, seed). "integer" is strict: 64.0 (or 1e2) is not an integer, as Python sees it;
    "number" is finite (.nan and .inf parse as YAML floats: no setting takes one)."""
    import jsonschema

    schema = suite_schema(study)
    if definition is not None:
        schema = {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine_many(  # True is an int to Python, not to a config
        {
            "integer": lambda _, v: isinstance(v, int) and type(v) is not bool,
            "number": lambda _, v: isinstance(v, int | float) and type(v) is not bool and math.isfinite(v),
        }
    )
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


def _raise_first_error(validator: Any, instance: Any, source: str = "", root: str = "") -> None:
    """ConfigError `[source: ]key: message` for the first error in key order, if any. A
    schema entry's `errorMessage` replaces jsonschema's (e.g. the accepted device names)."""
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    e = errors[0]
    key = root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
    custom = e.schema.get("errorMessage") if isinstance(e.schema, dict) else None
    message = f"{e.instance!r} {custom}" if custom else e.message
    if isinstance(e.instance, float) and not math.isfinite(e.instance):
        message = f"{e.instance!r} is not a finite number"
    prefix = f"{source}: " if source else ""
    raise ConfigError(f"{prefix}{key.lstrip('.') or '(top level)'}: {message}")


def min_length(cfg: dict[str, Any], dataset: str) -> int:
    """The shortest sequence a dataset can hold under this config (for window checks)."""
    return REGISTRY[dataset].min_length(cfg["datasets"][dataset].get("prepare"))


def check_window(cfg: dict[str, Any], name: str, run: RunConfig, source: str) -> None:
    if not run.has_aux:
        return
    n = min_length(cfg, run.dataset)
    if not REGISTRY[run.dataset].short_texts and n - 2 * run.window < run.anchors:
        raise ConfigError(
            f"{source}: experiments.{name}.anchors/window: {run.anchors} anchor(s) need n - 2 x window >= "
            f"anchors, but window {run.window} leaves {max(n - 2 * run.window, 0)} of n = {n} steps"
        )


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load and validate a suite config; `overrides` are merged into the top level first."""
    cfg = load_yaml(path)
    for key, value in (overrides or {}).items():
        cfg[key] = value
    return validate_suite(cfg, source=str(path))


def dataset_options(path: str | Path, dataset: str, section: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(suite config, a copy of `datasets.<dataset>.<section>`) for the data commands."""
    cfg = load_suite(path)
    if dataset not in cfg["datasets"]:
        raise ConfigError(f"{path}: dataset {dataset!r} is not listed under datasets")
    if not studies.study_of(cfg).data_jobs:
        raise ConfigError(
            f"{path}: study {cfg.get('study')}'s runs make their own data: nothing to {section}"
        )
    return cfg, dict(cfg["datasets"][dataset].get(section) or {})


def search_seed(cfg: dict[str, Any]) -> int:
    """The seed of the grid-search runs: `search_seed`, else the first of `seeds`."""
    return int(cfg.get("search_seed", cfg["seeds"][0]))


def enabled_datasets(cfg: dict[str, Any]) -> list[str]:
    """The datasets the suite uses: not `enabled: false`, and trained on by an experiment
    (one no experiment uses is neither downloaded, prepared nor reported)."""
    used = {exp["dataset"] for exp in cfg["experiments"].values()}
    return [d for d, opts in cfg["datasets"].items() if opts.get("enabled", True) and d in used]


def enabled_experiments(cfg: dict[str, Any]) -> list[str]:
    on = set(enabled_datasets(cfg))
    return [n for n, e in cfg["experiments"].items() if e["dataset"] in on]


def resolve_run(
    cfg: dict[str, Any],
    experiment: str,
    seed: int,
    point: str | None = None,
    selected: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> RunConfig:
    """The RunConfig of one (experiment, seed[, grid point]).

    `point` picks a grid point by id (search runs); `selected` is the chosen point's
    overrides (final runs after the search); `overrides` are the command line's --set.
    """
    if experiment not in cfg["experiments"]:
        raise ConfigError(
            f"unknown experiment {experiment!r}; known: {', '.join(sorted(cfg['experiments']))}"
        )
    exp = cfg["experiments"][experiment]
    values: dict[str, Any] = dict(cfg.get("defaults", {}))
    values.update({k: v for k, v in exp.items() if k not in EXPERIMENT_META})
    if point is not None:
        chosen = point_overrides(exp, point)
        if chosen is None:
            known = [pid for pid, _ in grid_points(exp)]
            raise ConfigError(
                f"experiments.{experiment}: unknown grid point {point!r}; known: {', '.join(known)}"
            )
        values.update(chosen)
    values.update(selected or {})
    values.update(overrides or {})
    values["seed"] = seed
    study = studies.study_of(cfg)
    if study.data_jobs:
        values.setdefault("data_dir", str(data_root(cfg) / "prepared" / exp["dataset"]))
    return coerce_run(values, study.name)
