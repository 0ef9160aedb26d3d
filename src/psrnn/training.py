"""Train one model (one experiment, one seed): `python -m psrnn train`.

    python -m psrnn train --config config/small.yaml --experiment mnist_ps --seed 0
    python -m psrnn train --config config/small.yaml --experiment mnist_ps --seed 0 --point hidden-64_lr-0.1
    python -m psrnn train --config config/small.yaml --experiment mnist_ps --seed 0 \
        --selected results/small/search/mnist_ps/selected.json --set max_epochs=5
    python -m psrnn train --config run.yaml --out results/scratch/run1   # a flat RunConfig YAML

Writes into the run directory (default `results/<name>/runs/<exp>/seed<k>/`, or
`results/<name>/search/<exp>/<point>/` with --point):
    history.csv        one row per epoch (rewritten every epoch)
    ckpt_best.pt       model of the best validation accuracy so far
    ckpt_last.pt       everything needed to resume (model, optimizer, scheduler, RNG and
                       generator states, history, early-stopping state, captured states)
    grad_norms.npz     per-step gradient norms on shared/private units (best model)
    hidden_states.npz  h_1..h_n of test inputs after `capture_epochs` (Figure 3)
    metrics.json       written last: its presence means the run is complete

Protocol: SGD with warm restarts (CosineAnnealingWarmRestarts stepped every batch with a
fractional epoch; paper) or Adam at a constant rate; gradient clipping; early stopping on
validation accuracy with `patience` (0 = off). A run restarted with the same command
continues from ckpt_last.pt and, on CPU, ends with exactly the metrics of an uninterrupted
run. A checkpoint written with other settings or on other prepared data (manifest.json
md5) is an error, or with --restart-on-change (the workflow's rules pass it: a changed
config re-runs the job) is set aside and the run starts over. Validation and test use
anchors from a fixed-seed generator, so auxiliary losses are comparable across epochs
and runs.

Log: a header line (device, parameter counts, split sizes, fresh start or resumed), one
line per epoch and, without the progress bar, a heartbeat every HEARTBEAT_S seconds inside
an epoch (step, steps/s, the epoch's ETA). A NaN/inf loss stops the run; a finite loss
that explodes (DIVERGENCE_FACTOR) is logged and recorded as metrics.json's `diverged`, and
the run goes on.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from psrnn import config as C
from psrnn import gpus
from psrnn.checkpoint import (  # noqa: F401 (re-exports)
    RESUME_EXEMPT,
    ConfigChanged,
    Generators,
    RunState,
    adopt,
    config_differences,
    data_identity,
    load_last,
    save_last,
)
from psrnn.data import SequenceSplit, batch_order, load_split, micro_batches, read_manifest
from psrnn.errors import UserError
from psrnn.files import read_json, torch_save, write_bytes, write_json, write_text
from psrnn.machine import PeakMemory, cpu_name, device_name, environment, git_commit  # noqa: F401 (re-exports)
from psrnn.models import PSRNN, build_model, count_params, grad_norms, hidden_states, sample_anchors

EVAL_ANCHOR_SEED = 1234  # same evaluation anchors every epoch and every run
GRAD_NORM_SEQUENCES = 64  # test sequences measured for grad_norms.npz
# Settings that may change between a checkpoint and its resumption: they do not change
# what is computed on a given device (the bar) or are the user's to move (CPU <-> GPU).
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
HEARTBEAT_S = 60.0  # seconds between progress lines inside an epoch (without the bar)
# An epoch whose mean training cross-entropy exceeds this multiple of the loss at
# initialisation, ln(num_classes), flags the run as diverged. Healthy runs stay near or
# below ln C: the 10 runs of results/recipe (real digits, SGDR at lr up to 1, Adam, AdamW)
# peak at 1.02 x ln 10, so 10 leaves a wide margin; exploded ones lie orders of magnitude
# above it (Adam at lr 1e6: ~1e7). The reference is ln C, not the first epoch's loss:
# such runs explode within their first epoch and then stay there.
DIVERGENCE_FACTOR = 10.0
# metrics.json's keys: the contract its readers rely on (results, regression, the tests);
# finish() writes exactly these.
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

StepHook = Callable[[int, int, PSRNN], None]  # (epoch, step, model), after each optimizer step


class TrainingDiverged(UserError):
    """The loss became NaN/inf; the last good checkpoint is kept and no metrics are written.
    (A finite loss that explodes does not raise: see divergence().)"""


# --- command line ------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (with experiments) or a flat run YAML")
    p.add_argument("--experiment", help="experiment name in the suite config")
    p.add_argument("--seed", type=int, help="seed (suite default: its first seed)")
    p.add_argument("--point", help="grid point id (a search run)")
    p.add_argument("--selected", help="selected.json of the experiment's search (final runs)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a run setting (YAML value), e.g. --set lr=0.1; repeatable",
    )
    p.add_argument("--out", help="run directory (default from the suite config's path conventions)")
    p.add_argument(
        "--restart-on-change",
        action="store_true",
        help="start over when the run directory's checkpoint was written with other "
        "settings (default: that is an error); Snakemake's rules pass it",
    )
    p.add_argument(
        "--reuse",
        metavar="RUN_DIR",
        help="start from RUN_DIR's checkpoint when it is of the same run (settings, seed, "
        "data); otherwise train as usual. Default with --selected and the suite's first seed: "
        "the search run of the selected point, which is that run",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="CPU threads of this run (torch.set_num_threads; default: torch's, all cores); "
        "Snakemake's rules pass the job's `threads`",
    )


def resolve_args(args: argparse.Namespace) -> tuple[C.RunConfig, Path, dict[str, Any]]:
    """(run config, run directory, metadata for metrics.json) from the command line."""
    raw = C.load_yaml(args.config)
    overrides = C.parse_set(args.set)
    if "experiments" not in raw:  # a flat RunConfig YAML
        if not args.out:
            raise UserError(f"{args.config} is a single-run config: --out <dir> is required")
        if args.experiment or args.point or args.selected:
            raise UserError("--experiment/--point/--selected need a suite config")
        values = {**raw, **overrides}
        if args.seed is not None:
            values["seed"] = args.seed
        cfg = C.coerce_run(values)
        stem = Path(args.config).stem
        meta = {"experiment": stem, "config_name": stem, "point": None}
        return cfg, Path(args.out), meta
    suite = C.load_suite(args.config)
    if not args.experiment:
        raise UserError(
            f"{args.config} is a suite config: --experiment is required; known: "
            f"{', '.join(sorted(suite['experiments']))}"
        )
    if args.point and args.selected:
        raise UserError("--point (a search run) and --selected (a final run) exclude each other")
    selected = None
    seed = suite["seeds"][0] if args.seed is None else args.seed
    if args.selected:
        sel = read_json(args.selected)
        if sel.get("experiment", args.experiment) != args.experiment:
            raise UserError(
                f"{args.selected} belongs to experiment {sel['experiment']!r}, not {args.experiment!r}"
            )
        selected = sel["overrides"]
        if seed == suite["seeds"][0] and sel.get("point") and args.reuse is None:
            # the search trained the selected point with this seed: the same run (adopt checks)
            args.reuse = str(C.search_dir(suite, args.experiment, sel["point"]))
    cfg = C.resolve_run(
        suite, args.experiment, seed, point=args.point, selected=selected, overrides=overrides
    )
    if args.out:
        out = Path(args.out)
    elif args.point:
        out = C.search_dir(suite, args.experiment, args.point)
    else:
        out = C.run_dir(suite, args.experiment, seed)
    meta = {"experiment": args.experiment, "config_name": suite["name"], "point": args.point}
    return cfg, out, meta


def run(args: argparse.Namespace) -> int:
    cfg, out, meta = resolve_args(args)
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads {args.threads}: must be at least 1")
        torch.set_num_threads(args.threads)
    metrics = train(cfg, out, meta, restart_on_change=args.restart_on_change, reuse=args.reuse)
    print(
        f"test_acc {metrics['test_acc']:.4f} (best valid {metrics['best_valid_acc']:.4f} "
        f"at epoch {metrics['best_epoch']}) -> {out / 'metrics.json'}"
    )
    return 0


# --- setup -------------------------------------------------------------------------------


def pick_device(name: str, log: Callable[[str], None] = print) -> torch.device:
    """The torch device for `device:`; plain `cuda` (or `auto` on a GPU host) claims a
    free GPU of several (psrnn.gpus), so parallel jobs on one host never share one."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name!r} but CUDA is not available (use device=auto or cpu)")
    if name == "cuda":
        index = gpus.claim(torch.cuda.device_count(), log=log, per_device=gpus.jobs_per_gpu())
        if index is not None:
            torch.cuda.set_device(index)
            return torch.device("cuda", index)
    return torch.device(name)


def seed_everything(seed: int, device: torch.device) -> None:
    """Seed python, numpy and torch; on GPU, ask for deterministic kernels where they exist."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if (
        device.type == "cuda"
    ):  # CPU kernels are deterministic already (and the switch costs seconds of imports)
        # must be set before cuBLAS starts for deterministic GPU matmuls
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # warn_only: a kernel without a deterministic version warns instead of stopping the run
        torch.use_deterministic_algorithms(True, warn_only=True)
        # ... but without its debugging aid of filling every new tensor with NaN: that costs
        # a kernel per allocation (a third of a GPU step's kernels) and changes no result
        torch.utils.deterministic.fill_uninitialized_memory = False
        torch.backends.cudnn.benchmark = False


def make_optimizer(cfg: C.RunConfig, model: PSRNN):
    """(optimizer, scheduler or None). "sgdr" and "adamwr" share the warm-restart schedule."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay), None
    if cfg.optimizer == "adamwr":
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.SGD(
            model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        opt, T_0=cfg.restart_epochs, T_mult=cfg.restart_mult
    )
    return opt, sched


def init_steps(split: SequenceSplit) -> int:
    """The length the "chrono" init spreads its memories over: the training split's mean."""
    return max(2, round(float(split.lengths.double().mean()))) if len(split) else 2


def draw_anchors(
    model: PSRNN, cfg: C.RunConfig, lengths: torch.Tensor, gen: torch.Generator
) -> torch.Tensor | None:
    if not model.has_aux:
        return None  # no draw: a baseline consumes no anchor randomness
    return sample_anchors(lengths, cfg.anchors, cfg.window, cfg.sampling, gen)


# --- one epoch, one evaluation -----------------------------------------------------------


def clip_gradients(params, max_norm: float) -> torch.Tensor:
    """Global gradient L2 norm (0-dim, on the device); with max_norm > 0, gradients are
    scaled so their norm is at most max_norm.

    Unlike torch.nn.utils.clip_grad_norm_, the norm is accumulated in float64: exploding
    RNN gradients can exceed float32's range when squared (~1e19) while every gradient is
    still finite, and such a step must be clipped, not reported as non-finite. The norm is
    inf/nan only when a gradient itself is.
    """
    grads = [p.grad for p in params if p.grad is not None]
    # one foreach kernel per step on the GPU, not one norm and one multiply per parameter
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float64)))
    if max_norm > 0:
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)  # no sync: stays on the device
        torch._foreach_mul_(grads, scale.to(grads[0].dtype))
    return norm


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


def train_epoch(
    model: PSRNN,
    split: SequenceSplit,
    cfg: C.RunConfig,
    opt,
    sched,
    gens: Generators,
    device: torch.device,
    epoch: int,
    on_step: StepHook | None = None,
    bar: bool = False,
    heartbeat: Callable[[str], None] | None = None,
    heartbeat_s: float = HEARTBEAT_S,
) -> dict[str, float]:
    """One pass over `split` in a seeded random order; returns the epoch's mean losses.

    heartbeat: receives a heartbeat_line() at the first step at least heartbeat_s seconds
    after the previous line (or the epoch's start). Raises TrainingDiverged at the first
    non-finite loss or gradient norm.
    """
    model.train()
    n = len(split)
    all_lengths = split.lengths  # (N,), computed once: text's come from its offsets
    batches = batch_order(all_lengths, cfg.batch_size, cfg.bucket, gens.shuffle)
    lr = opt.param_groups[0]["lr"]
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # CE sum, aux sum, correct
    steps = range(len(batches))
    if bar:
        from tqdm import tqdm

        steps = tqdm(steps, desc=f"epoch {epoch}", leave=False, dynamic_ncols=True)
    start = last_beat = time.monotonic()
    pending = None  # the previous step's (step, loss, gradient norm), checked a step late
    for step in steps:
        opt.zero_grad(set_to_none=True)
        batch = batches[step]
        lengths = all_lengths[batch]
        anchors = draw_anchors(model, cfg, lengths, gens.anchors)  # (B, m) | None
        loss = torch.zeros((), device=device)
        for piece in micro_batches(lengths, cfg.max_tokens):
            logits, aux, y = piece_forward(model, split, batch, piece, anchors, device)
            ce = F.cross_entropy(logits, y)
            aux_mean = aux.mean() if aux is not None else torch.zeros((), device=device)
            correct = (logits.argmax(-1) == y).sum()
            # each piece's mean losses weighted by its share: the batch mean, as one piece
            share = len(piece) / len(batch)
            piece_total = ce + cfg.aux_weight * aux_mean
            if share != 1.0:
                piece_total = piece_total * share
            piece_total.backward()
            loss = loss + piece_total.detach()
            b = len(piece)
            sums += torch.stack([ce.detach() * b, aux_mean.detach() * b, correct]).to(torch.float64)
        gnorm = clip_gradients(model.parameters(), cfg.clip)
        if pending is not None:
            check_finite(*pending, len(batches), epoch, cfg)
        pending = (step, loss, gnorm)
        opt.step()
        if sched is not None:
            sched.step(epoch - 1 + (step + 1) / len(batches))
        if on_step is not None:
            on_step(epoch, step + 1, model)
        if heartbeat is not None:
            # the finite check's sync keeps the host within two steps of the device
            now = time.monotonic()
            if now - last_beat >= heartbeat_s:
                heartbeat(heartbeat_line(epoch, cfg.max_epochs, step + 1, len(batches), now - start))
                last_beat = now
    if pending is not None:
        check_finite(*pending, len(batches), epoch, cfg)
    ce_sum, aux_sum, correct = sums.tolist()
    return {"lr": lr, "train_main_loss": ce_sum / n, "train_aux_loss": aux_sum / n, "train_acc": correct / n}


def piece_forward(
    model: PSRNN,
    split: SequenceSplit,
    batch: torch.Tensor,
    piece: torch.Tensor,
    anchors: torch.Tensor | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(logits (b, C), aux loss per sequence (b,) or None, labels (b,)) of the sequences at
    positions `piece` of `batch` (data.micro_batches), with their rows of the batch's anchors."""
    whole = len(piece) == len(batch)  # one piece: the batch as drawn, in its order
    x, lengths, y = split.batch(batch if whole else batch[piece])
    if anchors is not None and not whole:
        anchors = anchors[piece]
    x, lengths, y, anchors = to_device(device, x, lengths, y, anchors)
    logits, aux = model(x, lengths, anchors)
    return logits, aux, y


def to_device(device: torch.device, *tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """A batch's tensors on `device` (None stays None). non_blocking: a plain copy to a GPU
    waits for all the work queued before it, so a step would stall at every one."""
    return tuple(None if t is None else t.to(device, non_blocking=True) for t in tensors)


def check_finite(
    step: int, loss: torch.Tensor, gnorm: torch.Tensor, steps: int, epoch: int, cfg: C.RunConfig
) -> None:
    """Raise TrainingDiverged when a step's loss or gradient norm is not finite.

    Called for step s while step s + 1 is queued, so the host waits for step s only and the
    GPU is never idle for it: a step's non-finite update is applied, and the run stops one
    step later (nothing of it is saved: the last checkpoint is from the epoch before).
    """
    if bool(torch.isfinite(loss) & torch.isfinite(gnorm)):  # the step's one sync
        return
    what = "loss" if not torch.isfinite(loss) else "gradient norm"
    value = float(loss if what == "loss" else gnorm)
    hint = "lower lr" + (" or set clip > 0" if cfg.clip <= 0 else "")
    raise TrainingDiverged(
        f"non-finite {what} ({value}) at epoch {epoch}, step {step + 1} of "
        f"{steps}; {hint} (last good checkpoint kept, no metrics written)"
    )


@torch.no_grad()
def evaluate(model: PSRNN, split: SequenceSplit, cfg: C.RunConfig, device: torch.device) -> dict[str, float]:
    """Accuracy and per-sample mean losses on a split, anchors from a fixed-seed generator."""
    model.eval()
    gen = torch.Generator().manual_seed(EVAL_ANCHOR_SEED)
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # CE sum, aux sum, correct
    # by length: metrics do not depend on the order, and ragged text pads least this way
    ragged = split.offsets is not None
    all_lengths = split.lengths  # (N,)
    order = torch.argsort(all_lengths, stable=True) if ragged else torch.arange(len(split))
    for batch in order.split(cfg.batch_size):
        lengths = all_lengths[batch]
        anchors = draw_anchors(model, cfg, lengths, gen)
        for piece in micro_batches(lengths, cfg.max_tokens):
            logits, aux, y = piece_forward(model, split, batch, piece, anchors, device)
            ce = F.cross_entropy(logits, y, reduction="sum")
            aux_sum = aux.sum() if aux is not None else torch.zeros((), device=device)
            sums += torch.stack([ce, aux_sum, (logits.argmax(-1) == y).sum()]).to(torch.float64)
    ce_sum, aux_sum, correct = sums.tolist()
    n = max(len(split), 1)
    return {"main_loss": ce_sum / n, "aux_loss": aux_sum / n, "acc": correct / n}


def capture(model: PSRNN, split: SequenceSplit, count: int, device: torch.device) -> torch.Tensor:
    """float32 (S, T, d) states of the first `count` sequences of `split`, on the CPU."""
    x, lengths, _ = split.batch(torch.arange(min(count, len(split))))
    model.eval()
    return hidden_states(model, x.to(device), lengths).float().cpu()


# --- outputs -----------------------------------------------------------------------------


def history_csv(history: list[dict[str, float]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=HISTORY_COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in history:
        w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return buf.getvalue()


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes(path, buf.getvalue())


def capture_arrays(
    split: SequenceSplit, st: RunState, count: int, shared_units: int
) -> dict[str, np.ndarray]:
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


# --- the run -----------------------------------------------------------------------------


def train(
    cfg: C.RunConfig,
    out_dir: str | Path,
    meta: dict[str, Any] | None = None,
    on_step: StepHook | None = None,
    log: Callable[[str], None] | None = None,
    restart_on_change: bool = False,
    heartbeat_s: float = HEARTBEAT_S,
    reuse: str | Path | None = None,
) -> dict[str, Any]:
    """Train (or resume, or return) one run; returns its metrics (also in metrics.json).

    meta: experiment, config_name, point for metrics.json. on_step: called after every
    optimizer step (tests use it to interrupt a run). restart_on_change: a checkpoint of
    other settings is set aside (overwritten at the first epoch's end) instead of an error.
    heartbeat_s: seconds between progress lines inside an epoch (none under the bar).
    reuse: a run directory whose checkpoint this run starts from when it is the same run
    (checkpoint.adopt), unless this run has a checkpoint of its own.
    """
    out_dir = Path(out_dir)
    log = log or (lambda msg: print(msg, flush=True))
    metrics_path, last_path = out_dir / "metrics.json", out_dir / "ckpt_last.pt"
    if metrics_path.is_file():
        log(f"already complete: {metrics_path}")
        return read_json(metrics_path)
    if not cfg.data_dir:
        raise UserError("data_dir is empty: point it at a prepared dataset folder")
    session_start = time.perf_counter()
    device = pick_device(cfg.device, log)
    manifest = read_manifest(cfg.data_dir)
    data = data_identity(cfg)
    splits = {s: load_split(cfg.data_dir, s) for s in ("train", "valid", "test")}
    memory = PeakMemory(device)  # from here: the model, training, evaluation, the test
    memory.start()

    seed_everything(cfg.seed, device)
    num_classes = int(manifest["num_classes"])
    first_loss = math.log(num_classes)  # an untrained classifier predicts ~uniformly
    model = build_model(
        cfg, manifest["input"], int(manifest["features"]), num_classes, steps=init_steps(splits["train"])
    ).to(device)
    opt, sched = make_optimizer(cfg, model)
    gens = Generators.seeded(cfg.seed)
    st = None
    if reuse is not None and not last_path.is_file():
        log(adopt(Path(reuse), out_dir, cfg, data))
    if last_path.is_file():
        try:
            st = load_last(last_path, cfg, model, opt, sched, gens, data)
        except ConfigChanged as err:
            if not restart_on_change:
                raise
            log(
                f"starting over: {err.path} was written with a different config: {'; '.join(err.differences)}"
            )
    log(header(out_dir, device, model, splits, None if st is None else st.epoch))
    if st is None:
        st = RunState()
        if 0 in cfg.capture_epochs:  # the state at initialisation
            st.captures[0] = capture(model, splits["test"], cfg.capture_samples, device)
    bar = cfg.progress == "bar" or (cfg.progress == "auto" and sys.stderr.isatty())
    if bar:
        from tqdm import tqdm

        log = tqdm.write

    while st.stopped is None:
        if st.epoch >= cfg.max_epochs:
            st.stopped = "max_epochs"
            break
        epoch = st.epoch + 1
        t0 = time.perf_counter()
        beat = None if bar else log  # the bar shows progress itself
        row = {
            "epoch": epoch,
            **train_epoch(
                model, splits["train"], cfg, opt, sched, gens, device, epoch, on_step, bar, beat, heartbeat_s
            ),
        }
        st.train_time_s += time.perf_counter() - t0
        valid = evaluate(model, splits["valid"], cfg, device)
        row.update(
            valid_main_loss=valid["main_loss"],
            valid_aux_loss=valid["aux_loss"],
            valid_acc=valid["acc"],
            epoch_time_s=time.perf_counter() - t0,
        )
        st.history.append(row)
        st.epoch = epoch
        if valid["acc"] > st.best_valid_acc:
            st.best_valid_acc, st.best_epoch, st.since_best = valid["acc"], epoch, 0
            st.best_model = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            torch_save(
                out_dir / "ckpt_best.pt",
                {"config": cfg.to_dict(), "epoch": epoch, "valid_acc": valid["acc"], "model": st.best_model},
            )
        else:
            st.since_best += 1
        if epoch in cfg.capture_epochs:
            st.captures[epoch] = capture(model, splits["test"], cfg.capture_samples, device)
        if cfg.patience > 0 and st.since_best >= cfg.patience:
            st.stopped = "early_stopping"
        elif epoch >= cfg.max_epochs:
            st.stopped = "max_epochs"
        st.wall_time_s += time.perf_counter() - session_start
        session_start = time.perf_counter()
        st.peak_memory_mb = max(st.peak_memory_mb, memory.peak() / 2**20)
        write_text(out_dir / "history.csv", history_csv(st.history))
        save_last(last_path, cfg, st, model, opt, sched, gens, data)
        log(
            f"epoch {epoch}/{cfg.max_epochs} lr {row['lr']:.4g} | train ce {row['train_main_loss']:.4f} "
            f"aux {row['train_aux_loss']:.4f} acc {row['train_acc']:.4f} | valid ce "
            f"{row['valid_main_loss']:.4f} aux {row['valid_aux_loss']:.4f} acc {row['valid_acc']:.4f} "
            f"| {row['epoch_time_s']:.1f}s | best {st.best_valid_acc:.4f} @ {st.best_epoch}"
        )
        flag = divergence(st.history, first_loss)
        if flag is not None and flag["epoch"] == epoch:  # once, at the epoch that crossed
            log(
                f"diverged: epoch {epoch} train loss {flag['train_loss']:.4g} > "
                f"{DIVERGENCE_FACTOR:g} x first loss {first_loss:.4f} (ln {num_classes}, the "
                f"loss at initialisation); lower lr; the run goes on"
            )

    return finish(
        cfg,
        out_dir,
        meta or {},
        st,
        model,
        splits,
        device,
        session_start,
        divergence(st.history, first_loss),
        log,
        memory,
    )


def finish(
    cfg: C.RunConfig,
    out_dir: Path,
    meta: dict[str, Any],
    st: RunState,
    model: PSRNN,
    splits: dict[str, SequenceSplit],
    device: torch.device,
    session_start: float,
    diverged: dict[str, Any] | None,
    log: Callable[[str], None],
    memory: PeakMemory,
) -> dict[str, Any]:
    """Test the best model, write grad_norms.npz, hidden_states.npz, then metrics.json
    (with the peak memory of every session, the test included)."""
    model.load_state_dict(st.best_model)
    test = evaluate(model, splits["test"], cfg, device)
    best = st.history[st.best_epoch - 1]

    k = min(GRAD_NORM_SEQUENCES, len(splits["test"]))
    x, lengths, y = splits["test"].batch(torch.arange(k))
    anchors = draw_anchors(model, cfg, lengths, torch.Generator().manual_seed(EVAL_ANCHOR_SEED))
    write_npz(
        out_dir / "grad_norms.npz", grad_norms(model, x.to(device), lengths, y, anchors, cfg.aux_weight)
    )
    if cfg.capture_epochs:
        write_npz(
            out_dir / "hidden_states.npz",
            capture_arrays(splits["test"], st, cfg.capture_samples, model.shared_units),
        )

    last = st.history[-1]
    wall = st.wall_time_s + time.perf_counter() - session_start
    metrics = {
        "experiment": meta.get("experiment"),
        "config_name": meta.get("config_name"),
        "seed": cfg.seed,
        "point": meta.get("point"),
        "dataset": cfg.dataset,
        "test_acc": test["acc"],
        "best_valid_acc": st.best_valid_acc,
        "best_epoch": st.best_epoch,
        "epochs_run": st.epoch,
        "stopped": st.stopped,
        "diverged": diverged,
        "test_main_loss": test["main_loss"],
        "test_aux_loss": test["aux_loss"],
        "valid_main_loss": best["valid_main_loss"],
        "valid_aux_loss": best["valid_aux_loss"],
        "train_main_loss": last["train_main_loss"],
        "train_aux_loss": last["train_aux_loss"],
        **count_params(model),
        "shared_units": model.shared_units,
        "wall_time_s": wall,
        "samples_per_s": len(splits["train"]) * st.epoch / max(st.train_time_s, 1e-9),
        "peak_memory_mb": round(max(st.peak_memory_mb, memory.peak() / 2**20), 1),
        "peak_memory_method": memory.method,
        **environment(device),
        "config": cfg.to_dict(),
    }
    if set(metrics) != METRIC_KEYS:  # a new or lost field must update the contract above
        raise AssertionError(f"metrics.json keys differ from METRIC_KEYS: {set(metrics) ^ METRIC_KEYS}")
    write_json(out_dir / "metrics.json", metrics)
    note = "" if diverged is None else f", diverged at epoch {diverged['epoch']}"
    log(
        f"done: test acc {test['acc']:.4f}, best valid {st.best_valid_acc:.4f} at epoch "
        f"{st.best_epoch} ({st.stopped}, {st.epoch} epochs, {wall:.0f}s{note})"
    )
    return metrics
