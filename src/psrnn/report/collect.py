"""Reading finished runs, dataset manifests and the reference file (the I/O edge of compile).

    python -m psrnn compile --config config/small.yaml

A run counts as finished when its `metrics.json` exists (training writes it last), so a
run still in progress or never started is simply missing, never a zero.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from psrnn import config as C
from psrnn import registry
from psrnn.errors import UserError
from psrnn.files import read_json
from psrnn.report import fmt
from psrnn.report.records import (
    LENGTH_ACCURACIES,
    check_derived,
    check_kernel_env,
    check_lengths,
    check_reused,
)


@dataclass(frozen=True)
class Run:
    """One finished (experiment, seed): its folder and its metrics.json."""

    experiment: str
    seed: int
    dir: Path
    metrics: dict[str, Any]

    def value(self, key: str) -> float:
        v = self.metrics.get(key)
        return math.nan if v is None else float(v)


@dataclass
class Suite:
    """Everything compile reads, gathered once; tables, figures and the report are pure
    functions of it."""

    cfg: dict[str, Any]
    reference: dict[str, Any]
    runs: dict[str, list[Run]]  # enabled experiment -> finished runs, by seed
    settings: dict[str, dict[str, Any]]  # enabled experiment -> resolved RunConfig dict
    manifests: dict[str, dict[str, Any]]  # dataset -> manifest.json (prepared datasets only)
    search: list[dict[str, Any]] = field(default_factory=list)  # search runs' metrics.json
    # experiment with a grid -> its selected.json (the one its final runs were checked against)
    selections: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # other *.md beside REPORT.md: how the runs were made

    @property
    def name(self) -> str:
        return self.cfg["name"]

    @property
    def paper_scale(self) -> bool:
        return bool(self.cfg.get("paper_scale", False))

    @property
    def reduced_scale(self) -> bool:
        """A check at reduced scale that names itself (`scale_label`, e.g. config/mnist-real.yaml):
        its seeds read the paper's orderings, labelled as at this scale; its values are not
        compared with the paper's. The small configs (no scale_label) read nothing."""
        return not self.paper_scale and "scale_label" in self.cfg

    @property
    def scale_name(self) -> str:
        """What a config that is not paper-scale is ("reduced-scale check on real digits",
        "small config")."""
        return fmt.scale_name(self.cfg)

    @property
    def scale_label(self) -> str | None:
        """The label every table, figure and report of a config that is not paper-scale
        carries ("small config — not a reproduction of the paper"); None at paper scale."""
        return fmt.not_paper_label(self.cfg)

    @property
    def experiments(self) -> list[str]:
        """Enabled experiments in config order (the order of every listing)."""
        return list(self.settings)

    def ref_of(self, experiment: str) -> str | None:
        return self.cfg["experiments"][experiment].get("ref")

    def experiments_for(self, ref_id: str) -> list[str]:
        return [e for e in self.experiments if self.ref_of(e) == ref_id]


# --- reference ----------------------------------------------------------------------------


def load_reference(path: str | Path) -> dict[str, Any]:
    """A study's reference numbers (config/reference.yaml, config/relreg-reference.yaml),
    read as the suite configs are (a syntax error is `file:line:column: problem`)."""
    from psrnn.yamlfiles import read_yaml

    path = Path(path)
    if not path.is_file():
        raise UserError(f"reference file not found: {path}")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a reference file (a mapping of tables expected)")
    return {**data, "file": str(path)}  # named by the checks of its `ref:`s


def reference_ids(cfg: dict[str, Any], reference: dict[str, Any]) -> set[str]:
    """The ids of `reference`'s rows a `ref:` of `cfg` may name: what its study's
    `reference_ids` (psrnn.registry.Study) says of it (the first study: Tables 2-4's and the
    figures' rows; the second: Table 4.5's and the figures')."""
    return set(registry.load(registry.study_of(cfg).reference_ids)(reference))


def check_refs(cfg: dict[str, Any], reference: dict[str, Any]) -> None:
    """A `ref:` that names no reference row is a typo that would silently drop a row."""
    known = reference_ids(cfg, reference)
    for name, exp in cfg["experiments"].items():
        ref = exp.get("ref")
        if ref is not None and ref not in known:
            raise C.ConfigError(
                f"experiments.{name}.ref: {ref!r} is not a row of "
                f"{reference.get('file', registry.study_of(cfg).reference)}"
            )


# --- runs ---------------------------------------------------------------------------------


# what every run's metrics.json must hold for compile to read it (psrnn.engine.fit writes more)
REQUIRED = ("experiment", "seed", "test_acc", "best_valid_acc", "best_epoch", "epochs_run", "config")
ACCURACIES = ("test_acc", "best_valid_acc")  # fractions in [0, 1]


def suite_run(cfg: dict[str, Any], path: Path, experiment: str, seed: int, point: str | None = None) -> dict:
    """A run's metrics.json, checked to be a run of this suite: its required keys, its
    accuracies in [0, 1], and its recorded settings those the suite gives that run (a final
    run: those of one of the experiment's grid points, the one selection chose). Anything
    else is a UserError naming the file: a run of other settings or an edited record is
    never compiled as the suite's."""
    from psrnn.engine.checkpoint import config_differences

    m = read_json(path)
    missing = [k for k in REQUIRED if not isinstance(m, dict) or k not in m]
    if missing:
        raise UserError(f"{path}: not a finished run's record (no {', '.join(missing)}); delete its folder")
    accuracies = [(key, m[key]) for key in ACCURACIES]
    per_length = m.get("test") if isinstance(m.get("test"), dict) else {}  # the second study's
    accuracies += [
        (f"test.{k}.{f}", t[f])
        for k, t in per_length.items()
        if isinstance(t, dict)
        for f in LENGTH_ACCURACIES
        if f in t
    ]
    for key, v in accuracies:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
            raise UserError(f"{path}: {key} = {v!r} is not an accuracy in [0, 1]; delete its folder")
    if m["seed"] != seed or m["experiment"] != experiment:
        raise UserError(
            f"{path}: records experiment {m['experiment']!r} seed {m['seed']}, not {experiment} {seed}"
        )
    exp = cfg["experiments"][experiment]
    points: list[str | None] = [point] if point is not None else [pid for pid, _ in C.grid_points(exp)]
    points = points or [None]  # no grid: the experiment's one setting
    # the points whose own settings the record carries first (usually one): a large grid is
    # then resolved in full only for a record that is no run of the suite
    recorded = m["config"]
    points.sort(key=lambda p: p is not None and any(recorded.get(k) != v for k, v in point_settings(exp, p)))
    tried = []
    for pid in points:
        overrides = C.point_overrides(exp, pid) if pid is not None else None
        run = C.resolve_run(cfg, experiment, seed, selected=overrides)
        diff = config_differences(m["config"], run)
        if not diff:
            check_lengths(path, m, run)
            check_derived(path, m, run)
            check_kernel_env(path, m, cfg)
            check_reused(path, m, cfg)
            return m
        tried.append(diff)
    fewest = min(tried, key=len)
    raise UserError(
        f"{path}: not a run of this suite's settings ({'; '.join(fewest[:3])}); "
        "`python -m psrnn stale --config <config> --forget` has Snakemake train it again"
    )


def point_settings(exp: dict[str, Any], point: str) -> list[tuple[str, Any]]:
    """The settings grid point `point` sets, as (key, value), values as records hold them."""
    return [
        (k, list(v) if isinstance(v, tuple) else v) for k, v in (C.point_overrides(exp, point) or {}).items()
    ]


def load_runs(
    cfg: dict[str, Any], results_dir: Path, selections: dict[str, dict[str, Any]] | None = None
) -> dict[str, list[Run]]:
    """Finished runs of every enabled experiment for the config's seeds (sorted), each
    checked to be the suite's (suite_run) against its selection (`selections`, as
    load_selections reads them; read here if not given)."""
    from psrnn.engine.selection import overrides_for

    if selections is None:
        selections = load_selections(cfg, results_dir)
    out: dict[str, list[Run]] = {}
    points: dict[Path, str | None] = {}  # run folder -> its grid point (None: the one point)
    for exp in C.enabled_experiments(cfg):
        sel = selections.get(exp)
        runs = []
        for seed in sorted(cfg["seeds"]):
            d = results_dir / "runs" / exp / f"seed{seed}"
            if (d / "metrics.json").is_file():
                point = overrides_for(sel, seed)[0] if sel else None
                runs.append(Run(exp, seed, d, suite_run(cfg, d / "metrics.json", exp, seed, point=point)))
                require_files(d, ("history.csv",))
                points[d] = point
        check_params(runs, points)
        out[exp] = runs
    return out


def check_params(runs: list[Run], points: dict[Path, str | None]) -> None:
    """One experiment's runs at one grid point record one parameter count (battery N-AB15)."""
    by_point: dict[str | None, list[Run]] = {}
    for run in (r for r in runs if "params" in r.metrics):
        by_point.setdefault(points[run.dir], []).append(run)
    for group in by_point.values():
        usual = Counter(r.metrics["params"] for r in group).most_common(1)[0][0]
        for odd in (r for r in group if r.metrics["params"] != usual):
            other = next(r.dir / "metrics.json" for r in group if r.metrics["params"] == usual)
            raise UserError(
                f"{odd.dir / 'metrics.json'}: params = {odd.metrics['params']!r}, but {other} (the same "
                f"settings) has {usual!r}: one was edited; delete its folder"
            )


def require_files(run_dir: Path, names: tuple[str, ...]) -> None:
    """A finished run is all its files (training writes metrics.json last): one of `names`
    missing was deleted, and figures would count fewer runs than tables. A UserError."""
    for name in names:
        if not (run_dir / name).is_file():
            raise UserError(
                f"{run_dir / name}: missing from a finished run (its metrics.json is there; training "
                "writes that last); delete its folder"
            )


def load_selections(cfg: dict[str, Any], results_dir: Path) -> dict[str, dict[str, Any]]:
    """Enabled experiment -> its selected.json under `results_dir` (read_selection), for the
    experiments that have one."""
    found = {exp: read_selection(cfg, results_dir, exp) for exp in C.enabled_experiments(cfg)}
    return {exp: sel for exp, sel in found.items() if sel is not None}


def read_selection(cfg: dict[str, Any], results_dir: Path, experiment: str) -> dict[str, Any] | None:
    """The experiment's selected.json under `results_dir` when it has a grid and one is
    there (its final runs must then be of the point it gives their seed), else None."""
    from psrnn.engine.selection import read_selected

    if not C.has_grid(cfg, experiment):
        return None
    path = results_dir / C.selection_path(cfg, experiment).relative_to(C.results_root(cfg))
    if not path.is_file():
        return None
    try:
        return read_selected(path, experiment)
    except UserError:
        raise
    except (ValueError, OSError) as err:
        raise UserError(
            f"{path}: not a readable selected.json ({err}); run `python -m psrnn select` again"
        ) from err


def load_settings(cfg: dict[str, Any], runs: dict[str, list[Run]]) -> dict[str, dict[str, Any]]:
    """Each experiment's run settings: from its first run when there is one (the truth,
    grid selection included), else resolved from the config."""
    out = {}
    for exp, rs in runs.items():
        if rs and isinstance(rs[0].metrics.get("config"), dict):
            out[exp] = rs[0].metrics["config"]
        else:
            out[exp] = C.resolve_run(cfg, exp, sorted(cfg["seeds"])[0]).to_dict()
    return out


def load_search(cfg: dict[str, Any], results_dir: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """experiment -> grid point -> metrics.json of every grid-search run of the suite's
    experiments (the selections are checked against them; only their wall time is
    reported), each checked to be the suite's (suite_run); folders of experiments or points
    the suite no longer has are left out."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted((results_dir / "search").glob("*/*/metrics.json")):
        exp, pid = path.parent.parent.name, path.parent.name
        if exp in cfg["experiments"] and pid in {p for p, _ in C.grid_points(cfg["experiments"][exp])}:
            out.setdefault(exp, {})[pid] = suite_run(cfg, path, exp, C.search_seed(cfg), point=pid)
    return out


def check_selections(
    cfg: dict[str, Any],
    results_dir: Path,
    selections: dict[str, dict[str, Any]],
    search: dict[str, dict[str, dict[str, Any]]],
) -> None:
    """Each selected.json is the selection its search runs' records give (`search`, as
    load_search reads them): select's rule re-applied (psrnn.engine.ranking.chosen: the
    study's metric, the suite's `ties:`, a `ties: draw` drawn again, which is deterministic)
    over the grid points that have a record (none: nothing to check). A hand-edited
    selected.json, a worse point under the stamp of the right one, once had its final runs
    trained and compiled as the suite's; it is now a UserError naming the file and both
    points."""
    from psrnn.engine import ranking

    for exp, sel in selections.items():
        path = results_dir / C.selection_path(cfg, exp).relative_to(C.results_root(cfg))
        records = search.get(exp, {})
        points = [(pid, o) for pid, o in C.grid_points(cfg["experiments"][exp]) if pid in records]
        if not points:  # nothing to check it against (a suite compared before its search ran)
            continue
        metric = registry.study_of(cfg).selection
        for pid, _ in points:
            ranking.check_record(exp, pid, records[pid], metric)
        want = ranking.chosen(cfg, exp, {pid: records[pid] for pid, _ in points}, points)
        how = f"by {metric[0]}, ties: {cfg.get('ties', 'loss')}"
        for seed in cfg["seeds"] if want.get("draws") or sel.get("draws") else [None]:
            mine = _picked(sel, seed)
            theirs = _picked(want, seed)
            if mine != theirs:
                where = "" if seed is None else f" for seed {seed}"
                raise UserError(
                    f"{path}: selects {_shown(mine)}{where}, but its search runs' records select "
                    f"{_shown(theirs)} ({how}); run `python -m psrnn select` again"
                )


def _picked(sel: dict[str, Any], seed: int | None) -> tuple[Any, Any]:
    """(point, overrides) a selection gives the final run of `seed` (None: its one point),
    the overrides as selected.json holds them (a grid's tuples as lists)."""
    found = [sel]
    if seed is not None and sel.get("draws"):
        found = [d for d in sel["draws"] if isinstance(d, dict) and d.get("seed") == seed] or [{}]
    return found[0].get("point"), json.loads(json.dumps(found[0].get("overrides")))


def _shown(picked: tuple[Any, Any]) -> str:
    point, overrides = picked
    return f"{point} (overrides {json.dumps(overrides, sort_keys=True)})"


def load_manifests(cfg: dict[str, Any], data_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for ds in C.enabled_datasets(cfg):
        p = data_dir / "prepared" / ds / "manifest.json"
        if p.is_file():
            out[ds] = read_json(p)
    return out


def gather(cfg: dict[str, Any], reference: dict[str, Any], results_dir: Path, data_dir: Path) -> Suite:
    check_refs(cfg, reference)
    selections = load_selections(cfg, results_dir)
    search = load_search(cfg, results_dir)
    check_selections(cfg, results_dir, selections, search)
    runs = load_runs(cfg, results_dir, selections)
    return Suite(
        cfg=cfg,
        reference=reference,
        runs=runs,
        selections=selections,
        settings=load_settings(cfg, runs),
        manifests=load_manifests(cfg, data_dir),
        search=[m for points in search.values() for m in points.values()],
        notes=load_notes(results_dir),
    )


def all_runs(s: Suite) -> list[Run]:
    """Every finished run of the suite's enabled experiments, in config order."""
    return [r for exp in s.experiments for r in s.runs.get(exp, [])]


def load_notes(results_dir: Path) -> list[str]:
    """The notes a person left beside the report (RUN.md, GPU-RUN.md, ...), by name."""
    return sorted(p.name for p in results_dir.glob("*.md") if p.name != "REPORT.md")


def load_history(run: Any, columns: tuple[str, ...] | None = None) -> pd.DataFrame | None:
    """A finished run's history.csv (`columns` and its epochs only, if given), None when it
    has none; a damaged one (unreadable, a column missing, a value of `columns` that is no
    number, epochs other than 1..epochs_run of its metrics.json, as a cut file has) is a
    UserError naming it: compile never plots or averages part of a run."""
    p = run.dir / "history.csv"
    if not p.is_file():
        return None
    try:
        h = pd.read_csv(io.StringIO(p.read_text()), usecols=None if columns is None else ["epoch", *columns])
    except (ValueError, UnicodeDecodeError, OSError) as err:  # pandas' parser errors are ValueErrors
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{p}: not a readable history ({why}); delete its folder") from None
    for c in columns or ():  # a garbled value makes its column text, not numbers
        if not pd.api.types.is_numeric_dtype(h[c]):
            bad = pd.to_numeric(h[c], errors="coerce").isna() & h[c].notna()
            row = h[bad].iloc[0]
            raise UserError(
                f"{p}: {c} = {row[c]!r} at epoch {row['epoch']} is not a number; delete its folder"
            )
    ran = run.metrics.get("epochs_run")
    epochs = list(h["epoch"]) if "epoch" in h else []
    if isinstance(ran, int) and epochs != list(range(1, ran + 1)):
        raise UserError(
            f"{p}: holds {len(epochs)} epoch row(s), but its metrics.json ran {ran} epochs (cut or edited); "
            "delete its folder"
        )
    return h


def load_npz(path: Path) -> dict[str, np.ndarray] | None:
    """A run's .npz arrays, None when it has none; a damaged one is a UserError naming it."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in sorted(z.files)}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise UserError(f"{path}: damaged ({type(err).__name__}: {err}); delete its run folder") from None
