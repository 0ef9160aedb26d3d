"""The training engine: one loop that trains, resumes and records a run of any study.

    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0
    python -m psrnn train --config config/relreg.yaml --experiment proto_both --seed 1 \
        --selected results/relreg/search/proto_both/selected.json

A study supplies its science as a subclass of `Hooks` below (psrnn.registry names it; it says
what it holds: data, model, optimizer, one epoch, evaluation, the run's own outputs). The
engine supplies the bookkeeping, once for every study:

- the loop: epochs up to the study's limit, early stopping after `patience` epochs without
  a better validation score (0 = off), the best epoch by the study's score (its first
  entry is the validation accuracy; later entries break ties) kept as ckpt_best.pt;
- resume: ckpt_last.pt after every epoch holds model, optimizer, scheduler, every RNG and
  the run's state (psrnn.engine.checkpoint); a restarted run continues from it and, on CPU, ends
  with exactly the metrics of an uninterrupted run. A checkpoint of other settings (the
  study's resume-exempt ones aside) or other data is an error naming them, or with
  `restart_on_change` is set aside; `reuse` adopts a finished search run that is the same
  run; a run whose metrics.json exists returns it without training, if it records the
  same settings and data (else that is the error, or with `restart_on_change` the run
  starts over);
  a folder whose record names another run (experiment, point, a final run's seed) is an
  error either way (checkpoint.refuse_other_run);
- one writer: a process training a run folder holds it (sole_writer); a second one is
  refused until the first ends, however it ends;
- kernels: the checkpoint records the CPU-kernel variables a suite's job_env sets
  (checkpoint.KERNEL_ENV; `python -m psrnn train` applies the suite's, psrnn.engine.jobenv) and
  resumes only under the same ones, so a run's numbers do not depend on how it started;
- failure: a NaN/inf training loss ends the run (`stopped: non_finite`): its result is its
  best epoch so far, as early stopping would have kept, and metrics.json's `diverged` says
  where and why (so a grid point that diverges is a search outcome, not a failed job); in
  the first epoch there is no result yet, so it is an error (TrainingDiverged; nothing
  written but what the study wrote before training); a finite loss that explodes past
  DIVERGENCE_FACTOR x the loss at initialisation is logged and recorded as metrics.json's
  `diverged`;
- records: history.csv every epoch, and metrics.json last (its presence means the run is
  complete) with the keys every study shares (COMMON_METRIC_KEYS: identity, selection,
  stop, divergence, time, memory, machine and code provenance, settings) beside the
  study's own, checked against the study's declared METRIC_KEYS.

One loop does this for a run alone and for the members of a fused group alike
(train_members): a run alone is its batch of one (Alone), a group's members are its study's
Batched (psrnn.engine.hooks; psrnn.engine.group sets them up). The bookkeeping of an epoch
and of a finished run is psrnn.engine.books'.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from psrnn import registry
from psrnn.engine.books import (
    best_checkpoint,
    divergence_crossed,
    finished,
    non_finite_stop,
    pick_device,
    record_epoch,
    restore,
    run_metrics,
    seed_everything,
    stop_rule,
)
from psrnn.engine.checkpoint import Generators, RunState, adopt_finished, save_last
from psrnn.engine.hooks import Batched, Epoch, Hooks, StepHook, hooks_of
from psrnn.engine.runlog import divergence, history_csv
from psrnn.engine.settings import RunSettings
from psrnn.errors import TrainingDiverged
from psrnn.files import sole_writer, torch_save, write_json, write_text
from psrnn.machine import PeakMemory

HEARTBEAT_S = 60.0  # seconds between progress lines inside an epoch (without the bar)


@dataclass
class Job:
    """A run to train: its settings, its folder, metrics.json's metadata (experiment,
    config_name, point), a finished search run to adopt when it is the same run."""

    run: RunSettings
    out_dir: Path
    meta: dict[str, Any]
    reuse: Path | None = None


@dataclass
class Member:
    """A run as the loop trains it: the job, its own model, optimizer, scheduler and
    generators (they hold its checkpoint), its state and, where the batch draws its random
    numbers per member (Batched.OWN_RNG), its global RNG states (None: the process's are its)."""

    job: Job
    model: nn.Module
    opt: Any  # torch.optim's, or the state a study's fused module keeps of one
    sched: Any
    gens: Generators
    st: RunState
    rng: dict[str, Any] | None = None
    best_unsaved: bool = False
    non_finite: dict[str, Any] | None = None  # books.non_finite_stop's record, once stopped so


# --- one run -----------------------------------------------------------------------------


def fit(
    run: RunSettings,
    out_dir: str | Path,
    meta: dict[str, Any] | None = None,
    on_step: StepHook | None = None,
    log: Callable[[str], None] | None = None,
    restart_on_change: bool = False,
    heartbeat_s: float = HEARTBEAT_S,
    reuse: str | Path | None = None,
) -> dict[str, Any]:
    """Train (or resume, or return) one run of any study; returns its metrics (also in
    metrics.json).

    meta: experiment, config_name, point for metrics.json. on_step: called after every
    optimizer step. restart_on_change: a checkpoint of other settings is set aside
    (overwritten at the first epoch's end) instead of an error. heartbeat_s: seconds
    between progress lines inside an epoch. reuse: a run folder whose checkpoint this run
    starts from when it is the same run (checkpoint.adopt), unless it has one of its own.
    """
    job = Job(run, Path(out_dir), meta or {}, None if reuse is None else Path(reuse))
    with sole_writer(job.out_dir):
        return _fit(job, on_step, log or (lambda msg: print(msg, flush=True)), restart_on_change, heartbeat_s)


def _fit(
    job: Job,
    on_step: StepHook | None,
    log: Callable[[str], None],
    restart_on_change: bool,
    heartbeat_s: float,
) -> dict[str, Any]:
    run = job.run
    done = finished(run, job.out_dir, log, restart_on_change, job.meta)
    if done is not None:
        return done
    hooks = hooks_of(registry.of_settings(run))
    session_start = time.perf_counter()
    device = pick_device(run.device, log)
    data = hooks.data(run)
    if job.reuse is not None:  # a finished search run that is this run: its record
        adopted = adopt_finished(job.reuse, job.out_dir, run, data.identity, job.meta, log)
        if adopted is not None:
            return adopted
    memory = PeakMemory(device)  # from here: the model, training, evaluation, the test
    memory.start()
    m = member(job, hooks, hooks.optimizer, data, device, log, restart_on_change, own_rng=False)
    bar = run.progress == "bar" or (run.progress == "auto" and sys.stderr.isatty())
    if bar:
        from tqdm import tqdm

        log = tqdm.write
    if at_limit([m], hooks):
        beat = None if bar else log  # the bar shows progress itself
        alone = Alone(m, hooks, device, on_step=on_step, bar=bar, beat=beat, heartbeat_s=heartbeat_s)
        failed = train_members([m], alone, hooks, data, device, memory, log, 0.0, started=session_start)
        if failed:  # not one epoch trained: there is no result to keep
            raise TrainingDiverged(failed[id(m)])
    load_best(m)
    return finish_member(m, hooks, data, device, memory, log)


class Alone(Batched):
    """A run alone as the loop's batch of one: its study's own epoch (Hooks.train_epoch,
    told the step hook, the bar and the heartbeat) and evaluation on its own model. It draws
    from the process's generators, as a run alone does (OWN_RNG False)."""

    OWN_RNG = False

    def __init__(  # its member, not a fused group's runs, models and optimizers
        self,
        member: Member,
        hooks: Hooks,
        device: torch.device,
        *,
        on_step: StepHook | None = None,
        bar: bool = False,
        beat: Callable[[str], None] | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ):
        """`bar`: its epochs show progress under a bar; else heartbeat lines go to `beat`."""
        self.m, self.hooks, self.device, self.on_step = member, hooks, device, on_step
        self.bar, self.beat, self.heartbeat_s = bar, beat, heartbeat_s
        self.why: str | None = None

    def train_epoch(
        self, data: Any, epoch: int, gens: list[Generators], rngs: list[torch.Generator]
    ) -> dict[str, Any]:
        e = Epoch(epoch, self.on_step, self.bar, self.beat, self.heartbeat_s)
        m, self.why = self.m, None
        try:
            row = self.hooks.train_epoch(m.model, data, m.job.run, m.opt, m.sched, gens[0], self.device, e)
        except TrainingDiverged as err:  # the study's own words for it
            self.why = str(err)
            return {self.hooks.LOSS_COLUMN: [math.nan]}
        return {k: [v] for k, v in row.items()}

    def validate(self, data: Any) -> list[dict[str, Any]]:
        return [self.hooks.evaluate(self.m.model, data, self.m.job.run, self.device)]

    def write_back(self, r: int, model: nn.Module, opt: Any) -> None:
        """Nothing: the run trains its own model."""

    def keep(self, rows: list[int]) -> None:
        """Nothing: a run alone stops the loop when it stops."""

    def failure(self, r: int) -> str | None:
        return self.why


# --- the loop, for a run alone and for a fused group's members -----------------------------


def member(
    job: Job,
    hooks: Hooks,
    make_opt: Callable[[Any, nn.Module], tuple[Any, Any]],
    data: Any,
    device: torch.device,
    log: Callable[[str], None],
    restart_on_change: bool,
    own_rng: bool = True,
) -> Member:
    """A run set up to train: seeded, built, restored from its checkpoint or fresh (with the
    study's capture of its initial state). own_rng: keep its global RNG states as the member's
    (a fused group's members; Batched.OWN_RNG)."""
    run = job.run
    seed_everything(run.seed, device)
    model = hooks.build(run, data).to(device)
    opt, sched = make_opt(run, model)
    gens = Generators.seeded(run.seed)
    st = restore(run, job.out_dir, model, opt, sched, gens, data, log, restart_on_change, job.reuse, job.meta)
    log(hooks.header(job.out_dir, device, model, data, run, None if st is None else st.epoch))
    rng = None
    if own_rng:
        rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if st is None:
        st = RunState()
        first = hooks.capture(model, data, run, device, 0, None)  # the state at initialisation
        if first is not None:
            st.captures[0] = first
    return Member(job, model, opt, sched, gens, st, rng)


def at_limit(members: list[Member], hooks: Hooks) -> list[Member]:
    """The members still to train: a resumed member at the study's epoch limit stops there."""
    max_epochs, _ = hooks.limits(members[0].job.run)
    for m in members:
        if m.st.stopped is None and m.st.epoch >= max_epochs:
            m.st.stopped = "max_epochs"
    return [m for m in members if m.st.stopped is None]


def train_members(
    members: list[Member],
    batch: Batched,
    hooks: Hooks,
    data: Any,
    device: torch.device,
    memory: PeakMemory,
    log: Callable[[str], None],
    save_every_s: float,
    on_epoch: Callable[[int], None] | None = None,
    started: float | None = None,
) -> dict[int, str]:
    """Train `members` (at the same epoch, each still to train; `batch` holds them in this
    order) to their ends: every epoch, each member's history row, best epoch, stop, captures
    and divergence flag (psrnn.engine.books), its checkpoints when `save_every_s` seconds
    have passed (0: every epoch) and when it stops. A member whose loss goes non-finite
    stops with its best epoch (books.non_finite_stop); in its first epoch it has no result:
    it is dropped and returned, id(member) -> the message. `started`: when this session's
    time began (its first epoch's wall time counts from it; default: the loop's start)."""
    alone = isinstance(batch, Alone)
    run0 = members[0].job.run
    max_epochs, patience = hooks.limits(run0)
    may_stop = stop_rule(hooks)
    first_loss, first_label = hooks.first_loss(data)
    rngs = [torch.Generator().set_state(m.rng["torch"]) for m in members if m.rng is not None]
    active, failed, saved_at = list(members), {}, time.perf_counter()
    wall_from = saved_at if started is None else started
    while active:
        t0 = time.perf_counter()
        epoch = active[0].st.epoch + 1
        columns = batch.train_epoch(data, epoch, [m.gens for m in active], rngs)
        loss = columns[hooks.LOSS_COLUMN]
        train_s = time.perf_counter() - t0
        valids = batch.validate(data)
        now = time.perf_counter()
        share, wall = (now - t0) / len(active), (now - wall_from) / len(active)
        wall_from, due = now, save_every_s <= 0 or now - saved_at >= save_every_s
        keep = []
        for r, m in enumerate(active):
            run, out = m.job.run, m.job.out_dir
            if not math.isfinite(float(loss[r])):
                message = (
                    batch.failure(r) or f"{out}: training loss is not finite in epoch {epoch} (lr {run.lr})"
                )
                if m.st.best_model is None:  # not one epoch trained: no result
                    log(f"{message}; ckpt_last.pt keeps its last saved epoch, no metrics written")
                    failed[id(m)] = message
                else:
                    m.non_finite = non_finite_stop(m.st, epoch, message, log)
                    save_records(m, hooks)  # its history and best epoch, as every epoch has them
                continue
            row = {"epoch": epoch, **{k: _value(v, r) for k, v in columns.items()}}
            row.update(hooks.valid_row(valids[r]), epoch_time_s=share)
            if list(hooks.score(valids[r])) > m.st.best_score or due:
                batch.write_back(r, m.model, m.opt)  # the member's own model holds its weights
            m.best_unsaved |= record_epoch(
                m.st, row, valids[r], m.model, hooks, run, data, device, (patience, max_epochs), may_stop
            )
            m.st.train_time_s += train_s / len(active)
            m.st.wall_time_s += wall
            m.st.peak_memory_mb = max(m.st.peak_memory_mb, memory.peak() / 2**20)
            if m.rng is not None:
                m.rng["torch"] = rngs[r].get_state()
            if m.st.stopped is not None and not due:
                batch.write_back(r, m.model, m.opt)
            if due or m.st.stopped is not None:
                save_member(m, hooks, data)
            if alone:
                log(hooks.epoch_line(row, run, m.st))
            crossed = divergence_crossed(m.st, hooks, first_loss, first_label)
            if crossed is not None:
                log(crossed if alone else f"{out}: {crossed}")
            if m.st.stopped is None:
                keep.append(r)
        if due:
            saved_at = time.perf_counter()
        if not alone:
            losses = [float(v) for v in loss if math.isfinite(float(v))]
            median = float(np.median(losses)) if losses else math.nan
            log(
                f"epoch {epoch}/{max_epochs}: {len(active)} runs, train loss median {median:.4f}, "
                f"{share * len(active):.1f}s"
            )
        if on_epoch is not None:
            on_epoch(epoch)
        if len(keep) < len(active):
            active, rngs = [active[r] for r in keep], [rngs[r] for r in keep if r < len(rngs)]
            if active:
                batch.keep(keep)
    return failed


def _value(column: Any, r: int) -> Any:
    """Member r's value of a history column: a tensor's as a float, a hook's value as it is."""
    return float(column[r]) if isinstance(column, torch.Tensor) else column[r]


def save_records(m: Member, hooks: Hooks) -> None:
    """The member's history.csv and ckpt_best.pt (when it changed)."""
    out = m.job.out_dir
    write_text(out / "history.csv", history_csv(m.st.history, hooks.HISTORY_COLUMNS))
    if m.best_unsaved:
        torch_save(out / "ckpt_best.pt", best_checkpoint(m.job.run, m.st))
        m.best_unsaved = False


def save_member(m: Member, hooks: Hooks, data: Any) -> None:
    """The member's history.csv, ckpt_best.pt (when it changed) and ckpt_last.pt (its own
    model and optimizer hold its current state; its RNG states are the process's once set)."""
    save_records(m, hooks)
    if m.rng is not None:  # checkpoint.rng_state reads the global generators
        torch.set_rng_state(m.rng["torch"])
        np.random.set_state(m.rng["numpy"])
        random.setstate(m.rng["python"])
    job = m.job
    save_last(
        job.out_dir / "ckpt_last.pt", job.run, m.st, m.model, m.opt, m.sched, m.gens, data.identity, job.meta
    )


def load_best(m: Member) -> None:
    """The member's best epoch into its model (set at its first epoch's end: every score beats -1)."""
    assert m.st.best_model is not None
    m.model.load_state_dict(m.st.best_model)


def finish_member(
    m: Member,
    hooks: Hooks,
    data: Any,
    device: torch.device,
    memory: PeakMemory,
    log: Callable[[str], None],
    evaluated: dict[str, Any] | None = None,
    share: float = 0.0,
    named: bool = False,
) -> dict[str, Any]:
    """The run's own outputs (the study's finish, its best epoch loaded) and metrics.json,
    last. `evaluated`: its final evaluation made for a fused group, `share` its part of
    that time; `named`: the log line names the run's folder (a group's)."""
    t0 = time.perf_counter()
    run, st, out = m.job.run, m.st, m.job.out_dir
    extra = {} if evaluated is None else {"evaluated": evaluated}
    own = hooks.finish(m.model, data, run, st, device, out, **extra)
    wall = st.wall_time_s + share + time.perf_counter() - t0
    first_loss, _ = hooks.first_loss(data)
    diverged = m.non_finite or divergence(st.history, first_loss, hooks.LOSS_COLUMN)
    samples_per_s = len(data.train) * st.epoch / max(st.train_time_s, 1e-9)
    peak_mb = max(st.peak_memory_mb, memory.peak() / 2**20)
    metrics = run_metrics(
        run, m.job.meta, st, own, diverged, wall, samples_per_s, peak_mb, memory.method, device, data.identity
    )
    write_json(out / "metrics.json", metrics)
    note = "" if diverged is None else f", diverged at epoch {diverged['epoch']}"
    log(
        f"done{f' {out}' if named else ''}: test acc {metrics['test_acc']:.4f}, best valid "
        f"{st.best_valid_acc:.4f} at epoch {st.best_epoch} ({st.stopped}, {st.epoch} epochs, "
        f"{wall:.0f}s{note})"
    )
    return metrics
