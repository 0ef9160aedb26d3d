"""The Binary Counter step and evaluation of the relation-level regularization study.

    python -m psrnn train --config config/relreg.yaml --experiment proto_both --seed 1 \
        --selected results/relreg/search/proto_both/selected.json

One epoch trains on cross-entropy per output bit plus the regularization penalty (eq.
3.6-3.7; the cell noise of eq. 3.5 acts inside the proto-LSTM cells); evaluation scores
sequences (all bits right) and bits, per bit count. The engine runs them (psrnn.engine.fit,
with the hooks of psrnn.studies.relreg.hooks: resume, selection, the run folder's files).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from psrnn.studies.relreg.data import CounterSplit, counter_split, training_split
from psrnn.studies.relreg.regularizers import penalty
from psrnn.studies.relreg.settings import RelRegConfig

HISTORY_COLUMNS = ("epoch", "train_loss", "train_penalty", "valid_loss", "valid_seq_acc", "valid_bit_acc")
HIST_BINS = 20  # bins of the loading-probability histograms on [0, 1] (Figure 4.4)


@dataclass
class Data:
    train: CounterSplit
    valid: list[CounterSplit]  # one per valid_bits
    test: list[CounterSplit]  # one per test_bits
    identity = None  # the settings determine the data: nothing else to check on resume

    @classmethod
    def of(cls, cfg: RelRegConfig) -> Data:
        """Everything is a function of the settings: the same config gives the same data."""
        return cls(
            train=training_split(cfg.train_bits, cfg.train_size, cfg.data_seed),
            valid=[counter_split(k, cfg.test_count, cfg.data_seed) for k in cfg.valid_bits],
            test=[counter_split(k, cfg.test_count, cfg.data_seed) for k in cfg.test_bits],
        )


# --- one pass ------------------------------------------------------------------------------


def bit_logits(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits of the k output bits (B, k, 2), loading probabilities (B, k + 1, K) or None):
    step 0 reads the start token and is not scored."""
    out = model(x)
    return out.logits[:, 1:], out.loading


def evaluate(
    model: torch.nn.Module, splits: list[CounterSplit], device: torch.device, batch: int = 1024
) -> dict[str, Any]:
    """Loss (mean over bits), sequence accuracy (all k bits right) and bit accuracy, pooled
    over `splits` and per bit count; plus every loading probability seen (proto models)."""
    model.eval()
    per_bits: dict[str, dict[str, float]] = {}
    loss_sum = bits_total = seq_right = bit_right = seqs = 0.0
    loading = []
    with torch.no_grad():
        for sp in splits:
            s_right = b_right = 0.0
            for i in range(0, len(sp), batch):
                x, y = sp.x[i : i + batch].to(device), sp.y[i : i + batch].to(device)
                logits, p = bit_logits(model, x)  # (B, k, 2)
                loss_sum += float(F.cross_entropy(logits.reshape(-1, 2), y.reshape(-1), reduction="sum"))
                right = logits.argmax(-1) == y  # (B, k)
                s_right += float(right.all(dim=1).sum())
                b_right += float(right.sum())
                if p is not None:
                    loading.append(p.reshape(-1).cpu())
            n = len(sp)
            per_bits[str(sp.bits)] = {"seq_acc": s_right / n, "bit_acc": b_right / (n * sp.bits), "count": n}
            seqs += n
            bits_total += n * sp.bits
            seq_right += s_right
            bit_right += b_right
    return {
        "loss": loss_sum / bits_total,
        "seq_acc": seq_right / seqs,
        "bit_acc": bit_right / bits_total,
        "per_bits": per_bits,
        "loading": torch.cat(loading) if loading else None,
    }


def histogram(p: torch.Tensor | None) -> list[float]:
    """Fractions of loading probabilities in HIST_BINS equal bins on [0, 1]."""
    if p is None or p.numel() == 0:
        return []
    counts = torch.histc(p.double(), bins=HIST_BINS, min=0.0, max=1.0)
    return (counts / counts.sum()).tolist()


def train_epoch(
    model: torch.nn.Module,
    cfg: RelRegConfig,
    data: Data,
    opt,
    shuffle: torch.Generator,
    device,
    epoch: int = 1,
    on_step=None,
) -> tuple[float, float]:
    """One pass over the training sequences in random batches: (mean bit loss, mean penalty);
    NaN at the first non-finite loss (the engine stops the run). on_step(epoch, step, model)
    is called after every optimizer step."""
    model.train()
    order = torch.randperm(len(data.train), generator=shuffle)
    loss_sum = pen_sum = 0.0
    steps = 0
    for i in range(0, len(order), cfg.batch_size):
        idx = order[i : i + cfg.batch_size]
        x, y = data.train.x[idx].to(device), data.train.y[idx].to(device)
        logits, _ = bit_logits(model, x)
        loss = F.cross_entropy(logits.reshape(-1, 2), y.reshape(-1))
        pen = penalty(model, cfg.l2, cfg.l2_cell, cfg.l2_noncell)
        total = loss + pen
        if not torch.isfinite(total):
            return math.nan, math.nan
        opt.zero_grad(set_to_none=True)
        total.backward()
        if cfg.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        if on_step is not None:
            on_step(epoch, steps + 1, model)
        loss_sum += float(loss.detach())
        pen_sum += float(pen.detach())
        steps += 1
    return loss_sum / steps, pen_sum / steps


def make_optimizer(cfg: RelRegConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """Adam (ours: the thesis names learning rates, not the optimizer) or plain SGD; the L2
    terms are in the loss (eq. 3.6-3.7), not the optimizer's weight decay."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.lr)
    return torch.optim.Adam(model.parameters(), lr=cfg.lr)
