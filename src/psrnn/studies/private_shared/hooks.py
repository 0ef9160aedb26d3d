"""The first study's science as the engine trains it (psrnn.engine.hooks.Hooks): private and
shared representations in a GRU with local auxiliary losses.

    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0

Data is a prepared dataset folder (psrnn.studies.private_shared.data; its manifest.json md5 is the data's
identity, so a checkpoint resumes only on the same prepared data); the model is
psrnn.studies.private_shared.models.PSRNN; the optimizer SGD with warm restarts (CosineAnnealingWarmRestarts
stepped every batch with a fractional epoch; paper) or Adam(W); one epoch and the
evaluation are psrnn.studies.private_shared.epoch's; the best epoch is the one of the highest validation
accuracy, and `patience` epochs without a better one stop the run (0 = off).

Besides the engine's files, a run writes into its folder
    grad_norms.npz     per-step gradient norms on shared/private units (best model)
    hidden_states.npz  h_1..h_n of test inputs after `capture_epochs` (Figure 3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from psrnn.engine.checkpoint import Generators, RunState
from psrnn.engine.hooks import Epoch, Hooks
from psrnn.engine.runlog import write_npz
from psrnn.errors import UserError
from psrnn.files import md5sum
from psrnn.machine import device_name
from psrnn.studies.private_shared import settings as S
from psrnn.studies.private_shared.data import SequenceSplit, load_split, read_manifest
from psrnn.studies.private_shared.epoch import EVAL_ANCHOR_SEED, draw_anchors
from psrnn.studies.private_shared.epoch import capture as capture_states
from psrnn.studies.private_shared.epoch import evaluate as eval_split
from psrnn.studies.private_shared.epoch import train_epoch as epoch_pass
from psrnn.studies.private_shared.models import PSRNN, build_model, count_params, grad_norms

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
LOSS_COLUMN = "train_main_loss"  # the classifier's cross-entropy (the divergence flag's)
# metrics.json keys of this study's runs beside the engine's (psrnn.engine.books.COMMON_METRIC_KEYS)
METRIC_KEYS = frozenset(
    {
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
    }
)
GRAD_NORM_SEQUENCES = 64  # test sequences measured for grad_norms.npz


@dataclass
class Data:
    """A prepared dataset's three splits and its manifest."""

    train: SequenceSplit
    valid: SequenceSplit
    test: SequenceSplit
    manifest: dict[str, Any]
    identity: str  # md5 of manifest.json (data_identity)


def data_identity(run: S.RunConfig) -> str | None:
    """md5 of the prepared dataset's manifest.json: it records the sources' md5s, the
    preparation options and the resulting counts and lengths, so re-prepared data with
    other settings has another identity (a checkpoint is only resumed, a finished run only
    returned, on the same data). None when there is no manifest.json to read now."""
    path = Path(run.data_dir) / "manifest.json"
    return md5sum(path) if run.data_dir and path.is_file() else None


def data(run: S.RunConfig) -> Data:
    if not run.data_dir:
        raise UserError("data_dir is empty: point it at a prepared dataset folder")
    manifest = read_manifest(run.data_dir)
    identity = md5sum(Path(run.data_dir) / "manifest.json")  # data_identity of the manifest just read
    train, valid, test = (load_split(run.data_dir, s) for s in ("train", "valid", "test"))
    return Data(train, valid, test, manifest, identity)


def init_steps(split: SequenceSplit) -> int:
    """The length the "chrono" init spreads its memories over: the training split's mean."""
    return max(2, round(float(split.lengths.double().mean()))) if len(split) else 2


def build(run: S.RunConfig, data: Data) -> PSRNN:
    m = data.manifest
    return build_model(
        run, m["input"], int(m["features"]), int(m["num_classes"]), steps=init_steps(data.train)
    )


def make_optimizer(
    run: S.RunConfig, model: nn.Module
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    """(optimizer, scheduler or None). "sgdr" and "adamwr" share the warm-restart schedule."""
    if run.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=run.lr, weight_decay=run.weight_decay), None
    opt: torch.optim.Optimizer
    if run.optimizer == "adamwr":
        opt = torch.optim.AdamW(model.parameters(), lr=run.lr, weight_decay=run.weight_decay)
    else:
        opt = torch.optim.SGD(
            model.parameters(), lr=run.lr, momentum=run.momentum, weight_decay=run.weight_decay
        )
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        opt, T_0=run.restart_epochs, T_mult=run.restart_mult
    )
    return opt, sched


optimizer = make_optimizer


def limits(run: S.RunConfig) -> tuple[int, int]:
    return run.max_epochs, run.patience


def may_stop(run: S.RunConfig, epoch: int) -> bool:
    """Whether early stopping may end the run after `epoch`: with warm restarts ("sgdr",
    "adamwr") only at the end of a cycle, where the rate has annealed to its floor; never
    in the trough after a restart, when validation falls before it recovers (a run that
    peaked at a cycle's end and fell after the restart was stopped mid-cycle under a
    patience shorter than the cycle)."""
    if run.optimizer not in ("sgdr", "adamwr"):
        return True
    return epoch in cycle_ends(run, epoch)


def cycle_ends(run: S.RunConfig, until: int) -> list[int]:
    """The epochs at which SGDR's cycles end (CosineAnnealingWarmRestarts(T_0, T_mult)), up to
    `until`."""
    ends, length, end = [], run.restart_epochs, run.restart_epochs
    while end <= until:
        ends.append(end)
        length *= run.restart_mult
        end += length
    return ends


def first_loss(data: Data) -> tuple[float, str]:
    """An untrained classifier predicts ~uniformly: ln(num_classes)."""
    classes = int(data.manifest["num_classes"])
    return math.log(classes), f"ln {classes}"


def header(
    out_dir: Path, device: torch.device, model: PSRNN, data: Data, run: S.RunConfig, resumed: int | None
) -> str:
    """The log's first line: where the run trains, how big it is, and where it starts."""
    if device.type == "cuda" and device.index is None:  # "auto": the current GPU
        device = torch.device("cuda", torch.cuda.current_device())
    n = count_params(model)
    start = "fresh start" if resumed is None else f"resumed after epoch {resumed}"
    return (
        f"run {out_dir}: device {device} ({device_name(device)}) | params {n['params']:,} "
        f"(main {n['params_main']:,}, head {n['params_head']:,}, aux decoders "
        f"{n['params_aux']:,}) | train {len(data.train)} / valid {len(data.valid)} "
        f"/ test {len(data.test)} sequences | {start}"
    )


def capture(
    model: PSRNN, data: Data, run: S.RunConfig, device: torch.device, epoch: int, valid: Any
) -> torch.Tensor | None:
    """Hidden states of the first test sequences at `capture_epochs` (0: at initialisation)."""
    if epoch not in run.capture_epochs:
        return None
    return capture_states(model, data.test, run.capture_samples, device)


def train_epoch(
    model: PSRNN,
    data: Data,
    run: S.RunConfig,
    opt: torch.optim.Optimizer,
    sched: Any,
    gens: Generators,
    device: torch.device,
    e: Epoch,
) -> dict[str, float]:
    return epoch_pass(
        model, data.train, run, opt, sched, gens, device, e.number, e.on_step, e.bar, e.beat, e.heartbeat_s
    )


def evaluate(model: PSRNN, data: Data, run: S.RunConfig, device: torch.device) -> dict[str, float]:
    return eval_split(model, data.valid, run, device)


def valid_row(valid: dict[str, float]) -> dict[str, float]:
    return {
        "valid_main_loss": valid["main_loss"],
        "valid_aux_loss": valid["aux_loss"],
        "valid_acc": valid["acc"],
    }


def score(valid: dict[str, float]) -> tuple[float]:
    """The best epoch is the first of the highest validation accuracy."""
    return (valid["acc"],)


def epoch_line(row: dict[str, Any], run: S.RunConfig, st: RunState) -> str:
    """The log's line at the end of an epoch: its history row and the best epoch so far."""
    return (
        f"epoch {row['epoch']}/{run.max_epochs} lr {row['lr']:.4g} | train ce {row['train_main_loss']:.4f} "
        f"aux {row['train_aux_loss']:.4f} acc {row['train_acc']:.4f} | valid ce "
        f"{row['valid_main_loss']:.4f} aux {row['valid_aux_loss']:.4f} acc {row['valid_acc']:.4f} "
        f"| {row['epoch_time_s']:.1f}s | best {st.best_valid_acc:.4f} @ {st.best_epoch}"
    )


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


def finish(
    model: PSRNN, data: Data, run: S.RunConfig, st: RunState, device: torch.device, out_dir: Path
) -> dict[str, Any]:
    """Test the best model (loaded), write grad_norms.npz and hidden_states.npz; the
    study's metrics."""
    test = eval_split(model, data.test, run, device)
    best = st.history[st.best_epoch - 1]
    k = min(GRAD_NORM_SEQUENCES, len(data.test))
    x, lengths, y = data.test.batch(torch.arange(k))
    anchors = draw_anchors(model, run, lengths, torch.Generator().manual_seed(EVAL_ANCHOR_SEED))
    write_npz(
        out_dir / "grad_norms.npz", grad_norms(model, x.to(device), lengths, y, anchors, run.aux_weight)
    )
    if run.capture_epochs:
        write_npz(
            out_dir / "hidden_states.npz",
            capture_arrays(data.test, st, run.capture_samples, model.shared_units),
        )
    last = st.history[-1]
    return {
        "test_acc": test["acc"],
        "test_main_loss": test["main_loss"],
        "test_aux_loss": test["aux_loss"],
        "valid_main_loss": best["valid_main_loss"],
        "valid_aux_loss": best["valid_aux_loss"],
        "train_main_loss": last["train_main_loss"],
        "train_aux_loss": last["train_aux_loss"],
        **count_params(model),
        "shared_units": model.shared_units,
    }


class PrivateSharedHooks(Hooks):
    """The first study's hooks (psrnn.engine.hooks.Hooks): the functions above."""

    HISTORY_COLUMNS = HISTORY_COLUMNS
    LOSS_COLUMN = LOSS_COLUMN
    METRIC_KEYS = METRIC_KEYS
    data = staticmethod(data)
    build = staticmethod(build)
    optimizer = staticmethod(optimizer)
    limits = staticmethod(limits)
    may_stop = staticmethod(may_stop)
    data_identity = staticmethod(data_identity)
    first_loss = staticmethod(first_loss)
    header = staticmethod(header)
    capture = staticmethod(capture)
    train_epoch = staticmethod(train_epoch)
    evaluate = staticmethod(evaluate)
    valid_row = staticmethod(valid_row)
    score = staticmethod(score)
    epoch_line = staticmethod(epoch_line)
    finish = staticmethod(finish)
