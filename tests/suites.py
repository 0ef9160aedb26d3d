"""Small suite configs the tests share (imported by test modules: pytest puts tests/ on
sys.path)."""

import json
from pathlib import Path

import yaml

from psrnn import config as C

# a tiny valid suite: one dataset, a 2-point grid, 2 seeds
TINY = {
    "name": "tiny",
    "seeds": [0, 1],
    "datasets": {"mnist": {"prepare": {"downsample": 7}}},
    "defaults": {"hidden": 4, "max_epochs": 1},
    "experiments": {
        "base": {"dataset": "mnist", "shared": 0.0},
        "ps": {
            "dataset": "mnist",
            "shared": 0.5,
            "tasks": ["rec"],
            "anchors": 1,
            "window": 5,
            "grid": {"lr": [0.1, 0.01]},
        },
    },
}


def write_tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def write_search(suite: dict, accs: dict[str, float]) -> dict[str, Path]:
    """A finished search run of the tiny suite's `ps` per point: the record training writes
    (its settings those of its point), with validation accuracy `accs[point]`."""
    out = {}
    seed = C.search_seed(suite)
    for pid, overrides in C.grid_points(suite["experiments"]["ps"]):
        d = C.search_dir(suite, "ps", pid)
        d.mkdir(parents=True)
        record = {
            "experiment": "ps",
            "seed": seed,
            "test_acc": 0.5,
            "best_valid_acc": accs[pid],
            "valid_main_loss": 1.0,
            "valid_aux_loss": 0.0,
            "best_epoch": 1,
            "epochs_run": 1,
            "kernel_env": dict(suite.get("job_env") or {}),
            "config": C.resolve_run(suite, "ps", seed, selected=overrides).to_dict(),
        }
        (d / "metrics.json").write_text(json.dumps(record))
        out[pid] = d / "metrics.json"
    return out
