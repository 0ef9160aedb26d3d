"""Fused runs: one process trains a group of runs at once, each kept as if it ran alone.

    python -m psrnn train-group --config config/relreg.yaml --experiment proto_both
    python -m psrnn train-group --config config/relreg.yaml --experiment proto_both --group cells-4_hidden-8
    python -m psrnn train-group --config config/relreg.yaml --experiment lstm_l2 --seeds 1 2 3 4 \\
        --selected results/relreg/search/lstm_l2/selected.json

A grid search is one process per grid point; for tiny models that is mostly start-up and
Python stepping one small batch at a time. Here the members of a group whose study can
batch them (psrnn.registry: the row's `fused` module and `group_key`) train as one
batched model, R runs stepped together (psrnn.studies.relreg.fused); members it cannot batch
(another model kind, a GPU) train one after another with psrnn.engine.fit.fit in this process.
The fused module may give its members' optimizers (`optimizer(run, model)`: only the state
their checkpoints hold, as it steps them itself) and their final evaluations, batched
(`final_evaluations(runs, models, data)`: what the study's `finish` takes as `evaluated`).

Every member keeps its own run folder with the files psrnn.engine.fit.fit writes (history.csv,
ckpt_best.pt, ckpt_last.pt, the study's own files, metrics.json last) and the engine's
bookkeeping (psrnn.engine.fit: record_epoch, run_metrics, restore): a finished member is
returned without training, a member with a ckpt_last.pt resumes from it, and its
ckpt_last.pt is the one engine.fit writes, so a member may also be resumed alone. Members
resumed at different epochs train as separate cohorts. Differences from a lone run:

- checkpoints (ckpt_last.pt, ckpt_best.pt, history.csv) are written every `save_every_s`
  seconds of training (at an epoch's end) and when the member stops, not every epoch: a
  killed group resumes each member from its last one;
- wall_time_s and samples_per_s are the member's share of the group's time (the group's
  time over its members) plus its own final evaluation; peak memory is the process's;
- the numbers agree with a lone run's to float rounding (psrnn.studies.relreg.fused says why,
  and where over many epochs that rounding grows).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psrnn import config as C
from psrnn import registry
from psrnn.engine import groups, jobenv
from psrnn.engine.checkpoint import Generators, RunState, adopt_finished, save_last
from psrnn.engine.fit import (
    best_checkpoint,
    divergence_crossed,
    finished,
    fit,
    hooks_of,
    non_finite_stop,
    pick_device,
    record_epoch,
    restore,
    run_metrics,
    seed_everything,
    stop_rule,
)
from psrnn.engine.runlog import divergence, history_csv
from psrnn.engine.selection import overrides_for, read_selected, refuse_switched_off
from psrnn.errors import TrainingDiverged, UserError
from psrnn.files import sole_writer, torch_save, write_json, write_text
from psrnn.machine import PeakMemory

SAVE_EVERY_S = 60.0  # seconds of training between a group's checkpoints


@dataclass
class Job:
    """One member: its settings, its folder, metrics.json's metadata, a run to adopt."""

    run: Any
    out_dir: Path
    meta: dict[str, Any]
    reuse: Path | None = None


@dataclass
class Member:
    """A member as the group trains it: the job, its own model, optimizer and generators
    (they hold its checkpoint), its state and its global RNG states (torch's is its noise)."""

    job: Job
    model: torch.nn.Module
    opt: Any  # torch.optim's, or the fused module's state of one (its checkpoint's part)
    sched: Any
    gens: Generators
    st: RunState
    rng: dict[str, Any] = field(default_factory=dict)
    best_unsaved: bool = False
    non_finite: dict[str, Any] | None = None  # engine.non_finite_stop's record, once stopped so


def fit_group(
    jobs: list[Job],
    log: Callable[[str], None] | None = None,
    restart_on_change: bool = False,
    save_every_s: float = SAVE_EVERY_S,
    on_epoch: Callable[[int], None] | None = None,
) -> list[dict[str, Any] | None]:
    """Train (or resume, or return) every job; their metrics in order (None: the member's
    loss was not finite, TrainingDiverged is raised after the others finish).

    on_epoch(epoch): called after every fused epoch's bookkeeping (tests stop a group with it).
    """
    log = log or (lambda msg: print(msg, flush=True))
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    batches: dict[Any, list[int]] = {}
    for i, job in enumerate(jobs):
        key = groups.group_key(job.run)
        if key is None:
            results[i] = fit(
                job.run, job.out_dir, job.meta, log=log, restart_on_change=restart_on_change, reuse=job.reuse
            )
        else:
            batches.setdefault(key, []).append(i)
    failed = []
    for rows in batches.values():
        metrics = _fit_fused([jobs[i] for i in rows], log, restart_on_change, save_every_s, on_epoch)
        for i, m in zip(rows, metrics, strict=True):
            results[i] = m
            if m is None:
                failed.append(str(jobs[i].out_dir))
    if failed:
        raise TrainingDiverged(f"training loss not finite in {len(failed)} run(s): {', '.join(failed)}")
    return results


def _fit_fused(
    jobs: list[Job],
    log: Callable[[str], None],
    restart_on_change: bool,
    save_every_s: float,
    on_epoch: Callable[[int], None] | None,
) -> list[dict[str, Any] | None]:
    run0 = jobs[0].run
    study = registry.of_settings(run0)
    hooks, module = hooks_of(study), importlib.import_module(str(study.fused))
    fused = module.Batched
    with contextlib.ExitStack() as held:
        for job in jobs:
            held.enter_context(sole_writer(job.out_dir))
        results: list[dict[str, Any] | None] = [
            finished(j.run, j.out_dir, log, restart_on_change) for j in jobs
        ]
        todo = [i for i, r in enumerate(results) if r is None]
        if not todo:
            return results
        device = pick_device(run0.device, log)
        data = hooks.data(run0)  # the group key holds every data setting: one data for all
        for i in todo:  # a final run that is its finished search run: its record (engine.fit)
            job = jobs[i]
            if job.reuse is not None:
                results[i] = adopt_finished(
                    Path(job.reuse), job.out_dir, job.run, data.identity, job.meta, log
                )
        todo = [i for i in todo if results[i] is None]
        if not todo:
            return results
        memory = PeakMemory(device)
        memory.start()
        make_opt = getattr(module, "optimizer", hooks.optimizer)
        members = {i: _member(jobs[i], hooks, make_opt, data, device, log, restart_on_change) for i in todo}
        max_epochs, patience = hooks.limits(run0)
        for m in members.values():
            if m.st.stopped is None and m.st.epoch >= max_epochs:
                m.st.stopped = "max_epochs"
        cohorts: dict[int, list[Member]] = {}
        for m in members.values():
            if m.st.stopped is None:
                cohorts.setdefault(m.st.epoch, []).append(m)
        failed: set[int] = set()
        for cohort in cohorts.values():
            failed |= _train(cohort, fused, hooks, data, device, memory, log, save_every_s, on_epoch)
        done = {i: m for i, m in members.items() if id(m) not in failed}
        t0 = time.perf_counter()
        for m in done.values():
            assert m.st.best_model is not None
            m.model.load_state_dict(m.st.best_model)
        evaluated: list[dict[str, Any] | None] = [None] * len(done)
        if done and hasattr(module, "final_evaluations"):
            runs, models = [m.job.run for m in done.values()], [m.model for m in done.values()]
            evaluated = list(module.final_evaluations(runs, models, data))
        share = (time.perf_counter() - t0) / max(len(done), 1)
        for (i, m), ev in zip(done.items(), evaluated, strict=True):
            results[i] = _finish(m, hooks, data, device, memory, log, ev, share)
    return results


def _member(
    job: Job, hooks: Any, make_opt: Callable, data: Any, device: torch.device, log, restart_on_change: bool
) -> Member:
    """A member set up as engine.fit sets up a run: seeded, built, restored or fresh."""
    run = job.run
    seed_everything(run.seed, device)
    model = hooks.build(run, data).to(device)
    opt, sched = make_opt(run, model)
    gens = Generators.seeded(run.seed)
    st = restore(run, job.out_dir, model, opt, sched, gens, data, log, restart_on_change, job.reuse)
    log(hooks.header(job.out_dir, device, model, data, run, None if st is None else st.epoch))
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if st is None:
        st = RunState()
        first = hooks.capture(model, data, run, device, 0, None)  # the state at initialisation
        if first is not None:
            st.captures[0] = first
    return Member(job, model, opt, sched, gens, st, rng)


def _train(
    cohort: list[Member], fused: Any, hooks: Any, data: Any, device, memory, log, save_every_s, on_epoch
) -> set[int]:
    """Train a cohort (members at the same epoch) to the end as one batched model; returns
    the ids of members whose loss went non-finite in their first epoch (dropped, no result;
    later, a member stops with its best epoch as engine.fit stops a run)."""
    run0 = cohort[0].job.run
    max_epochs, patience = hooks.limits(run0)
    may_stop = stop_rule(hooks)
    first_loss, first_label = hooks.first_loss(data)
    batch = fused([m.job.run for m in cohort], [m.model for m in cohort], [m.opt for m in cohort])
    noise = [torch.Generator().set_state(m.rng["torch"]) for m in cohort]
    active, failed, saved_at = list(cohort), set(), time.perf_counter()
    while active:
        t0 = time.perf_counter()
        epoch = active[0].st.epoch + 1
        columns = batch.train_epoch(data, run0.batch_size, [m.gens.shuffle for m in active], noise)
        loss = columns[hooks.LOSS_COLUMN]
        train_s = time.perf_counter() - t0
        valids = batch.evaluate(data.valid)
        now = time.perf_counter()
        share, due = (now - t0) / len(active), save_every_s <= 0 or now - saved_at >= save_every_s
        keep = []
        for r, m in enumerate(active):
            run = m.job.run
            if not math.isfinite(float(loss[r])):
                message = f"{m.job.out_dir}: training loss is not finite in epoch {epoch} (lr {run.lr})"
                if m.st.best_model is None:  # as engine.fit: no epoch trained, no result
                    log(f"{message}; ckpt_last.pt keeps its last saved epoch, no metrics written")
                    failed.add(id(m))
                else:
                    m.non_finite = non_finite_stop(m.st, epoch, message, log)
                    _save_records(m, hooks)  # its history and best epoch, as engine.fit has them
                continue
            row = {"epoch": epoch, **{k: float(v[r]) for k, v in columns.items()}}
            row.update(hooks.valid_row(valids[r]), epoch_time_s=share)
            if list(hooks.score(valids[r])) > m.st.best_score or due:
                batch.write_back(r, m.model, m.opt)  # the member's own model holds its weights
            limits = (patience, max_epochs)
            m.best_unsaved |= record_epoch(
                m.st, row, valids[r], m.model, hooks, run, data, device, limits, may_stop
            )
            m.st.train_time_s += train_s / len(active)
            m.st.wall_time_s += share
            m.st.peak_memory_mb = max(m.st.peak_memory_mb, memory.peak() / 2**20)
            m.rng["torch"] = noise[r].get_state()
            crossed = divergence_crossed(m.st, hooks, first_loss, first_label)
            if crossed is not None:
                log(f"{m.job.out_dir}: {crossed}")
            if m.st.stopped is not None and not due:
                batch.write_back(r, m.model, m.opt)
            if due or m.st.stopped is not None:
                _save(m, hooks, data)
            if m.st.stopped is None:
                keep.append(r)
        if due:
            saved_at = time.perf_counter()
        losses = [float(v) for v in loss if math.isfinite(float(v))]
        log(
            f"epoch {epoch}/{max_epochs}: {len(active)} runs of {run0.model}, train loss median "
            f"{float(np.median(losses)) if losses else math.nan:.4f}, {time.perf_counter() - t0:.1f}s"
        )
        if on_epoch is not None:
            on_epoch(epoch)
        if len(keep) < len(active):
            active, noise = [active[r] for r in keep], [noise[r] for r in keep]
            if active:
                batch.keep(keep)
    return failed


def _save_records(m: Member, hooks: Any) -> None:
    """The member's history.csv and ckpt_best.pt (when it changed), as engine.fit writes them."""
    out = m.job.out_dir
    write_text(out / "history.csv", history_csv(m.st.history, hooks.HISTORY_COLUMNS))
    if m.best_unsaved:
        torch_save(out / "ckpt_best.pt", best_checkpoint(m.job.run, m.st))
        m.best_unsaved = False


def _save(m: Member, hooks: Any, data: Any) -> None:
    """The member's history.csv, ckpt_best.pt (when it changed) and ckpt_last.pt, as
    engine.fit writes them (its own model and optimizer hold its current state)."""
    out = m.job.out_dir
    _save_records(m, hooks)
    torch.set_rng_state(m.rng["torch"])  # checkpoint.rng_state reads the global generators
    np.random.set_state(m.rng["numpy"])
    random.setstate(m.rng["python"])
    save_last(out / "ckpt_last.pt", m.job.run, m.st, m.model, m.opt, m.sched, m.gens, data.identity)


def _finish(
    m: Member, hooks: Any, data: Any, device, memory, log, evaluated: dict[str, Any] | None, share: float
) -> dict[str, Any]:
    """The member's own outputs and metrics.json, from its best epoch (loaded in its model;
    engine.fit's end); `evaluated`: its final evaluation made for the group, `share` its
    part of that time."""
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
        run, m.job.meta, st, own, diverged, wall, samples_per_s, peak_mb, memory.method, device
    )
    write_json(out / "metrics.json", metrics)
    log(
        f"done {out}: test acc {metrics['test_acc']:.4f}, best valid {st.best_valid_acc:.4f} at epoch "
        f"{st.best_epoch} ({st.stopped}, {st.epoch} epochs)"
    )
    return metrics


# --- command line ------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config")
    p.add_argument("--experiment", required=True, help="experiment name in the suite config")
    p.add_argument(
        "--group",
        help="one group of the experiment's search (psrnn.engine.groups: the search_group rule's "
        "`group` wildcard, as `snakemake -n` lists the jobs); default: every grid point",
    )
    p.add_argument("--seeds", type=int, nargs="+", help="final runs of these seeds (with --selected)")
    p.add_argument("--selected", help="selected.json of the experiment's search (final runs)")
    p.add_argument("--restart-on-change", action="store_true", help="as for `train`")
    p.add_argument(
        "--save-every",
        type=float,
        default=SAVE_EVERY_S,
        metavar="S",
        help=f"seconds of training between checkpoints (default {SAVE_EVERY_S:.0f}; 0: every epoch)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="CPU threads (torch.set_num_threads; default: the suite's resources.train.threads, 1 unless "
        "set, as Snakemake's jobs run it)",
    )


def group_jobs(args: argparse.Namespace) -> list[Job]:
    """The members the command line names (a one-line error for a command line that names
    none, or runs no search has)."""
    if not math.isfinite(args.save_every) or args.save_every < 0:
        raise UserError(f"--save-every {args.save_every:g}: seconds must be a number >= 0")
    if args.seeds and args.group is not None:
        raise UserError("train-group: --group names search runs, --seeds final runs: give one of them")
    suite = C.load_suite(args.config)
    exp, name = args.experiment, suite["name"]
    if exp not in suite["experiments"]:
        raise UserError(f"unknown experiment {exp!r}; known: {', '.join(sorted(suite['experiments']))}")
    refuse_switched_off(suite, exp, args.config)
    if args.seeds:  # final runs
        sel = None
        if C.has_grid(suite, exp):
            if not args.selected:
                raise UserError(f"--seeds: experiment {exp} has a grid, so --selected is required")
            sel = read_selected(args.selected, exp)
        jobs = []
        for seed in args.seeds:
            reuse_point, selected = overrides_for(sel, seed) if sel else (None, None)
            run = C.resolve_run(suite, exp, seed, selected=selected)
            reuse = (
                C.search_dir(suite, exp, reuse_point)
                if reuse_point and seed == C.search_seed(suite)
                else None
            )
            jobs.append(
                Job(
                    run,
                    C.run_dir(suite, exp, seed),
                    {"experiment": exp, "config_name": name, "point": None},
                    reuse,
                )
            )
        return jobs
    if args.selected or args.group is None and not C.has_grid(suite, exp):
        # a search run of an experiment without a grid would be search/<exp>/default, a run
        # its search never has (REPORT would count it among the grid's runs)
        what = "--selected needs --seeds" if args.selected else f"experiment {exp} has no grid to search"
        raise UserError(f"train-group: {what} (final runs: --seeds N ... [--selected FILE])")
    points = groups.search_groups(suite, exp)
    if args.group is not None and args.group not in points:
        raise UserError(f"experiments.{exp}: no group {args.group!r}; known: {', '.join(points)}")
    chosen = points[args.group] if args.group is not None else [p for ps in points.values() for p in ps]
    seed = C.search_seed(suite)
    return [
        Job(
            C.resolve_run(suite, exp, seed, point=pid),
            C.search_dir(suite, exp, pid),
            {"experiment": exp, "config_name": name, "point": pid},
        )
        for pid in chosen
    ]


def run(args: argparse.Namespace) -> int:
    jobenv.set_threads(args.threads, args.config)
    jobs = group_jobs(args)
    t0 = time.perf_counter()
    metrics = fit_group(jobs, restart_on_change=args.restart_on_change, save_every_s=args.save_every)
    print(f"{len(jobs)} runs of {args.experiment} complete ({time.perf_counter() - t0:.0f}s)")
    if args.group is not None:  # the group's marker, last: every member is complete
        suite = C.load_suite(args.config)
        write_json(
            groups.group_marker(suite, args.experiment, args.group),
            {
                "experiment": args.experiment,
                "group": args.group,
                "points": {j.meta["point"]: m["test_acc"] for j, m in zip(jobs, metrics, strict=True) if m},
            },
        )
    return 0
