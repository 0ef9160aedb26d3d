"""What every study's training run writes besides its checkpoints: the heartbeat line
inside an epoch, the divergence flag and its warning, history.csv and .npz arrays.

    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0

psrnn.engine.fit writes them (a study's epoch the heartbeat); the lines and the divergence
flag are functions of the run's state alone, so tests check them without training. A
study's own log lines (header, epoch line) are its hooks' (psrnn.studies.private_shared.hooks,
psrnn.studies.relreg.hooks).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from psrnn.files import write_bytes

# An epoch whose mean training cross-entropy exceeds this multiple of the loss at
# initialisation, ln(num_classes), flags the run as diverged. Healthy runs stay near or
# below ln C: the 10 runs of results/recipe (real digits, SGDR at lr up to 1, Adam, AdamW)
# peak at 1.02 x ln 10, so 10 leaves a wide margin; exploded ones lie orders of magnitude
# above it (Adam at lr 1e6: ~1e7). The reference is ln C, not the first epoch's loss:
# such runs explode within their first epoch and then stay there.
DIVERGENCE_FACTOR = 10.0


# --- log lines ---------------------------------------------------------------------------


def clock(seconds: float) -> str:
    """A duration in seconds as h:mm:ss."""
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def heartbeat_line(epoch: int, max_epochs: int, done: int, total: int, elapsed_s: float) -> str:
    """Progress inside an epoch: `done` of `total` steps after `elapsed_s` seconds."""
    rate = done / max(elapsed_s, 1e-9)  # steps/s
    return (
        f"epoch {epoch}/{max_epochs} step {done}/{total} | {rate:.2f} steps/s | "
        f"ETA {clock((total - done) / rate)}"
    )


def diverged_line(flag: dict[str, Any], first_label: str) -> str:
    """The log's warning at the epoch that crossed the divergence threshold (`divergence`);
    first_label says what the loss at initialisation is (e.g. "ln 10")."""
    return (
        f"diverged: epoch {flag['epoch']} train loss {flag['train_loss']:.4g} > "
        f"{DIVERGENCE_FACTOR:g} x first loss {flag['first_loss']:.4f} ({first_label}, the "
        f"loss at initialisation); lower lr; the run goes on"
    )


def divergence(history: list[dict[str, float]], first_loss: float, column: str) -> dict[str, Any] | None:
    """metrics.json's `diverged`: the first epoch whose mean training cross-entropy (history
    `column`, the study's LOSS_COLUMN) exceeds DIVERGENCE_FACTOR x first_loss (the loss at
    initialisation, e.g. ln(num_classes)), as {epoch, train_loss, first_loss}; None when
    there is none.

    The classification loss only: its starting value is known for every dataset (an
    auxiliary loss's depends on the data's scale), and an explosion elsewhere reaches it.
    Derived from the history, which ckpt_last.pt carries, so a resumed run keeps the flag.
    """
    for row in history:
        if row[column] > DIVERGENCE_FACTOR * first_loss:
            return {"epoch": row["epoch"], "train_loss": row[column], "first_loss": first_loss}
    return None


# --- files -------------------------------------------------------------------------------


def history_csv(history: list[dict[str, float]], columns: tuple[str, ...]) -> str:
    """history.csv's text: one row per epoch (its `columns` of it), floats as repr (exact
    round trip)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for row in history:
        w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return buf.getvalue()


def write_npz(path: Path, arrays: Mapping[str, Any]) -> None:
    """An .npz of `arrays` (name -> numpy array or scalar), written atomically."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes(path, buf.getvalue())
