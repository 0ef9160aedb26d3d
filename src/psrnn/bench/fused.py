"""The fused section: grid-search runs per hour, one process per run against fused runs.

    python -m psrnn bench --only fused --name cpu-amd-epyc-fused   # ~15 min on 2 busy cores
    python -m psrnn bench --only fused --quick                     # one tiny kind, ~20 s

For each model kind of the relation-level regularization study (`study: relreg`), at one
of the thesis' shapes (KINDS: the experiment of config/relreg-full.yaml, or --config, and
the grid settings its members share), the shape's grid points are trained twice, on the
CPU with one thread and the suite's job_env, as the Snakefile starts its jobs:

  alone   the first `alone_runs` points, each a fresh `python -m psrnn train` process
          (rule search: one job per grid point);
  fused   every point of the shape (or the first `fused_runs`) in one
          `python -m psrnn train-group` process (rule search_group under
          `fused_search: true`): one batched model for the kinds of
          psrnn.studies.relreg.settings.FUSED_MODELS, one run after another for the others.

Each is timed by the wall clock and by the process's CPU time (its rusage: user + system),
by default at the config's epochs (30): the runs do the work of the grid search's runs,
and runs per hour (3,600 s over one run's seconds) alone and fused compare the same work.
With --fused-epochs, at fewer: a run's time is a fixed part (start-up, data, the final
test) plus a part per epoch, so with two epoch counts both are fitted, per run, and a
run's time at the config's epochs is extrapolated from them (one count: reported there).
Runs per hour are per core: Snakemake runs as many such processes side by side as --cores.
Python's bytecode is cached for the runs (an untimed run writes it first): a process start
without it compiles torch's sources, seconds of CPU that an installed package never pays.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.files import read_json, write_text
from psrnn.machine import load_average

FUSED_CONFIG = "config/relreg-full.yaml"
# kind -> (experiment of the config, the shape: the grid settings every measured run shares)
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "lstm": ("lstm_l2", {"hidden": 8}),
    "proto": ("proto_both", {"hidden": 8, "cells": 4}),
    "rmc": ("rmc_l2", {"hidden": 8, "key_size": 4, "heads": 2}),
    "transformer": ("transformer_l2", {"hidden": 64, "key_size": 8, "heads": 2, "layers": 1}),
}


@dataclass(frozen=True)
class FusedSettings:
    kinds: tuple[str, ...] = tuple(KINDS)
    epochs: tuple[int, ...] = ()  # epoch counts measured (none: the config's; two: fixed + per-epoch fit)
    alone_runs: int = 2  # runs timed one process each; their mean is one run's time
    fused_runs: int | None = None  # members of the fused process (None: every point of the shape)
    overrides: dict[str, Any] = field(default_factory=dict)  # run settings of every measured run


FULL_FUSED = FusedSettings()
QUICK_FUSED = FusedSettings(
    kinds=("lstm",),
    epochs=(1,),
    alone_runs=1,
    fused_runs=2,
    overrides={"train_size": 64, "valid_bits": [4], "test_bits": [5], "test_count": 16},
)


# --- the measured runs ---------------------------------------------------------------------


def shape_points(raw: dict[str, Any], experiment: str, shape: dict[str, Any]) -> list[dict[str, Any]]:
    """The grid points (their settings) of `experiment` in the raw suite `raw` whose
    settings match `shape`, in grid order."""
    exp = raw["experiments"][experiment]
    defaults = raw.get("defaults", {})
    return [
        values
        for _, values in C.grid_points(exp)
        if all(values.get(k, exp.get(k, defaults.get(k))) == v for k, v in shape.items())
    ]


def bench_suite(
    raw: dict[str, Any], kind: str, points: list[dict[str, Any]], epochs: int, overrides: dict[str, Any]
) -> dict[str, Any]:
    """A suite of one experiment, `bench_<kind>`: the kind's experiment with `points` as its
    grid (tied), at `epochs` epochs and the `overrides`; everything else as `raw`."""
    experiment, _ = KINDS[kind]
    exp = {k: v for k, v in raw["experiments"][experiment].items() if k not in ("ref", "note", "grid")}
    exp["grid"] = {"tied": points}
    return {
        **{k: v for k, v in raw.items() if k not in ("experiments", "fused_search")},
        "name": f"bench-{kind}-{epochs}",
        "defaults": {**raw.get("defaults", {}), **overrides, "epochs": epochs},
        "experiments": {f"bench_{kind}": exp},
    }


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> dict[str, float]:
    """Run `cmd` to its end: wall seconds and its CPU seconds (user + system, from wait4)."""
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # interrupted: no run left behind
            proc.kill()
            proc.wait()
            raise
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log_path.read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd[1:])}: exit {proc.returncode}: {' | '.join(tail)}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


def job_env(suite: dict[str, Any], pycache: Path) -> dict[str, str]:
    """The environment of a Snakemake training job with one thread: the suite's job_env,
    and Python's bytecode cached in `pycache` (as an installed package has it, even where
    this environment turns writing it off: else every process compiles torch's sources)."""
    env = {**os.environ, **{str(k): str(v) for k, v in (suite.get("job_env") or {}).items()}}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(C.ROOT / "src"), env.get("PYTHONPATH")) if p)
    return env


def measure_kind(
    raw: dict[str, Any], kind: str, s: FusedSettings, scratch: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    """One kind's row: its runs timed alone and fused at each of s.epochs, and runs per hour."""
    import yaml

    from psrnn.studies.relreg.settings import FUSED_MODELS

    experiment, shape = KINDS[kind]
    if experiment not in raw["experiments"]:
        raise ValueError(f"kind {kind}: the config has no experiment {experiment}")
    points = shape_points(raw, experiment, shape)
    if not points:
        raise ValueError(f"kind {kind}: no grid point of {experiment} has the shape {shape}")
    members = points[: s.fused_runs] if s.fused_runs else points
    name, seed = f"bench_{kind}", int(raw.get("search_seed", raw["seeds"][0]))  # the grid search's seed
    measured: list[dict[str, Any]] = []
    load = [load_average()]
    config_epochs = int(raw.get("defaults", {}).get("epochs", 30))
    counts = s.epochs or (config_epochs,)
    for epochs in counts:
        suite = bench_suite(raw, kind, members, epochs, s.overrides)
        here = scratch / f"{kind}-{epochs}"
        (here / "alone").mkdir(parents=True)
        (here / "fused").mkdir()
        cfg = here / "suite.yaml"
        write_text(cfg, yaml.safe_dump(suite, sort_keys=False))
        env = job_env(suite, scratch / "pycache")
        common = ["--config", str(cfg), "--experiment", name, "--restart-on-change", "--threads", "1"]
        if not (scratch / "pycache").is_dir():  # one untimed run first: it writes the bytecode
            pid = C.grid_points(suite["experiments"][name])[0][0]
            cmd = [sys.executable, "-m", "psrnn", "train", *common, "--seed", str(seed), "--point", pid]
            timed([*cmd, "--out", str(here / "warm-up")], here, env, here / "warm-up.log")
        alone = []
        alone_points = [pid for pid, _ in C.grid_points(suite["experiments"][name])[: s.alone_runs]]
        for i, pid in enumerate(alone_points):
            cmd = [sys.executable, "-m", "psrnn", "train", *common, "--seed", str(seed), "--point", pid]
            out = ["--out", str(here / "alone" / pid)]
            alone.append(timed(cmd + out, here / "alone", env, here / f"alone-{i}.log"))
        fused = timed(
            [sys.executable, "-m", "psrnn", "train-group", *common], here / "fused", env, here / "fused.log"
        )
        n = len(alone)
        row: dict[str, Any] = {
            "epochs": epochs,
            "alone": {k: sum(a[k] for a in alone) / n for k in ("wall_s", "cpu_s")},
            "alone_runs_s": alone,
            "fused": {k: fused[k] / len(members) for k in ("wall_s", "cpu_s")},
            "fused_group_s": fused,
            "same_numbers": same_numbers(suite, name, here, alone_points),
        }
        measured.append(row)
        log(
            f"fused {kind} at {epochs} epochs: alone {row['alone']['wall_s']:.1f}s wall "
            f"{row['alone']['cpu_s']:.1f}s CPU per run; fused {len(members)} runs {fused['wall_s']:.1f}s "
            f"wall {fused['cpu_s']:.1f}s CPU ({row['fused']['wall_s']:.2f}s per run)"
        )
        load.append(load_average())
    at = config_epochs if len(counts) > 1 else counts[0]
    per_run = {
        mode: {k: at_epochs(measured, mode, k, at) for k in ("wall_s", "cpu_s")}
        for mode in ("alone", "fused")
    }
    per_hour = {mode: {k: 3600.0 / v for k, v in t.items()} for mode, t in per_run.items()}
    return {
        "kind": kind,
        "experiment": experiment,
        "shape": shape,
        "batched": kind in FUSED_MODELS,
        "shape_runs": len(points),
        "fused_runs": len(members),
        "alone_runs": s.alone_runs,
        "measured": measured,
        "at_epochs": at,
        "extrapolated": len(counts) > 1,
        "per_run_s": per_run,
        "runs_per_hour": per_hour,
        "ratio": {k: per_hour["fused"][k] / per_hour["alone"][k] for k in ("wall_s", "cpu_s")},
        "load_average": load,
    }


def same_numbers(suite: dict[str, Any], experiment: str, here: Path, pids: list[str]) -> dict[str, Any]:
    """The runs trained both alone and fused (`pids`), compared: how many have every test accuracy
    (per bit count) and the best epoch identical, and the largest change of test_acc (the
    numbers agree to float rounding after a few epochs, tests/test_fused.py; over more,
    rounding grows in some model kinds: psrnn.studies.relreg.fused)."""
    pairs = [
        (
            read_json(here / "alone" / pid / "metrics.json"),
            read_json(here / "fused" / C.search_dir(suite, experiment, pid) / "metrics.json"),
        )
        for pid in pids
    ]
    return {
        "compared": len(pairs),
        "test_identical": sum(a["test"] == f["test"] for a, f in pairs),
        "best_epoch_identical": sum(a["best_epoch"] == f["best_epoch"] for a, f in pairs),
        "max_test_acc_change": max((abs(a["test_acc"] - f["test_acc"]) for a, f in pairs), default=0.0),
    }


def at_epochs(measured: list[dict[str, Any]], mode: str, key: str, epochs: int) -> float:
    """One run's seconds at `epochs`: the line through the first and last measured epoch
    counts (its slope, the time per epoch, at least 0), or the one measured value."""
    first, last = measured[0], measured[-1]
    t0, t1 = first[mode][key], last[mode][key]
    if last["epochs"] == first["epochs"]:
        return t1
    per_epoch = max(0.0, (t1 - t0) / (last["epochs"] - first["epochs"]))
    return t1 + per_epoch * (epochs - last["epochs"])


def bench_fused(config_path: Path, s: FusedSettings, log: Callable[[str], None]) -> dict[str, Any]:
    """The section: a row per kind of s.kinds (a failed kind: its error as the row's status)."""
    raw = C.load_yaml(config_path)
    C.load_suite(config_path)  # a config error names its key before anything runs
    rows = []
    with tempfile.TemporaryDirectory(prefix="psrnn-bench-fused-") as tmp:
        for kind in s.kinds:
            try:
                rows.append({"status": "ok", **measure_kind(raw, kind, s, Path(tmp), log)})
            except (RuntimeError, ValueError, OSError) as err:
                rows.append({"kind": kind, "status": f"error: {str(err).strip()[:300]}"})
                log(f"fused {kind}: {rows[-1]['status']}")
    return {
        "config": str(config_path),
        "epochs": list(s.epochs) or "the config's",
        "alone_runs": s.alone_runs,
        "fused_runs": s.fused_runs,
        "overrides": s.overrides,
        "kinds": rows,
    }


# --- Markdown ------------------------------------------------------------------------------


def _same_text(measured: dict[str, Any]) -> str:
    same = measured.get("same_numbers")
    if not same:
        return "–"
    return (
        f"{same['test_identical']} of {same['compared']} (best epoch {same['best_epoch_identical']}); "
        f"up to {100 * same['max_test_acc_change']:.2f} pp"
    )


def fused_markdown(section: dict[str, Any], table: Callable[[list[str], list[list[str]]], str]) -> list[str]:
    """The section's table (psrnn.bench.report renders the rest of the result)."""
    ok = [r for r in section["kinds"] if r["status"] == "ok"]
    at = ", ".join(sorted({f"{r['at_epochs']}" for r in ok})) or "–"
    extrapolated = any(r["extrapolated"] for r in ok)
    rows = []
    for r in ok:
        hour, ratio = r["runs_per_hour"], r["ratio"]
        ends = (r["measured"][0], r["measured"][-1]) if len(r["measured"]) > 1 else r["measured"]
        rows.append(
            [
                r["kind"] + ("" if r["batched"] else " (one by one)"),
                ", ".join(f"{k} {v}" for k, v in r["shape"].items()),
                f"{r['fused_runs']} of {r['shape_runs']}",
                f"{hour['alone']['wall_s']:,.0f} / {hour['alone']['cpu_s']:,.0f}",
                f"{hour['fused']['wall_s']:,.0f} / {hour['fused']['cpu_s']:,.0f}",
                f"**{ratio['wall_s']:.1f}x** / **{ratio['cpu_s']:.1f}x**",
                " → ".join(f"{m['alone']['wall_s']:.1f}" for m in ends),
                " → ".join(f"{m['fused']['wall_s']:.2f}" for m in ends),
                " → ".join(str(x) for x in (r["load_average"][0], r["load_average"][-1])),
                _same_text(r["measured"][-1]),
            ]
        )
    out = [
        "",
        "## Fused runs",
        "",
        f"Runs per hour of one core at {at} epochs, `{section['config']}`'s shapes, CPU, one thread, the "
        f"suite's job_env: one `python -m psrnn train` process per run (the mean of "
        f"{section['alone_runs']}) against the shape's runs in one `python -m psrnn train-group` process "
        f"(batched, or one by one for kinds the fused engine does not batch). Measured at "
        f"{', '.join(map(str, section['epochs'])) if isinstance(section['epochs'], list) else at} epochs"
        + (
            "; each run's time fitted as a fixed part plus a part per epoch and extrapolated to the "
            "config's epochs, so both columns are runs of the same work"
            if extrapolated
            else " and reported there (not extrapolated)"
        )
        + ". Wall clock / process CPU time (user + system); the load average is the machine's, "
        "other jobs included. Python's bytecode cached, as an installed package has it (one untimed "
        "run writes it first)."
        + (
            f" Run settings changed for the measurement: {section['overrides']}."
            if section["overrides"]
            else ""
        ),
        "",
        table(
            [
                "kind",
                "shape",
                "fused runs",
                "alone runs/h (wall / CPU)",
                "fused runs/h (wall / CPU)",
                "fused / alone",
                "alone s per run (wall, as measured)",
                "fused s per run (wall)",
                "load average (start → end)",
                "alone = fused",
            ],
            rows,
        ),
        "",
        "alone = fused: of the runs trained both ways (at the last epoch count), those whose test "
        "accuracy per bit count and best epoch are identical, and the largest change of the mean "
        "test accuracy. The numbers agree to float rounding after a few epochs "
        "(tests/test_fused.py); over more, that rounding grows in some model kinds until a run ends "
        "elsewhere, as it does between CPU kernels for a run alone (psrnn.studies.relreg.fused).",
    ]
    out += [f"- {r['kind']}: {r['status']}" for r in section["kinds"] if r["status"] != "ok"]
    return out
