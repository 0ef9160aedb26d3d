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

This module holds the command line, the set-up and the run (train, finish); one epoch's
steps and the evaluation are psrnn.epoch's, the log lines and output files psrnn.runlog's
(their names stay importable from here).
"""

from __future__ import annotations

import argparse
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
from torch import nn

from psrnn import config as C
from psrnn import gpus, studies
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
from psrnn.data import SequenceSplit, batch_order, load_split, read_manifest  # noqa: F401 (re-exports)
from psrnn.epoch import (  # noqa: F401 (re-exports: the step mechanics, psrnn.epoch)
    EVAL_ANCHOR_SEED,
    HEARTBEAT_S,
    StepHook,
    TrainingDiverged,
    capture,
    clip_gradients,
    draw_anchors,
    evaluate,
    train_epoch,
)
from psrnn.errors import UserError
from psrnn.files import read_json, torch_save, write_json, write_text
from psrnn.machine import PeakMemory, cpu_name, environment, git_commit  # noqa: F401 (re-exports)
from psrnn.models import PSRNN, build_model, count_params, grad_norms
from psrnn.runlog import (  # noqa: F401 (re-exports: what a run writes and logs, psrnn.runlog)
    HISTORY_COLUMNS,
    METRIC_KEYS,
    capture_arrays,
    clock,
    diverged_line,
    divergence,
    epoch_line,
    header,
    heartbeat_line,
    history_csv,
    write_npz,
)

GRAD_NORM_SEQUENCES = 64  # test sequences measured for grad_norms.npz


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
    # another study's run settings go to that study's trainer (psrnn.studies)
    trainer = train if isinstance(cfg, C.RunConfig) else studies.of_run(cfg).train
    metrics = trainer(cfg, out, meta, restart_on_change=args.restart_on_change, reuse=args.reuse)
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
        # (a module property that torch's type stubs do not declare)
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
        torch.backends.cudnn.benchmark = False


def make_optimizer(
    cfg: C.RunConfig, model: nn.Module
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    """(optimizer, scheduler or None). "sgdr" and "adamwr" share the warm-restart schedule."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay), None
    opt: torch.optim.Optimizer
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
        log(epoch_line(row, cfg.max_epochs, st))
        flag = divergence(st.history, first_loss)
        if flag is not None and flag["epoch"] == epoch:  # once, at the epoch that crossed
            log(diverged_line(flag, num_classes))

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
    assert st.best_model is not None  # set at the first epoch's end: every accuracy beats -1
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
