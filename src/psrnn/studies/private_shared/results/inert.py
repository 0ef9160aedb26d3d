"""Auxiliary tasks that never learned: each run's auxiliary loss against the floor of the best
constant prediction, computed from the prepared training split.

    python -m psrnn compile --config config/quick-imdb.yaml   # REPORT.md: "Auxiliary tasks"

The auxiliary loss of a run is, per sequence, the squared error summed over features and
averaged over each window's steps, summed over anchors and tasks (models.PSRNN.aux_loss).
A decoder that ignores its state can do no better than predict one constant vector: the
mean input, whose squared error per step is the inputs' total variance. For one-hot
characters that is 1 − Σ p_c² (p: the training split's character frequencies); for pixels,
the variance of each feature over all steps, summed. So a run's floor is anchors × tasks ×
that per-step floor, and a run whose best validation auxiliary loss stays within
INERT_SHARE of it never learned its task: its decoders sat idle, and its "private/shared"
row is a smaller GRU. Learned input embeddings (DBpedia) move their own targets: no floor.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import torch

from psrnn import config as C

INERT_SHARE = 0.02  # best validation aux loss >= (1 - this) x floor: the task never learned


@functools.cache
def step_floor(prepared: Path) -> float | None:
    """The per-step squared-error floor of the training split in `prepared` (None: not
    prepared here)."""
    from psrnn.studies.private_shared.data import load_split, read_manifest

    if not (prepared / "manifest.json").is_file() or not (prepared / "train.pt").is_file():
        return None
    manifest = read_manifest(prepared)
    split = load_split(prepared, "train")
    if split.offsets is not None or manifest.get("input") == "categorical":  # symbols, one-hot
        counts = torch.bincount(split.x.reshape(-1).long(), minlength=int(manifest["features"])).double()
        p = counts / counts.sum()
        return float(1.0 - (p * p).sum())
    x = split.x.double() / split.scale  # (N, T, F) as the model reads it
    return float(x.reshape(-1, x.shape[-1]).var(dim=0, unbiased=False).sum())


def run_floor(settings: dict[str, Any], per_step: float | None) -> float | None:
    """anchors x tasks x the per-step floor; None without an auxiliary task, with learned
    embeddings or without a per-step floor."""
    if per_step is None or int(settings.get("embedding") or 0) > 0:
        return None
    windows = int(settings.get("anchors", 0)) * len(settings.get("tasks") or ())
    if windows == 0 or float(settings.get("shared", 0)) == 0:
        return None
    if settings.get("aux_anchors") == "mean":  # the ablation averages over anchors
        windows = len(settings.get("tasks") or ())
    return windows * per_step


def is_inert(best_aux: float, floor: float | None) -> bool | None:
    """Whether a run's best validation aux loss never left its floor (None: no floor)."""
    if floor is None or not math.isfinite(best_aux):
        return None
    return best_aux >= (1.0 - INERT_SHARE) * floor


def prepared_dir(cfg: dict[str, Any], settings: dict[str, Any]) -> Path:
    """Where a run's prepared data is: its data_dir, else the suite's data root."""
    return Path(settings.get("data_dir") or C.data_root(cfg) / "prepared" / settings["dataset"])


def inert_lines(s: Any) -> list[str]:
    """REPORT's table: every experiment with an auxiliary task, its floor, its runs' best
    validation aux loss as a share of it, and how many runs never left it."""
    from psrnn.report import fmt
    from psrnn.report.collect import load_history
    from psrnn.studies.private_shared.results.reading import kind_of

    rows = []
    for exp in s.experiments:
        settings = s.settings[exp]
        if kind_of(s, exp) == "gru":
            continue  # no auxiliary task
        floor = run_floor(settings, step_floor(prepared_dir(s.cfg, settings)))
        bests = []
        for run in s.runs.get(exp, []):
            h = load_history(run, ("valid_aux_loss",))
            if h is not None and len(h):
                bests.append(float(h["valid_aux_loss"].min()))
        if floor is None:
            why = "data not prepared here"
            if settings.get("embedding"):
                why = "learned embedding: no fixed floor"
            rows.append(f"| {exp} | {fmt.DASH} | {fmt.DASH} | {why} |")
            continue
        flags = [is_inert(b, floor) for b in bests]
        shares = ", ".join(f"{b / floor:.3f}" for b in bests) or fmt.DASH
        inert = sum(1 for f in flags if f)
        reading = f"**inert in {inert} of {len(flags)} runs**" if inert else f"learned (none of {len(flags)})"
        if not flags:
            reading = "no finished run with a history"
        rows.append(f"| {exp} | {floor:.4g} | {shares} | {reading} |")
    if not rows:
        return []
    return [
        "",
        "## Auxiliary tasks: did they learn?",
        "",
        "A decoder that ignores its state can at best predict the mean input: per step, the "
        "inputs' total variance (1 − Σ p² for one-hot characters), from the prepared training "
        "split; a run's floor is anchors × tasks × that. Share = the run's best validation "
        f"auxiliary loss / its floor; at {1 - INERT_SHARE:g} or above the task is **inert**: its "
        "decoders never learned, and the row is a smaller GRU with an idle decoder "
        "(psrnn.studies.private_shared.results.inert).",
        "",
        "| Experiment | Floor | Best valid aux / floor, per run | Reading |",
        "|---|---:|---|---|",
        *rows,
    ]
