"""Suite configs: the file that names a study's datasets, seeds, defaults and experiments.

    python -m psrnn config config/small.yaml            # validate, print the runs
    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0

A *suite config* (`config/small.yaml`, `config/paper.yaml`) names the datasets, seeds,
defaults and experiments; it is validated against `config/schema.yaml` (JSON Schema
2020-12) before anything runs. Every experiment resolves, per seed, to its
study's flat run settings (the first study's `RunConfig`,
psrnn.studies.private_shared.settings):
defaults < experiment < selected grid point < command-line `--set`. Config files and `--set`
values are read by psrnn.yamlfiles (YAML as PyYAML reads it, except that 1e-3 is a number
as in YAML 1.2 and a repeated key is an error). Grid points and the folders of data, runs
and searches: psrnn.paths. Both are importable from here too.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from psrnn import registry
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

# Keys an experiment may carry besides its study's run settings.
EXPERIMENT_META = ("ref", "grid", "note", "figure")


def coerce_run(values: dict[str, Any], study: str = registry.DEFAULT) -> Any:
    """The study's run settings (RunConfig for the first study) from a plain dict (lists
    become tuples); unknown keys are an error."""
    spec = registry.STUDIES[study]
    cls = registry.load(spec.run_config)
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
    registry.load(spec.check)(cfg)
    return cfg


# --- suite configs -----------------------------------------------------------------------


def validate_suite(cfg: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Check a suite config against the JSON Schema, then the cross-key rules.

    Raises ConfigError naming the offending key (e.g. `experiments.mnist_ps.shared`).
    """
    study = registry.study_name(cfg) if isinstance(cfg, dict) else registry.DEFAULT
    if study not in registry.STUDIES:
        raise ConfigError(f"{source}: study: {study!r} is not a study; known: {', '.join(registry.STUDIES)}")
    _raise_first_error(_validator(None, study), cfg, source=source)
    spec = registry.STUDIES[study]
    check_fixtures_folder(cfg, source)
    check_per_dataset(cfg, spec, source)
    for name, exp in cfg["experiments"].items():
        if exp["dataset"] not in cfg["datasets"]:
            raise ConfigError(
                f"{source}: experiments.{name}.dataset: {exp['dataset']!r} is not listed under datasets"
            )
        check_grid_ids(exp, f"{source}: experiments.{name}.grid")
        for point in grid_points(exp):
            values = layered(cfg, exp, point[1])
            try:
                run = coerce_run(values, study)
            except (ConfigError, TypeError) as err:
                raise ConfigError(f"{source}: experiments.{name}: {err}") from None
            if spec.check_in_suite:
                registry.load(spec.check_in_suite)(cfg, name, run, source)
    return cfg


def check_fixtures_folder(cfg: dict[str, Any], source: str) -> None:
    """`fixtures:` is a folder the workflow's fixtures job writes, read from the working
    folder (the checkout, where Snakemake and DVC run and data/ and results/ go): it must lie
    inside it, so that a config cannot make a job write elsewhere (`../../x`). Compared as
    written, not through links: data/ may link out of the checkout."""
    folder = cfg.get("fixtures")
    if not folder:
        return
    here = Path.cwd()
    if here not in Path(os.path.normpath(here / folder)).parents:
        raise ConfigError(
            f"{source}: fixtures: {folder!r} is not inside the working folder {here}: name a folder in "
            "it (config/small.yaml's is data/small/fixtures)"
        )


def check_grid_ids(exp: dict[str, Any], where: str) -> None:
    """Two grid points with one id (folder name) would share a search run: one never trains
    and the other counts twice. Ids drop brackets and commas (paths._slug), so [[1, 2], [12]]
    gives two `capture_epochs-12`; a repeated `tied` item is such a pair too."""
    tied = (exp.get("grid") or {}).get(TIED) or []
    for i, item in enumerate(tied):
        if item in tied[:i]:
            raise ConfigError(f"{where}.{TIED}: item {i + 1} repeats item {tied.index(item) + 1} ({item})")
    seen: dict[str, dict[str, Any]] = {}
    for pid, values in grid_points(exp):
        if pid in seen:
            raise ConfigError(
                f"{where}: the points {seen[pid]} and {values} get one id, {pid!r} (ids keep letters, digits "
                "and . + - of each value): give the values distinct spellings"
            )
        seen[pid] = values


def check_per_dataset(cfg: dict[str, Any], spec: registry.Study, source: str) -> None:
    """The study's per-dataset settings (Study.per_dataset) are never set for all datasets in
    `defaults:`, and a paper-scale config chooses each for every dataset it trains on (or
    every experiment of that dataset sets it), so that no dataset inherits another's."""
    for key in spec.per_dataset:
        if key in cfg.get("defaults", {}):
            raise ConfigError(
                f"{source}: defaults.{key}: {key} is chosen per dataset, with its evidence: "
                f"datasets.<dataset>.settings.{key}: {{value: ..., evidence: ...}}"
            )
        if not cfg.get("paper_scale"):
            continue
        for ds in enabled_datasets(cfg):
            if key in dataset_settings(cfg, ds):
                continue
            unset = [n for n, e in cfg["experiments"].items() if e["dataset"] == ds and key not in e]
            if unset:
                raise ConfigError(
                    f"{source}: datasets.{ds}.settings.{key}: not chosen for {ds} (experiments "
                    f"{', '.join(unset)}): a paper-scale config chooses {key} per dataset, with its evidence"
                )


def dataset_choices(cfg: dict[str, Any], dataset: str) -> dict[str, tuple[Any, str]]:
    """`datasets.<dataset>.settings`: run setting -> (value, its evidence on one line)."""
    chosen = (cfg.get("datasets", {}).get(dataset) or {}).get("settings") or {}
    return {key: (entry["value"], " ".join(entry["evidence"].split())) for key, entry in chosen.items()}


def dataset_settings(cfg: dict[str, Any], dataset: str) -> dict[str, Any]:
    """`datasets.<dataset>.settings` as run settings (their values; the evidence is for
    people: `python -m psrnn config`, REPORT)."""
    return {key: value for key, (value, _) in dataset_choices(cfg, dataset).items()}


def layered(cfg: dict[str, Any], exp: dict[str, Any], *more: dict[str, Any] | None) -> dict[str, Any]:
    """An experiment's run settings, lowest first: `defaults`, its dataset's `settings`, the
    experiment's own keys (EXPERIMENT_META aside), then each of `more` (a grid point, a
    selection, the command line's --set)."""
    values: dict[str, Any] = dict(cfg.get("defaults", {}))
    values.update(dataset_settings(cfg, exp["dataset"]))
    values.update({k: v for k, v in exp.items() if k not in EXPERIMENT_META})
    for extra in more:
        values.update(extra or {})
    return values


def suite_schema(study: str = registry.DEFAULT) -> dict[str, Any]:
    """config/schema.yaml, with the study's overlay (its run settings, datasets) replacing
    the same-named entries, and `#/$defs/grid` given one property per run setting: a list
    whose items are checked as that setting is (so a wrong grid value is named before
    any grid point is built)."""
    schema = load_yaml(SCHEMA_PATH)
    # every row of the registry, and the old names that still read as one (registry.ALIASES)
    schema["properties"]["study"]["enum"] = [*registry.STUDIES, *registry.ALIASES]
    names = schema["properties"]["job_env"]["propertyNames"]  # exact names, listed when refused
    names["errorMessage"] = (
        f"is not a variable job_env may set: it takes {', '.join(names['enum'])} only (docs/workflow.md "
        "says why; others could make every job load other code or write files)"
    )
    overlay = registry.STUDIES[study].schema
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
    dataset = defs["dataset"]["properties"]
    if "settings" in dataset:  # a study whose datasets take per-dataset run settings
        dataset["settings"]["properties"] = {
            key: {
                "type": "object",
                "required": ["value", "evidence"],
                "additionalProperties": False,
                "properties": {
                    "value": {"$ref": f"#/$defs/run/properties/{key}"},
                    "evidence": {
                        "type": "string",
                        "minLength": 20,
                        "description": "the measurement the value rests on, or that none exists",
                    },
                },
            }
            for key in defs["run"]["properties"]
            if key not in (*EXPERIMENT_META, "dataset")
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
def _validator(definition: str | None = None, study: str = registry.DEFAULT) -> Any:
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


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load and validate a suite config; `overrides` are merged into the top level first."""
    cfg = load_yaml(path)
    for key, value in (overrides or {}).items():
        cfg[key] = value
    validate_suite(cfg, source=str(path))
    check_name_owner(cfg, Path(path))
    return cfg


def check_name_owner(cfg: dict[str, Any], path: Path) -> None:
    """results/<name> is <name>.yaml's where the config's own folder (config/) has that
    file: another config may write there only through it, extending it (directly or not, as
    paper-dbpedia.yaml extends paper.yaml and shares its runs) or extended by it. A copy of
    small.yaml that kept `name: small`, or a config of another study named so, passed, and
    its compile replaced the committed results/small (battery N28). Of the other files
    only the one bearing the name is read (a broken config beside it stops no other), so
    two files both named unlike themselves, or one outside config/, are compile's and the
    Snakefile's to refuse where their studies differ (psrnn.compile.check_folder_study)."""
    name, here = cfg["name"], path.resolve()
    owner = (here.parent / f"{name}.yaml").resolve()
    if owner == here or not owner.is_file() or owner in _extended(here) or here in _extended(owner):
        return
    raise ConfigError(
        f"{path}: name: {name!r} is {owner.name}'s (its results folder results/{name}): give this "
        f"config a name of its own (or extend {owner.name} to share its runs)"
    )


def _extended(path: Path) -> list[Path]:
    """The files `path` extends, directly or not (load_yaml has refused a circle); a file
    that does not read ends the chain (its own load names it)."""
    out: list[Path] = []
    while True:
        try:
            data = read_yaml(path)
        except (ConfigError, OSError):
            return out
        base = data.get("extends") if isinstance(data, dict) else None
        if not isinstance(base, str) or (path := (path.parent / base).resolve()) in out:
            return out
        out.append(path)


def dataset_options(path: str | Path, dataset: str, section: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(suite config, a copy of `datasets.<dataset>.<section>`) for the data commands."""
    cfg = load_suite(path)
    if dataset not in cfg["datasets"]:
        raise ConfigError(f"{path}: dataset {dataset!r} is not listed under datasets")
    if not registry.study_of(cfg).data_jobs:
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
) -> Any:
    """The run settings (the study's dataclass) of one (experiment, seed[, grid point]).

    `point` picks a grid point by id (search runs); `selected` is the chosen point's
    overrides (final runs after the search); `overrides` are the command line's --set, checked
    against the suite as the config's own values are (the study's check_in_suite).
    """
    if experiment not in cfg["experiments"]:
        raise ConfigError(
            f"unknown experiment {experiment!r}; known: {', '.join(sorted(cfg['experiments']))}"
        )
    exp = cfg["experiments"][experiment]
    chosen = None
    if point is not None:
        chosen = point_overrides(exp, point)
        if chosen is None:
            known = [pid for pid, _ in grid_points(exp)]
            raise ConfigError(
                f"experiments.{experiment}: unknown grid point {point!r}; known: {', '.join(known)}"
            )
    values = layered(cfg, exp, chosen, selected, overrides)
    values["seed"] = seed
    study = registry.study_of(cfg)
    if study.data_jobs:
        values.setdefault("data_dir", str(data_root(cfg) / "prepared" / exp["dataset"]))
    run = coerce_run(values, study.name)
    if overrides and study.check_in_suite:  # --set meets the checks the config's values met (validate_suite)
        registry.load(study.check_in_suite)(cfg, experiment, run, "--set")
    return run
