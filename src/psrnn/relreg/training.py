"""Training one Binary Counter run of the relation-level regularization study.

    python -m psrnn train --config config/relreg.yaml --experiment proto_both --seed 0

`python -m psrnn train` hands a `study: relreg` run here (psrnn.studies): the same command
line, run folders, search/select/final protocol and resume as the first study. A run
generates its data (psrnn.relreg.data, seeded by the settings), trains `epochs` epochs
on cross-entropy per output bit plus the regularization penalty (eq. 3.6-3.7; the cell
noise of eq. 3.5 acts inside the proto-LSTM cells), keeps the epoch with the best
validation sequence accuracy, and writes into the run folder

    ckpt_last.pt   after every epoch (an interrupted run resumes from it)
    history.csv    epoch, train_loss, train_penalty, valid_loss, valid_seq_acc, valid_bit_acc
    loading.npz    proto models: loading probabilities per step of a few 9-bit test numbers
                   (Figure 4.3) and their histogram on the validation data per epoch (Figure 4.4)
    metrics.json   last: validation and test accuracies per bit count, settings, machine
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from psrnn.checkpoint import Generators, rng_state, set_rng_state
from psrnn.errors import UserError
from psrnn.files import torch_save, write_bytes, write_json, write_text
from psrnn.machine import environment
from psrnn.relreg.config import RelRegConfig, with_defaults
from psrnn.relreg.data import CounterSplit, counter_split, training_split
from psrnn.relreg.models import build_model
from psrnn.relreg.regularizers import cell_parameters, penalty
from psrnn.runlog import history_csv, write_npz

HISTORY_COLUMNS = ("epoch", "train_loss", "train_penalty", "valid_loss", "valid_seq_acc", "valid_bit_acc")
HIST_BINS = 20  # bins of the loading-probability histograms on [0, 1] (Figure 4.4)
LOADING_BITS = 9  # Figure 4.3's examples: 9-bit numbers after the start token (10 steps)
# 9-bit numbers whose loading probabilities are saved, the thesis' two (Figure 4.3:
# 0,0,1,1,1,1,1,1,1 and 1,0,1,1,1,1,1,1,1, least significant bit first) first, then
# carries of every length: all ones, a carry into the top bit, zero, alternating bits
LOADING_NUMBERS = (508, 509, 511, 255, 0, 170, 341, 7)


class RunDiverged(UserError):
    """The training loss became NaN or infinite; ckpt_last.pt keeps the last good epoch."""


@dataclass
class Data:
    train: CounterSplit
    valid: list[CounterSplit]  # one per valid_bits
    test: list[CounterSplit]  # one per test_bits

    @classmethod
    def of(cls, cfg: RelRegConfig) -> Data:
        """Everything is a function of the settings: the same config gives the same data."""
        return cls(
            train=training_split(cfg.train_bits, cfg.train_size, cfg.data_seed),
            valid=[counter_split(k, cfg.test_count, cfg.data_seed) for k in cfg.valid_bits],
            test=[counter_split(k, cfg.test_count, cfg.data_seed) for k in cfg.test_bits],
        )


@dataclass
class State:
    """What changes as a run goes; saved in ckpt_last.pt after every epoch."""

    epoch: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    best_valid_acc: float = -1.0
    best_valid_loss: float = math.inf
    best_model: dict[str, torch.Tensor] | None = None
    hist: list[list[float]] = field(default_factory=list)  # loading histogram per epoch (proto)
    wall_time_s: float = 0.0


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
    model: torch.nn.Module, cfg: RelRegConfig, data: Data, opt, shuffle: torch.Generator, device
) -> tuple[float, float]:
    """One pass over the training sequences in random batches: (mean bit loss, mean penalty)."""
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


# --- a run ---------------------------------------------------------------------------------


def settings_of(ckpt_path: Path) -> dict[str, Any] | None:
    """The settings a checkpoint was written with, fields it predates at their defaults."""
    if not ckpt_path.is_file():
        return None
    return with_defaults(torch.load(ckpt_path, map_location="cpu", weights_only=True)["config"])


def adopt(source: Path, out_dir: Path, cfg: RelRegConfig, log) -> None:
    """A final run that is its search run at the selected point (same settings and seed)
    starts from that run's checkpoint instead of training again."""
    last = source / "ckpt_last.pt"
    if settings_of(last) != cfg.to_dict():
        log(f"not reusing {source}: no checkpoint of the same settings and seed")
        return
    write_bytes(out_dir / "ckpt_last.pt", last.read_bytes())
    log(f"reusing {source}: the same run (settings, seed), resumed from its checkpoint")


def loading_arrays(model: torch.nn.Module, cfg: RelRegConfig, st: State, device) -> dict[str, np.ndarray]:
    """Figure 4.3 and 4.4's data: loading probabilities per step of LOADING_NUMBERS (best
    model, inference) and the per-epoch histograms."""
    sample = counter_split(LOADING_BITS, 0, 0, numbers=list(LOADING_NUMBERS[: cfg.loading_samples]))
    model.eval()
    with torch.no_grad():
        p = model(sample.x.to(device)).loading  # (S, T, K)
    return {
        "inputs": sample.x.numpy(),
        "targets": sample.y.numpy(),
        "steps": p.cpu().numpy().astype(np.float32),
        "hist": np.asarray(st.hist, dtype=np.float32),
        "bins": np.linspace(0.0, 1.0, HIST_BINS + 1, dtype=np.float32),
    }


def train(
    cfg: RelRegConfig,
    out_dir: Path,
    meta: dict[str, Any],
    restart_on_change: bool = False,
    reuse: str | None = None,
) -> dict[str, Any]:
    from psrnn.training import pick_device, seed_everything

    def log(line: str) -> None:
        print(line, flush=True)

    out_dir.mkdir(parents=True, exist_ok=True)
    device = pick_device(cfg.device, log=log)
    seed_everything(cfg.seed, device)
    data = Data.of(cfg)
    model = build_model(
        cfg.model,
        hidden=cfg.hidden,
        cells=cfg.cells,
        key_size=cfg.key_size,
        heads=cfg.heads,
        layers=cfg.layers,
        noise=cfg.noise,
        slots=cfg.slots,
        causal=cfg.causal,
    ).to(device)
    opt = make_optimizer(cfg, model)
    gens = Generators.seeded(cfg.seed)
    proto = cfg.model == "proto"
    st = State()

    last = out_dir / "ckpt_last.pt"
    if reuse and not last.is_file():
        adopt(Path(reuse), out_dir, cfg, log)
    saved = settings_of(last)
    if saved is not None and saved != cfg.to_dict():
        changed = sorted(k for k in cfg.to_dict() if saved.get(k) != cfg.to_dict()[k])
        if not restart_on_change:
            raise UserError(
                f"{last} was written with other settings ({', '.join(changed)}); delete "
                f"{out_dir} or pass --restart-on-change to start this run over"
            )
        log(f"settings changed ({', '.join(changed)}): starting over")
        saved = None
    if saved is not None:
        ckpt = torch.load(last, map_location="cpu", weights_only=True)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"], gens)
        st = State(**ckpt["state"])
        log(f"resumed after epoch {st.epoch} from {last}")
    params = sum(p.numel() for p in model.parameters())
    cell_params = sum(p.numel() for p in cell_parameters(model))
    log(
        f"relreg {meta.get('experiment')} seed {cfg.seed}: {cfg.model}, {params} parameters, "
        f"{len(data.train)} training sequences of {cfg.train_bits} bits, device {device}"
    )
    if proto and not st.hist:
        st.hist.append(histogram(evaluate(model, data.valid, device)["loading"]))

    session = time.perf_counter()
    while st.epoch < cfg.epochs:
        t0 = time.perf_counter()
        train_loss, train_pen = train_epoch(model, cfg, data, opt, gens.shuffle, device)
        if not math.isfinite(train_loss):
            raise RunDiverged(
                f"{out_dir}: training loss is not finite in epoch {st.epoch + 1} (lr {cfg.lr}); "
                f"{last} keeps epoch {st.epoch}"
            )
        valid = evaluate(model, data.valid, device)
        st.epoch += 1
        st.history.append(
            {
                "epoch": st.epoch,
                "train_loss": train_loss,
                "train_penalty": train_pen,
                "valid_loss": valid["loss"],
                "valid_seq_acc": valid["seq_acc"],
                "valid_bit_acc": valid["bit_acc"],
            }
        )
        if proto:
            st.hist.append(histogram(valid["loading"]))
        better = valid["seq_acc"] > st.best_valid_acc or (
            valid["seq_acc"] == st.best_valid_acc and valid["loss"] < st.best_valid_loss
        )
        if better:
            st.best_epoch, st.best_valid_acc, st.best_valid_loss = st.epoch, valid["seq_acc"], valid["loss"]
            st.best_model = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        log(
            f"epoch {st.epoch}/{cfg.epochs} train loss {train_loss:.4f} (+{train_pen:.4f}) valid loss "
            f"{valid['loss']:.4f} seq acc {valid['seq_acc']:.4f} bit acc {valid['bit_acc']:.4f} "
            f"({time.perf_counter() - t0:.1f}s)"
        )
        now = time.perf_counter()
        st.wall_time_s += now - session
        session = now
        torch_save(
            last,
            {
                "config": cfg.to_dict(),
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "rng": rng_state(gens),
                "state": vars(st),
            },
        )

    assert st.best_model is not None
    model.load_state_dict(st.best_model)
    test = evaluate(model, data.test, device)
    valid = evaluate(model, data.valid, device)
    write_text(out_dir / "history.csv", history_csv(st.history, HISTORY_COLUMNS))
    if proto:
        write_npz(out_dir / "loading.npz", loading_arrays(model, cfg, st, device))
    wall = st.wall_time_s + time.perf_counter() - session
    metrics = {
        "study": "relreg",
        "experiment": meta.get("experiment"),
        "config_name": meta.get("config_name"),
        "point": meta.get("point"),
        "seed": cfg.seed,
        "dataset": cfg.dataset,
        "model": cfg.model,
        "best_valid_acc": st.best_valid_acc,
        "best_epoch": st.best_epoch,
        "epochs_run": st.epoch,
        "valid_main_loss": valid["loss"],
        "valid_bit_acc": valid["bit_acc"],
        "test_acc": float(np.mean([t["seq_acc"] for t in test["per_bits"].values()])),
        "test_bit_acc": float(np.mean([t["bit_acc"] for t in test["per_bits"].values()])),
        "test": test["per_bits"],
        "train_loss": st.history[-1]["train_loss"],
        "params": params,
        "cell_params": cell_params,
        "wall_time_s": wall,
        **environment(device),
        "config": cfg.to_dict(),
    }
    write_json(out_dir / "metrics.json", metrics)
    per = ", ".join(f"{k} bits {v['seq_acc']:.3f}" for k, v in test["per_bits"].items())
    log(f"done: best valid seq acc {st.best_valid_acc:.4f} at epoch {st.best_epoch}; test seq acc {per}")
    return metrics
