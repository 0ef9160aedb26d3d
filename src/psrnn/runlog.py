"""What a training run writes besides its checkpoints: the log's lines (the header, the
heartbeat inside an epoch, one line per epoch, the divergence warning), history.csv, the
.npz arrays, and metrics.json's keys with its `diverged` flag.

    python -m psrnn train --config config/small.yaml --experiment mnist_ps --seed 0

psrnn.training writes them (psrnn.epoch the heartbeat); the lines and the divergence flag
are functions of the run's state alone, so tests check them without training.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psrnn.checkpoint import RunState
from psrnn.data import SequenceSplit
from psrnn.files import write_bytes
from psrnn.machine import device_name
from psrnn.models import PSRNN, count_params

HISTORY_COLUMNS = (
    "epoch",
    "lr",
    "train_main_loss",
    "train_aux_loss",
    "train_acc",
    "valid_main_loss",
    "valid_aux_loss",
    "valid_acc",
    "epoch_time_s",
)
# An epoch whose mean training cross-entropy exceeds this multiple of the loss at
# initialisation, ln(num_classes), flags the run as diverged. Healthy runs stay near or
# below ln C: the 10 runs of results/recipe (real digits, SGDR at lr up to 1, Adam, AdamW)
# peak at 1.02 x ln 10, so 10 leaves a wide margin; exploded ones lie orders of magnitude
# above it (Adam at lr 1e6: ~1e7). The reference is ln C, not the first epoch's loss:
# such runs explode within their first epoch and then stay there.
DIVERGENCE_FACTOR = 10.0
# metrics.json's keys: the contract its readers rely on (results, regression, the tests);
# training.finish() writes exactly these.
METRIC_KEYS = frozenset(
    {
        "experiment",
        "config_name",
        "seed",
        "point",
        "dataset",
        "test_acc",
        "best_valid_acc",
        "best_epoch",
        "epochs_run",
        "stopped",
        "test_main_loss",
        "test_aux_loss",
        "valid_main_loss",
        "valid_aux_loss",
        "train_main_loss",
        "train_aux_loss",
        "params",
        "params_main",
        "params_head",
        "params_aux",
        "shared_units",
        "wall_time_s",
        "samples_per_s",
        "peak_memory_mb",
        "peak_memory_method",
        "device",
        "device_name",
        "diverged",
        "torch_version",
        "cuda_version",
        "platform",
        "git_commit",
        "psrnn_version",
        "config",
    }
)


# --- log lines ---------------------------------------------------------------------------


def header(
    out_dir: Path,
    device: torch.device,
    model: PSRNN,
    splits: dict[str, SequenceSplit],
    resumed_after: int | None,
) -> str:
    """The log's first line: where the run trains, how big it is, and where it starts."""
    if device.type == "cuda" and device.index is None:  # "auto": the current GPU
        device = torch.device("cuda", torch.cuda.current_device())
    n = count_params(model)
    start = "fresh start" if resumed_after is None else f"resumed after epoch {resumed_after}"
    return (
        f"run {out_dir}: device {device} ({device_name(device)}) | params {n['params']:,} "
        f"(main {n['params_main']:,}, head {n['params_head']:,}, aux decoders "
        f"{n['params_aux']:,}) | train {len(splits['train'])} / valid {len(splits['valid'])} "
        f"/ test {len(splits['test'])} sequences | {start}"
    )


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


def epoch_line(row: dict[str, Any], max_epochs: int, st: RunState) -> str:
    """The log's line at the end of an epoch: its history row and the best epoch so far."""
    return (
        f"epoch {row['epoch']}/{max_epochs} lr {row['lr']:.4g} | train ce {row['train_main_loss']:.4f} "
        f"aux {row['train_aux_loss']:.4f} acc {row['train_acc']:.4f} | valid ce "
        f"{row['valid_main_loss']:.4f} aux {row['valid_aux_loss']:.4f} acc {row['valid_acc']:.4f} "
        f"| {row['epoch_time_s']:.1f}s | best {st.best_valid_acc:.4f} @ {st.best_epoch}"
    )


def diverged_line(flag: dict[str, Any], num_classes: int) -> str:
    """The log's warning at the epoch that crossed the divergence threshold (`divergence`)."""
    return (
        f"diverged: epoch {flag['epoch']} train loss {flag['train_loss']:.4g} > "
        f"{DIVERGENCE_FACTOR:g} x first loss {flag['first_loss']:.4f} (ln {num_classes}, the "
        f"loss at initialisation); lower lr; the run goes on"
    )


def divergence(history: list[dict[str, float]], first_loss: float) -> dict[str, Any] | None:
    """metrics.json's `diverged`: the first epoch whose mean training cross-entropy exceeds
    DIVERGENCE_FACTOR x first_loss (the loss at initialisation, ln(num_classes)), as
    {epoch, train_loss, first_loss}; None when there is none.

    The main loss only: its starting value is known for every dataset (an auxiliary loss's
    depends on the data's scale), and an explosion of the shared units reaches it. Derived
    from the history, which ckpt_last.pt carries, so a resumed run keeps the flag.
    """
    for row in history:
        if row["train_main_loss"] > DIVERGENCE_FACTOR * first_loss:
            return {"epoch": row["epoch"], "train_loss": row["train_main_loss"], "first_loss": first_loss}
    return None


# --- files -------------------------------------------------------------------------------


def history_csv(history: list[dict[str, float]], columns: tuple[str, ...] = HISTORY_COLUMNS) -> str:
    """history.csv's text: one row per epoch, floats as repr (exact round trip)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for row in history:
        w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return buf.getvalue()


def write_npz(path: Path, arrays: Mapping[str, Any]) -> None:
    """An .npz of `arrays` (name -> numpy array or scalar), written atomically."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes(path, buf.getvalue())


def capture_arrays(
    split: SequenceSplit, st: RunState, count: int, shared_units: int
) -> dict[str, np.ndarray | np.int64]:
    """hidden_states.npz contents (see the metrics contract)."""
    x, _, y = split.batch(torch.arange(min(count, len(split))))
    x = x.float()[..., None] if split.categorical else x.float()  # (S, T, F)
    epochs = sorted(st.captures)
    states = (
        torch.stack([st.captures[e] for e in epochs]) if epochs else torch.zeros(0, *x.shape[:2], 0)
    )  # (E, S, T, d)
    return {
        "epochs": np.asarray(epochs, dtype=np.int64),
        "states": states.numpy().astype(np.float32),
        "x": x.numpy().astype(np.float32),
        "y": y.numpy().astype(np.int64),
        "shared_units": np.int64(shared_units),
    }
