"""Fused runs: one process trains a group of runs at once, each kept as if it ran alone.

    python -m psrnn train-group --config config/relreg.yaml --experiment proto_both
    python -m psrnn train-group --config config/relreg.yaml --experiment proto_both --group cells-4_hidden-8
    python -m psrnn train-group --config config/relreg.yaml --experiment lstm_l2 --seeds 1 2 3 4 \\
        --selected results/relreg/search/lstm_l2/selected.json

A grid search is one process per grid point; for tiny models that is mostly start-up and
Python stepping one small batch at a time. Here the members of a group whose study can
batch them (psrnn.registry: the row's `fused` module and `group_key`) train as one
batched model, R runs stepped together: the fused module's `Batched`, a subclass of
psrnn.engine.hooks.Batched (psrnn.studies.relreg.fused), through the epoch loop a run alone
takes too (psrnn.engine.fit.train_members); members it cannot batch (another model kind, a
GPU) train one after another with psrnn.engine.fit.fit in this process.
The fused module may give its members' optimizers (`optimizer(run, model)`: only the state
their checkpoints hold, as it steps them itself) and their final evaluations, batched
(`final_evaluations(runs, models, data)`: what the study's `finish` takes as `evaluated`).

Every member keeps its own run folder with the files psrnn.engine.fit.fit writes (history.csv,
ckpt_best.pt, ckpt_last.pt, the study's own files, metrics.json last) and the engine's
bookkeeping (psrnn.engine.books: record_epoch, run_metrics, restore): a finished member is
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
import time
from collections.abc import Callable
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine import groups, jobenv
from psrnn.engine.books import finished, pick_device
from psrnn.engine.checkpoint import adopt_finished
from psrnn.engine.fit import Job, Member, at_limit, finish_member, fit, load_best, member, train_members
from psrnn.engine.hooks import Batched, hooks_of
from psrnn.engine.selection import overrides_for, read_selected, refuse_switched_off
from psrnn.errors import TrainingDiverged, UserError
from psrnn.files import sole_writer, write_json
from psrnn.machine import PeakMemory

SAVE_EVERY_S = 60.0  # seconds of training between a group's checkpoints


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


def batched_class(study: registry.Study) -> tuple[Any, type[Batched]]:
    """The study's fused module and its Batched (a subclass of psrnn.engine.hooks.Batched,
    checked here rather than mid-group)."""
    module = importlib.import_module(str(study.fused))
    cls = getattr(module, "Batched", None)
    if not (isinstance(cls, type) and issubclass(cls, Batched)):
        raise TypeError(
            f"study {study.name}: {study.fused}.Batched is not a subclass of psrnn.engine.hooks.Batched"
        )
    return module, cls


def _fit_fused(
    jobs: list[Job],
    log: Callable[[str], None],
    restart_on_change: bool,
    save_every_s: float,
    on_epoch: Callable[[int], None] | None,
) -> list[dict[str, Any] | None]:
    run0 = jobs[0].run
    study = registry.of_settings(run0)
    hooks = hooks_of(study)
    module, fused = batched_class(study)
    with contextlib.ExitStack() as held:
        for job in jobs:
            held.enter_context(sole_writer(job.out_dir))
        results: list[dict[str, Any] | None] = [
            finished(j.run, j.out_dir, log, restart_on_change, j.meta) for j in jobs
        ]
        todo = [i for i, r in enumerate(results) if r is None]
        if not todo:
            return results
        device = pick_device(run0.device, log)
        data = hooks.data(run0)  # the group key holds every data setting: one data for all
        for i in todo:  # a final run that is its finished search run: its record (engine.fit)
            job = jobs[i]
            if job.reuse is not None:
                results[i] = adopt_finished(job.reuse, job.out_dir, job.run, data.identity, job.meta, log)
        todo = [i for i in todo if results[i] is None]
        if not todo:
            return results
        memory = PeakMemory(device)
        memory.start()
        make_opt = getattr(module, "optimizer", hooks.optimizer)
        members = {i: member(jobs[i], hooks, make_opt, data, device, log, restart_on_change) for i in todo}
        cohorts: dict[int, list[Member]] = {}
        for m in at_limit(list(members.values()), hooks):
            cohorts.setdefault(m.st.epoch, []).append(m)
        failed: set[int] = set()
        for cohort in cohorts.values():
            batch = fused([m.job.run for m in cohort], [m.model for m in cohort], [m.opt for m in cohort])
            failed |= set(
                train_members(cohort, batch, hooks, data, device, memory, log, save_every_s, on_epoch)
            )
        done = {i: m for i, m in members.items() if id(m) not in failed}
        t0 = time.perf_counter()
        for m in done.values():
            load_best(m)
        evaluated: list[dict[str, Any] | None] = [None] * len(done)
        if done and hasattr(module, "final_evaluations"):
            runs, models = [m.job.run for m in done.values()], [m.model for m in done.values()]
            evaluated = list(module.final_evaluations(runs, models, data))
        share = (time.perf_counter() - t0) / max(len(done), 1)
        for (i, m), ev in zip(done.items(), evaluated, strict=True):
            results[i] = finish_member(m, hooks, data, device, memory, log, ev, share, named=True)
    return results


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
