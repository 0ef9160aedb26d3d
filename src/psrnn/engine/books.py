"""The engine's bookkeeping, the same for a run alone and for each member of a fused group
(psrnn.engine.fit trains both through one loop): the device, the seeds, resuming from a
checkpoint, a finished run returned, one epoch's record (history, best epoch, stop), the
non-finite stop and the divergence flag, ckpt_best.pt's content and metrics.json.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from psrnn import gpus, registry
from psrnn.engine.checkpoint import (
    ConfigChanged,
    Generators,
    RunState,
    adopt,
    config_differences,
    data_difference,
    kernel_env,
    load_last,
    read_metrics,
    refuse_other_run,
    training_code,
)
from psrnn.engine.hooks import Hooks, hooks_of
from psrnn.engine.runlog import diverged_line, divergence
from psrnn.errors import UserError
from psrnn.machine import environment

# metrics.json keys of every study's runs; a study's hooks add METRIC_KEYS of their own
COMMON_METRIC_KEYS = frozenset(
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
        "diverged",
        "reused_from",
        "wall_time_s",
        "samples_per_s",
        "peak_memory_mb",
        "peak_memory_method",
        "device",
        "device_name",
        "torch_version",
        "cuda_version",
        "platform",
        "git_commit",
        "psrnn_version",
        "kernel_env",
        "torch_threads",
        "training_code",
        "data_identity",
        "config",
    }
)


def metric_keys(study: registry.Study) -> frozenset[str]:
    """Every key a finished run of `study` records in metrics.json."""
    return COMMON_METRIC_KEYS | hooks_of(study).METRIC_KEYS


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


def restore(
    run: Any,
    out_dir: Path,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    sched: Any,
    gens: Generators,
    data: Any,
    log: Callable[[str], None],
    restart_on_change: bool,
    reuse: str | Path | None,
    meta: dict[str, Any] | None = None,
) -> RunState | None:
    """The run's state from its ckpt_last.pt (or `reuse`'s, adopted when it is the same run),
    loaded into model, optimizer, scheduler and generators; None: a fresh start. A checkpoint
    of another run than `meta`'s is a UserError, restart_on_change or not (refuse_other_run)."""
    last_path = out_dir / "ckpt_last.pt"
    if reuse is not None and not last_path.is_file():
        log(adopt(Path(reuse), out_dir, run, data.identity, meta))
    if not last_path.is_file():
        return None
    try:
        return load_last(last_path, run, model, opt, sched, gens, data.identity, meta)
    except ConfigChanged as err:
        if not restart_on_change:
            raise
        log(f"starting over: {err.path} was written with a different config: {'; '.join(err.differences)}")
        return None


def finished(
    run: Any,
    out_dir: Path,
    log: Callable[[str], None],
    restart_on_change: bool,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The metrics of `out_dir` when it holds this run complete (None: it is to train). A
    metrics.json of other settings, or of other data than the study's data_identity hook
    names now (fault battery C X01: re-prepared data), is ConfigChanged, or with
    `restart_on_change` removed; one of another run than `meta`'s is a UserError either way
    (refuse_other_run). A record without data_identity (before psrnn recorded it), or data
    that cannot be read now, compares the settings only."""
    metrics_path = out_dir / "metrics.json"
    if not metrics_path.is_file():
        return None
    done = read_metrics(metrics_path)
    refuse_other_run(metrics_path, done, run, meta)
    diff = config_differences(done["config"], run)
    saved = done.get("data_identity")  # absent in records of psrnn before it
    now = None if saved is None else hooks_of(registry.of_settings(run)).data_identity(run)
    if saved is not None and now is not None:
        diff += data_difference("recorded", str(saved), now)
    if not diff:
        log(f"already complete: {metrics_path}")
        return done
    if not restart_on_change:
        raise ConfigChanged(metrics_path, diff)
    log(f"starting over: {metrics_path} is of a different config: {'; '.join(diff)}")
    metrics_path.unlink()
    return None


def record_epoch(
    st: RunState,
    row: dict[str, Any],
    valid: dict[str, Any],
    model: nn.Module,
    hooks: Any,
    run: Any,
    data: Any,
    device: torch.device,
    limits: tuple[int, int],
    may_stop: Callable[[Any, int], bool],
) -> bool:
    """The bookkeeping of one trained and validated epoch, the same for a run (fit) and for
    each member of a fused group (psrnn.engine.group): `row` (the epoch's history row) in
    the history, the best epoch by the study's score of `valid` and the stop (note_epoch,
    with the study's `limits` (patience, max epochs) and stop rule), then the study's
    capture of the epoch, if any. Returns whether the epoch is the new best."""
    epoch, (patience, max_epochs) = int(row["epoch"]), limits
    best = note_epoch(st, row, hooks.score(valid), model, patience, max_epochs, may_stop(run, epoch))
    captured = hooks.capture(model, data, run, device, epoch, valid)
    if captured is not None:
        st.captures[epoch] = captured
    return best


def divergence_crossed(st: RunState, hooks: Any, first_loss: float, first_label: str) -> str | None:
    """The divergence line when the epoch just recorded is the one whose loss crossed
    DIVERGENCE_FACTOR x the loss at initialisation (once per run), else None."""
    flag = divergence(st.history, first_loss, hooks.LOSS_COLUMN)
    return diverged_line(flag, first_label) if flag is not None and flag["epoch"] == st.epoch else None


def note_epoch(
    st: RunState,
    row: dict[str, Any],
    score: tuple[float, ...],
    model: nn.Module,
    patience: int,
    max_epochs: int,
    may_stop: bool = True,
) -> bool:
    """Record a trained and validated epoch (`row`, the study's `score` of its validation) in
    `st`: history, the best epoch (a CPU copy of `model`'s weights when it is a new best)
    and whether the run stops now: early stopping only where `may_stop` (the study's
    `may_stop` hook: e.g. at the end of a warm-restart cycle). Returns whether the epoch is
    the new best."""
    epoch = int(row["epoch"])
    st.history.append(row)
    st.epoch = epoch
    best = list(score) > st.best_score
    if best:
        st.best_score, st.best_valid_acc, st.best_epoch, st.since_best = list(score), score[0], epoch, 0
        st.best_model = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    else:
        st.since_best += 1
    if patience > 0 and st.since_best >= patience and may_stop:
        st.stopped = "early_stopping"
    elif epoch >= max_epochs:
        st.stopped = "max_epochs"
    return best


def stop_rule(hooks: Hooks) -> Callable[[Any, int], bool]:
    """The study's `may_stop(run, epoch)` hook: whether early stopping may end a run after
    that epoch (Hooks' default: after any)."""
    return hooks.may_stop


def non_finite_stop(st: RunState, epoch: int, message: str, log: Callable[[str], None]) -> dict[str, Any]:
    """End a run whose training loss went non-finite in `epoch` after at least one good
    epoch: like early stopping, its result is its best epoch so far (a grid point that
    diverges is an outcome of the search, not a failed job). Returns metrics.json's
    `diverged` for it: {epoch, train_loss: None, non_finite: the message}."""
    st.stopped = "non_finite"
    log(f"stopped: {message}; the run's result is its best epoch so far ({st.best_epoch})")
    return {"epoch": epoch, "train_loss": None, "non_finite": message}


def best_checkpoint(run: Any, st: RunState) -> dict[str, Any]:
    """What ckpt_best.pt holds: the best epoch's weights and the settings."""
    return {
        "config": run.to_dict(),
        "epoch": st.best_epoch,
        "valid_acc": st.best_valid_acc,
        "model": st.best_model,
    }


def run_metrics(
    run: Any,
    meta: dict[str, Any] | None,
    st: RunState,
    own: dict[str, Any],
    diverged: dict[str, Any] | None,
    wall_s: float,
    samples_per_s: float,
    peak_memory_mb: float,
    memory_method: str,
    device: torch.device,
    data_identity: str | None = None,
) -> dict[str, Any]:
    """A finished run's metrics.json: the keys every study shares around the study's `own`,
    checked against the study's declared METRIC_KEYS. `data_identity`: its data's (the
    study's Data.identity; None where the settings determine the data)."""
    metrics = {
        "experiment": (meta or {}).get("experiment"),
        "config_name": (meta or {}).get("config_name"),
        "seed": run.seed,
        "point": (meta or {}).get("point"),
        "dataset": run.dataset,
        "best_valid_acc": st.best_valid_acc,
        "best_epoch": st.best_epoch,
        "epochs_run": st.epoch,
        "stopped": st.stopped,
        "diverged": diverged,
        "reused_from": None,  # checkpoint.adopt_finished: the search run whose record this is
        **own,
        "wall_time_s": wall_s,
        "samples_per_s": samples_per_s,
        "peak_memory_mb": round(peak_memory_mb, 1),
        "peak_memory_method": memory_method,
        **environment(device),
        "kernel_env": kernel_env(),
        "training_code": training_code(run),  # psrnn.engine.codehash digest (its checkpoint's too)
        "data_identity": data_identity,  # a finished run is returned only on the same data (finished)
        "config": run.to_dict(),
    }
    expected = metric_keys(registry.of_settings(run))
    if set(metrics) != expected:  # a new or lost field must update the study's METRIC_KEYS
        raise AssertionError(
            f"metrics.json keys differ from the study's: missing {sorted(expected - set(metrics))} (its "
            f"finish must return them), undeclared {sorted(set(metrics) - expected)} (add to its METRIC_KEYS)"
        )
    return metrics
