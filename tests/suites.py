"""Small suite configs the tests share (imported by test modules: pytest puts tests/ on
sys.path)."""

from pathlib import Path

import yaml

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
