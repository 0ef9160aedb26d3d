"""Compare every run's metrics with committed expected values: `python -m psrnn check`.

    python -m psrnn check --config config/small.yaml            # CI: exit 1 on any difference
    python -m psrnn check --config config/small.yaml --update   # rewrite tests/expected/small.json

Every run the config defines (final runs and grid-search runs) is compared key by key
(the study's regression_keys, psrnn.registry) with `tests/expected/<name>.json`. The
expected file records the platform it was made on (PLATFORM_KEYS: OS, CPU architecture
and vector extension, torch version, the runs' device). On that platform training is
deterministic, so the comparison is exact; anywhere else it uses TOLERANCE, wide enough
for the float differences between CPUs or torch builds on a few-epoch run, narrow
enough to catch a changed model or protocol (parameter counts are always exact). Each
difference is one line: run, key, expected, got. `--update` rewrites the file from the
current runs, on purpose, after a change that is meant to move the numbers.

Why not pytest-regressions: this is a user command (CI, the SLURM test and a user's own
machine run `psrnn check` outside pytest), it compares exactly on the recorded platform
and with a tolerance elsewhere (pytest-regressions' num_regression takes one tolerance
for every platform), and it names the run and key of each difference in one line.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.errors import UserError
from psrnn.files import read_json, write_json


def keys_for(cfg: dict[str, Any]) -> dict[str, str]:
    """The metrics.json keys compared for the config's study (its regression_keys)."""
    return registry.study_of(cfg).regression_keys


# Off the expected platform: |got - expected| <= abs + rel * |expected|.
# acc: 0.05 = a few test sequences of a small config's test set; epoch: a best epoch may
# move by a couple of epochs when two validation accuracies are close; counts: exact.
TOLERANCE = {
    "acc": {"abs": 0.05, "rel": 0.0},
    "loss": {"abs": 0.001, "rel": 0.05},
    "epoch": {"abs": 2, "rel": 0.0},
    "count": {"abs": 0, "rel": 0.0},
}
PLATFORM_KEYS = ("os", "machine", "cpu_capability", "torch", "device")
DEFAULT_DIR = C.ROOT / "tests" / "expected"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument("--expected", help="expected values (default tests/expected/<name>.json)")
    p.add_argument("--update", action="store_true", help="rewrite the expected file from the current runs")


# --- pure parts ------------------------------------------------------------------------------


def run_ids(cfg: dict[str, Any]) -> list[str]:
    """Every run of the config, as its folder under results/<name>/: search runs first."""
    ids = []
    for exp in C.enabled_experiments(cfg):
        if C.has_grid(cfg, exp):
            ids += [f"search/{exp}/{pid}" for pid, _ in C.grid_points(cfg["experiments"][exp])]
    return ids + [f"runs/{exp}/seed{seed}" for exp in C.enabled_experiments(cfg) for seed in cfg["seeds"]]


def within(kind: str, expected: Any, got: Any, exact: bool) -> bool:
    if expected is None or got is None:
        return expected is got
    if exact or kind == "count":
        return expected == got
    tol = TOLERANCE[kind]
    if math.isnan(expected) or math.isnan(got):
        return math.isnan(expected) and math.isnan(got)
    return abs(got - expected) <= tol["abs"] + tol["rel"] * abs(expected)


def compare(
    expected: dict[str, dict[str, Any]],
    got: dict[str, dict[str, Any] | None],
    exact: bool,
    keys: dict[str, str],
) -> list[str]:
    """One line per difference: `<run> <key>: expected X, got Y` (or a missing run)."""
    lines = []
    for rid in sorted(set(expected) | set(got)):
        if rid not in expected:
            lines.append(f"{rid}: not in the expected file (new run? rerun with --update)")
            continue
        if rid not in got:
            lines.append(f"{rid}: in the expected file but not in the config")
            continue
        if got[rid] is None:
            lines.append(f"{rid}: missing (no metrics.json: the run has not finished)")
            continue
        for key, kind in keys.items():
            e, g = expected[rid].get(key), got[rid].get(key)
            if not within(kind, e, g, exact):
                lines.append(f"{rid} {key}: expected {e!r}, got {g!r}")
    return lines


def platform_of(devices: set[str]) -> dict[str, str]:
    """What makes training bit-identical here: OS, CPU, torch build, and the runs' device."""
    import torch

    return {
        "os": sys.platform,
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "device": ",".join(sorted(devices)) or "none",
    }


def expected_record(
    cfg: dict[str, Any], got: dict[str, dict[str, Any] | None], plat: dict[str, str]
) -> dict[str, Any]:
    missing = [rid for rid, m in got.items() if m is None]
    if missing:
        raise UserError(f"--update needs every run finished; missing: {', '.join(missing)}")
    return {
        "config": cfg["name"],
        "platform": plat,
        "tolerance": TOLERANCE,  # for readers; the code's TOLERANCE is what is applied
        "runs": {rid: {k: m.get(k) for k in keys_for(cfg)} for rid, m in got.items()},
    }


# --- I/O edge --------------------------------------------------------------------------------


def read_runs(cfg: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """run id -> its metrics.json, None when the run has not finished."""
    root = C.results_root(cfg)
    out: dict[str, dict[str, Any] | None] = {}
    for rid in run_ids(cfg):
        path = root / rid / "metrics.json"
        out[rid] = read_json(path) if path.is_file() else None
    return out


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    path = Path(args.expected) if args.expected else DEFAULT_DIR / f"{cfg['name']}.json"
    got = read_runs(cfg)
    plat = platform_of({m.get("device", "?") for m in got.values() if m})
    if args.update:
        write_json(path, expected_record(cfg, got, plat))
        print(f"check {cfg['name']}: wrote {len(got)} runs' expected values to {path}")
        return 0
    if not path.is_file():
        raise UserError(f"no expected values at {path} (create them with --update)")
    exp = read_json(path)
    if not isinstance(exp, dict) or not isinstance(exp.get("runs"), dict):
        raise UserError(f"{path}: not an expected-values file (no 'runs'; `check --update` writes one)")
    exact = all(exp.get("platform", {}).get(k) == plat[k] for k in PLATFORM_KEYS)
    mode = (
        "exact (same platform)"
        if exact
        else (
            "tolerance (expected values are from "
            + ", ".join(f"{k}={exp.get('platform', {}).get(k)}" for k in PLATFORM_KEYS)
            + "; here "
            + ", ".join(f"{k}={plat[k]}" for k in PLATFORM_KEYS)
            + ")"
        )
    )
    lines = compare(exp["runs"], got, exact, keys_for(cfg))
    print(f"check {cfg['name']}: {len(got)} runs against {path}, {mode}")
    for line in lines:
        print(line)
    if lines:
        print(f"check {cfg['name']}: {len(lines)} difference(s)", file=sys.stderr)
        return 1
    print(f"check {cfg['name']}: all {len(got)} runs match")
    return 0
