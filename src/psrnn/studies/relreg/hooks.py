"""The second study's science as the engine trains it (psrnn.engine.hooks.Hooks): one Binary
Counter run of the relation-level regularization study.

    python -m psrnn train --config config/relreg.yaml --experiment proto_both --seed 1 \
        --selected results/relreg/search/proto_both/selected.json

A run generates its data from its settings (psrnn.studies.relreg.data; no identity to check: the
settings are the data), builds its model from the model settings (`model_settings`: every
keyword psrnn.studies.relreg.models.build_model takes, read from the run, so none is dropped on the
way), trains `epochs` epochs on cross-entropy per output bit plus the regularization
penalty (psrnn.studies.relreg.training), and keeps the epoch of the best validation sequence
accuracy, ties going to the lower validation loss. Besides the engine's files it writes

    loading.npz   proto models: loading probabilities per step of a few 9-bit test numbers
                  (Figure 4.3) and their histogram on the validation data per epoch (Figure 4.4)

and metrics.json carries the test accuracies per bit count (`test`), their means
(`test_acc`: sequence, `test_bit_acc`: bit) and the parameter counts.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from psrnn.engine.checkpoint import Generators, RunState
from psrnn.engine.hooks import Epoch, Hooks
from psrnn.engine.runlog import write_npz
from psrnn.studies.relreg import training as T
from psrnn.studies.relreg.data import counter_split
from psrnn.studies.relreg.models import build_model
from psrnn.studies.relreg.regularizers import cell_parameters
from psrnn.studies.relreg.settings import RelRegConfig

HISTORY_COLUMNS = T.HISTORY_COLUMNS
LOSS_COLUMN = "train_loss"  # mean cross-entropy per output bit (the divergence flag's)
# metrics.json keys of this study's runs beside the engine's (psrnn.engine.books.COMMON_METRIC_KEYS)
METRIC_KEYS = frozenset(
    {
        "study",
        "model",
        "valid_main_loss",
        "valid_bit_acc",
        "test_bit_acc",
        "test",
        "train_loss",
        "params",
        "cell_params",
    }
)
LOADING_BITS = 9  # Figure 4.3's examples: 9-bit numbers after the start token (10 steps)
# 9-bit numbers whose loading probabilities are saved, the thesis' two (Figure 4.3:
# 0,0,1,1,1,1,1,1,1 and 1,0,1,1,1,1,1,1,1, least significant bit first) first, then
# carries of every length: all ones, a carry into the top bit, zero, alternating bits
LOADING_NUMBERS = (508, 509, 511, 255, 0, 170, 341, 7)
# the model settings: build_model's keywords, each a run setting of the same name
MODEL_SETTINGS = tuple(n for n in inspect.signature(build_model).parameters if n != "kind")


def data(run: RelRegConfig) -> T.Data:
    """The Binary Counter splits the run's settings make (psrnn.studies.relreg.training.Data)."""
    return T.Data.of(run)


def model_settings(run: RelRegConfig) -> dict[str, Any]:
    """The run's model settings, as build_model takes them."""
    return {n: getattr(run, n) for n in MODEL_SETTINGS}


def build(run: RelRegConfig, data: T.Data) -> nn.Module:
    return build_model(run.model, **model_settings(run))


def optimizer(run: RelRegConfig, model: nn.Module) -> tuple[torch.optim.Optimizer, None]:
    return T.make_optimizer(run, model), None


def limits(run: RelRegConfig) -> tuple[int, int]:
    return run.epochs, 0  # a fixed number of epochs, the best one kept


def first_loss(data: T.Data) -> tuple[float, str]:
    """An untrained model predicts each bit ~uniformly: ln 2."""
    return math.log(2), "ln 2"


def header(
    out_dir: Path,
    device: torch.device,
    model: nn.Module,
    data: T.Data,
    run: RelRegConfig,
    resumed: int | None,
) -> str:
    params = sum(p.numel() for p in model.parameters())
    start = "fresh start" if resumed is None else f"resumed after epoch {resumed}"
    return (
        f"run {out_dir}: {run.model}, {params} parameters, {len(data.train)} training sequences "
        f"of {run.train_bits} bits, device {device} | {start}"
    )


def capture(
    model: nn.Module, data: T.Data, run: RelRegConfig, device: torch.device, epoch: int, valid: Any
) -> torch.Tensor | None:
    """Proto models: the histogram of the validation loading probabilities (Figure 4.4)."""
    if run.model != "proto":
        return None
    loading = (valid or T.evaluate(model, data.valid, device))["loading"]
    return torch.tensor(T.histogram(loading), dtype=torch.float64)


def train_epoch(
    model: nn.Module,
    data: T.Data,
    run: RelRegConfig,
    opt: torch.optim.Optimizer,
    sched: None,
    gens: Generators,
    device: torch.device,
    e: Epoch,
) -> dict[str, float]:
    loss, pen = T.train_epoch(model, run, data, opt, gens.shuffle, device, e.number, e.on_step)
    return {"train_loss": loss, "train_penalty": pen}


def evaluate(model: nn.Module, data: T.Data, run: RelRegConfig, device: torch.device) -> dict[str, Any]:
    return T.evaluate(model, data.valid, device)


def valid_row(valid: dict[str, Any]) -> dict[str, float]:
    return {"valid_loss": valid["loss"], "valid_seq_acc": valid["seq_acc"], "valid_bit_acc": valid["bit_acc"]}


def score(valid: dict[str, Any]) -> tuple[float, float]:
    """The highest validation sequence accuracy; of equal ones, the lowest loss."""
    return (valid["seq_acc"], -valid["loss"])


def epoch_line(row: dict[str, Any], run: RelRegConfig, st: RunState) -> str:
    return (
        f"epoch {row['epoch']}/{run.epochs} train loss {row['train_loss']:.4f} (+{row['train_penalty']:.4f}) "
        f"valid loss {row['valid_loss']:.4f} seq acc {row['valid_seq_acc']:.4f} bit acc "
        f"{row['valid_bit_acc']:.4f} ({row['epoch_time_s']:.1f}s)"
    )


def loading_arrays(
    model: torch.nn.Module, cfg: RelRegConfig, hist: np.ndarray, device
) -> dict[str, np.ndarray]:
    """Figure 4.3 and 4.4's data: loading probabilities per step of LOADING_NUMBERS (best
    model, inference) and the per-epoch histograms `hist` (epochs x T.HIST_BINS)."""
    sample = counter_split(LOADING_BITS, 0, 0, numbers=list(LOADING_NUMBERS[: cfg.loading_samples]))
    model.eval()
    with torch.no_grad():
        p = model(sample.x.to(device)).loading  # (S, T, K)
    return {
        "inputs": sample.x.numpy(),
        "targets": sample.y.numpy(),
        "steps": p.cpu().numpy().astype(np.float32),
        "hist": np.asarray(hist, dtype=np.float32),
        "bins": np.linspace(0.0, 1.0, T.HIST_BINS + 1, dtype=np.float32),
    }


def finish(
    model: nn.Module,
    data: T.Data,
    run: RelRegConfig,
    st: RunState,
    device: torch.device,
    out_dir: Path,
    evaluated: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Test the best model (loaded) per bit count; write loading.npz (proto). `evaluated`:
    its "valid" and "test" evaluations, made already (psrnn.studies.relreg.fused.final_evaluations)."""
    test = evaluated["test"] if evaluated else T.evaluate(model, data.test, device)
    valid = evaluated["valid"] if evaluated else T.evaluate(model, data.valid, device)
    if run.model == "proto":
        hist = np.stack([st.captures[e].numpy() for e in sorted(st.captures)])
        write_npz(out_dir / "loading.npz", loading_arrays(model, run, hist, device))
    per_bits = test["per_bits"].values()
    return {
        "study": "relreg",
        "model": run.model,
        "valid_main_loss": valid["loss"],
        "valid_bit_acc": valid["bit_acc"],
        "test_acc": float(np.mean([t["seq_acc"] for t in per_bits])),
        "test_bit_acc": float(np.mean([t["bit_acc"] for t in per_bits])),
        "test": test["per_bits"],
        "train_loss": st.history[-1]["train_loss"],
        "params": sum(p.numel() for p in model.parameters()),
        "cell_params": sum(p.numel() for p in cell_parameters(model)),
    }


class RelRegHooks(Hooks):
    """The second study's hooks (psrnn.engine.hooks.Hooks): the functions above; early
    stopping is off (limits), so the default may_stop is never asked."""

    HISTORY_COLUMNS = HISTORY_COLUMNS
    LOSS_COLUMN = LOSS_COLUMN
    METRIC_KEYS = METRIC_KEYS
    data = staticmethod(data)
    build = staticmethod(build)
    optimizer = staticmethod(optimizer)
    limits = staticmethod(limits)
    first_loss = staticmethod(first_loss)
    header = staticmethod(header)
    capture = staticmethod(capture)
    train_epoch = staticmethod(train_epoch)
    evaluate = staticmethod(evaluate)
    valid_row = staticmethod(valid_row)
    score = staticmethod(score)
    epoch_line = staticmethod(epoch_line)
    finish = staticmethod(finish)
