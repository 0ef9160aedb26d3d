"""What DVC compares across experiments (`dvc exp run`, `dvc plots diff`, `dvc metrics
diff`): each experiment's learning curve as data, and one compact file of numbers.

    python -m psrnn compile --config config/small.yaml
    dvc plots diff; dvc metrics diff

Both studies' compile write, under results/<name>/:

    curves/history_<experiment>.csv   per epoch, the mean over the experiment's finished
                                      seeds of the history columns its study plots, and
                                      how many seeds reached that epoch (`runs`)
    scores.json                       numbers only: runs finished, and per experiment the
                                      mean test accuracy of its finished runs (null: none)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from psrnn.files import write_json, write_text

CURVES = "curves"
SCORES = "scores.json"


def captions(experiments: list[str], what: str) -> dict[str, str]:
    """Report captions (by output stem) of the files written here; `what` names the columns."""
    out = {
        f"history_{e}": f"Learning curve of {e} as data (DVC plots): per epoch, {what}, mean over its "
        "finished seeds, and how many reached the epoch"
        for e in experiments
    }
    out["scores"] = "numbers only for DVC: runs finished, mean test accuracy per experiment"
    return out


def curve_path(root: Path, experiment: str) -> Path:
    return root / CURVES / f"history_{experiment}.csv"


def output_paths(root: Path, experiments: list[str]) -> list[Path]:
    return [curve_path(root, e) for e in experiments] + [root / SCORES]


def write_curves(runs: dict[str, list[Any]], columns: tuple[str, ...], root: Path) -> list[Path]:
    """One CSV per experiment of `runs` (experiment -> finished runs with `dir`): epoch,
    the mean of each of `columns` over the runs that reached the epoch, and their count."""
    from psrnn.report.collect import load_history  # checked: a cut history is refused, not averaged

    written = []
    for exp, found in runs.items():
        frames = [h for h in (load_history(r, columns) for r in found) if h is not None]
        if frames:
            both = pd.concat(frames)
            table = both.groupby("epoch", sort=True)[list(columns)].mean().reset_index()
            table["runs"] = both.groupby("epoch", sort=True).size().to_numpy()
        else:
            table = pd.DataFrame(columns=["epoch", *columns, "runs"])
        path = curve_path(root, exp)
        write_text(path, table.to_csv(index=False, float_format="%.6g", lineterminator="\n"))
        written.append(path)
    return written


def write_scores(runs: dict[str, list[Any]], root: Path) -> Path:
    """scores.json: numbers only, for `dvc metrics show` and `diff`."""
    means = {}
    for exp, found in runs.items():
        accs = [float(r.metrics["test_acc"]) for r in found]
        means[exp] = round(sum(accs) / len(accs), 6) if accs else None
    path = root / SCORES
    write_json(path, {"runs_finished": sum(len(f) for f in runs.values()), "test_acc": means})
    return path
