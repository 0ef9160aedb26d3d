"""A suite on one GPU in one command, without Snakemake: `python -m psrnn gpu-run`.

    python -m psrnn gpu-run --config config/quick-imdb-10min.yaml            # plan, then run it all
    python -m psrnn gpu-run --config config/quick-imdb-10min.yaml --plan-only --gpu-gb 79.2
    python -m psrnn gpu-run --config config/quick-mnist.yaml --minutes 9  # again until it compiles

For a lent GPU host that has torch but not the workflow tools. It prepares the data
(download, prepare), trains every search run, selects, trains the final runs (the search
seed's final run is its selected search run, reused) and compiles: the jobs the Snakefile
runs, in the same order, with the same commands.

Several runs share the GPU, as many as fit in its memory. What a run needs is measured,
not guessed: each experiment's peak (torch's max_memory_allocated growth, metrics.json's
peak_memory_mb) plus what a process holds beyond it (its CUDA context and the caching
allocator's reserve). Both come from a file of stored measurements (MEASURED, from H100
runs); an experiment it lacks is planned as the largest one it holds, and the plan says
so. Runs start slowest first (max_epochs x seconds per epoch alone), each only when its
reserve fits beside the running ones' under `--cap` of the GPU's memory; a run that
still dies of CUDA out-of-memory is started again once, when another run has freed its
memory (it resumes from its last checkpoint). Before anything starts, the plan is printed:
the runs, their memory, how many share the GPU, and the expected minutes from the stored
epoch times, slowed by SLOWDOWN per extra run sharing the GPU (measured: H100, 4 and 6
runs sharing).

Why not Snakemake's scheduler with `resources: mem_mb`: the lent GPU hosts have no
Snakemake, and a GPU-memory resource needs the per-experiment numbers this module keeps
anyway. A finished run is skipped and an interrupted one resumes, so the same command
again finishes what a first call left. `--minutes` makes that a plan: a lent GPU's
10-minute command stops its runs at the limit (each keeps its last finished epoch) and
exits 3 ("run the same command again"); the plan says how many such commands the whole
config takes (a config that cannot fit one, such as MNIST's 20 search runs, is split).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.errors import UserError

MEASURED = C.ROOT / "results" / "bench" / "gpu-runs-measured.json"
OOM_TEXT = "out of memory"


@dataclass(frozen=True)
class Job:
    """One training run of the plan."""

    name: str  # search/<exp>/<point> or runs/<exp>/seed<k>
    experiment: str
    args: tuple[str, ...]  # psrnn train's arguments but --config
    out: Path
    log: Path
    peak_gb: float  # torch's peak (measured)
    epoch_s: float  # seconds per epoch with the GPU to itself (measured)
    epochs: int  # max_epochs: what the plan assumes it trains
    assumed: bool = False  # no measurement: planned as the largest measured experiment

    def reserve_gb(self, overhead_gb: float) -> float:
        return self.peak_gb + overhead_gb

    @property
    def work_s(self) -> float:
        return self.epochs * self.epoch_s


@dataclass(frozen=True)
class Measured:
    overhead_gb: float
    slowdown: float
    experiments: dict[str, dict[str, float]]
    source: str


def read_measured(path: Path = MEASURED) -> Measured:
    try:
        raw = json.loads(Path(path).read_text())
        return Measured(
            float(raw["process_overhead_gb"]),
            float(raw["sharing_slowdown"]),
            {
                k: {"peak_gb": float(v["peak_gb"]), "epoch_s": float(v["epoch_s_alone"])}
                for k, v in raw["experiments"].items()
            },
            str(raw.get("source", path)),
        )
    except FileNotFoundError:
        raise UserError(f"{path}: no such measurements file") from None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"{path}: not a measurements file ({type(err).__name__}: {err})") from None


def measure_of(m: Measured, experiment: str) -> tuple[float, float, bool]:
    if experiment in m.experiments:
        e = m.experiments[experiment]
        return e["peak_gb"], e["epoch_s"], False
    if not m.experiments:
        raise UserError("the measurements file holds no experiment")
    return (
        max(e["peak_gb"] for e in m.experiments.values()),
        max(e["epoch_s"] for e in m.experiments.values()),
        True,
    )


def search_jobs(cfg: dict[str, Any], m: Measured) -> list[Job]:
    """The suite's search runs, slowest first (ties: config order)."""
    root, seed, jobs = C.results_root(cfg), C.search_seed(cfg), []
    for exp in C.enabled_experiments(cfg):
        if not C.has_grid(cfg, exp):
            continue
        peak, epoch_s, assumed = measure_of(m, exp)
        for point, _ in C.grid_points(cfg["experiments"][exp]):
            run = C.resolve_run(cfg, exp, seed, point=point)
            jobs.append(
                Job(
                    f"search/{exp}/{point}", exp,
                    ("--experiment", exp, "--point", point, "--seed", str(seed)),
                    C.search_dir(cfg, exp, point), root / "logs" / "search" / exp / f"{point}.log",
                    peak, epoch_s, int(run.max_epochs), assumed,
                )
            )  # fmt: skip
    return sorted(jobs, key=lambda j: -j.work_s)


def final_jobs(cfg: dict[str, Any], m: Measured) -> list[Job]:
    """The suite's final runs (after select), slowest first. The search seed's run of an
    experiment with a grid reuses its selected search run: no work planned for it."""
    root, jobs = C.results_root(cfg), []
    for exp in C.enabled_experiments(cfg):
        peak, epoch_s, assumed = measure_of(m, exp)
        grid = C.has_grid(cfg, exp)
        for seed in cfg["seeds"]:
            args: tuple[str, ...] = ("--experiment", exp, "--seed", str(seed))
            if grid:
                args += ("--selected", str(C.selection_path(cfg, exp)))
            epochs = (
                0 if grid and seed == C.search_seed(cfg) else int(C.resolve_run(cfg, exp, seed).max_epochs)
            )
            jobs.append(
                Job(
                    f"runs/{exp}/seed{seed}", exp, args, C.run_dir(cfg, exp, seed),
                    root / "logs" / "train" / exp / f"seed{seed}.log", peak, epoch_s, epochs, assumed,
                )
            )  # fmt: skip
    return sorted(jobs, key=lambda j: -j.work_s)


@dataclass
class Slot:
    job: Job
    start_s: float
    end_s: float = 0.0


def plan(jobs: list[Job], gpu_gb: float, m: Measured, cap: float) -> list[Slot]:
    """When each job would start and end: jobs start in order, each as soon as its reserve
    (peak + per-process overhead) fits under cap x gpu_gb beside the running ones; a job
    whose reserve alone exceeds that is an error. Every running job's epoch takes its
    time alone x (1 + slowdown x (others running)), re-timed whenever one starts or ends."""
    limit = cap * gpu_gb
    for j in jobs:
        if j.reserve_gb(m.overhead_gb) > limit:
            raise UserError(
                f"{j.name} needs {j.reserve_gb(m.overhead_gb):.1f} GiB (peak {j.peak_gb:.1f} + "
                f"{m.overhead_gb:.1f} per process), more than {cap:.0%} of {gpu_gb:.1f} GiB"
            )
    todo, now, slots = list(jobs), 0.0, []
    running: list[tuple[Slot, float]] = []  # (slot, work left in seconds-alone)
    while todo or running:
        used = sum(s.job.reserve_gb(m.overhead_gb) for s, _ in running)
        while todo and used + todo[0].reserve_gb(m.overhead_gb) <= limit:
            job = todo.pop(0)
            running.append((Slot(job, now), job.work_s))
            used += job.reserve_gb(m.overhead_gb)
        factor = 1 + m.slowdown * (len(running) - 1)
        step = min(left for _, left in running) * factor
        now += step
        still = []
        for slot, left in running:
            left -= step / factor
            if left <= 1e-9:
                slot.end_s = now
                slots.append(slot)
            else:
                still.append((slot, left))
        running = still
    return sorted(slots, key=lambda s: (s.start_s, s.end_s))


def peak_sharing(slots: list[Slot], overhead_gb: float) -> tuple[int, float]:
    """(most jobs running at once, most memory they reserve at once) in a plan."""
    events = sorted(
        [(s.start_s, 1, s) for s in slots] + [(s.end_s, -1, s) for s in slots], key=lambda e: (e[0], e[1])
    )
    n = best_n = 0
    gb = best_gb = 0.0
    for _, d, s in events:
        n += d
        gb += d * s.job.reserve_gb(overhead_gb)
        best_n, best_gb = max(best_n, n), max(best_gb, gb)
    return best_n, best_gb


def describe(title: str, slots: list[Slot], gpu_gb: float, m: Measured, cap: float) -> list[str]:
    n, gb = peak_sharing(slots, m.overhead_gb)
    end = max((s.end_s for s in slots), default=0.0)
    lines = [
        f"{title}: {len(slots)} run(s), at most {n} at once reserving {gb:.1f} GiB of {gpu_gb:.1f} GiB "
        f"(cap {cap:.0%} = {cap * gpu_gb:.1f} GiB; per run: peak + {m.overhead_gb:.1f} GiB per process); "
        f"expected {end / 60:.1f} min"
    ]
    for s in slots:
        note = " (unmeasured: planned as the largest)" if s.job.assumed else ""
        lines.append(
            f"  {s.job.name:42s} {s.job.reserve_gb(m.overhead_gb):5.1f} GiB  {s.job.epochs:3d} epochs x "
            f"{s.job.epoch_s:4.1f} s alone  start {s.start_s / 60:5.1f} min  "
            f"end {s.end_s / 60:5.1f} min{note}"
        )
    return lines


# --- running -----------------------------------------------------------------------------


def gpu_memory_gb() -> float | None:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / 2**30
    except Exception:  # no torch, no driver: the plan needs --gpu-gb
        return None
    return None


def psrnn(*args: str) -> list[str]:
    return [sys.executable, "-m", "psrnn", *args]


def start(job: Job, config: str, threads: int) -> subprocess.Popen[bytes]:
    job.log.parent.mkdir(parents=True, exist_ok=True)
    cmd = psrnn(
        "train",
        "--config",
        config,
        *job.args,
        "--out",
        str(job.out),
        "--restart-on-change",
        "--threads",
        str(threads),
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with job.log.open("a") as log:  # appended: a second call keeps the first's lines
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {' '.join(cmd[1:])}\n")
        log.flush()
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def last_line(path: Path) -> str:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class OutOfTime(UserError):
    """The command's --minutes ran out: what ran is kept, the same command continues."""


def execute(
    jobs: list[Job],
    gpu_gb: float,
    m: Measured,
    cap: float,
    config: str,
    threads: int,
    deadline: float | None = None,
) -> list[str]:
    """Run `jobs` under the plan's memory rule; a run that died of out-of-memory goes back
    to the queue once, to start when its reserve fits again after some run has ended.
    Returns the names of the runs that did not finish. At `deadline` (time.monotonic())
    the running ones are stopped (SIGTERM: each keeps its last finished epoch's
    checkpoint) and OutOfTime says what is left; Ctrl-C or a scheduler's SIGTERM stops
    them too, so no run is left behind."""
    limit, todo = cap * gpu_gb, [j for j in jobs if not (j.out / "metrics.json").exists()]
    for j in jobs:
        if j not in todo:
            print(f"{j.name}: finished before, skipped", flush=True)
    retried: dict[str, int] = {}  # a run that ran out of memory -> runs ended when it did
    failed: list[str] = []
    running: dict[str, tuple[Job, subprocess.Popen[bytes]]] = {}
    ended = 0
    try:
        while todo or running:
            used = sum(j.reserve_gb(m.overhead_gb) for j, _ in running.values())
            for job in list(todo):
                if job.name in retried and ended == retried[job.name] and running:
                    continue  # wait until another run has freed its memory
                if used + job.reserve_gb(m.overhead_gb) > limit:
                    break  # keep the order: slowest first
                todo.remove(job)
                running[job.name] = (job, start(job, config, threads))
                used += job.reserve_gb(m.overhead_gb)
                print(f"{job.name}: started ({len(running)} running, {used:.1f} GiB reserved)", flush=True)
            time.sleep(0.2)
            if deadline is not None and time.monotonic() >= deadline:
                stop(running, "at the time limit")
                left = sorted(running) + [j.name for j in todo]
                raise OutOfTime(
                    f"out of time: {len(left)} run(s) not finished ({', '.join(left)}); each resumes from "
                    "its last epoch: run the same command again"
                )
            for name, (job, proc) in list(running.items()):
                rc = proc.poll()
                if rc is None:
                    continue
                del running[name]
                ended += 1
                tail = last_line(job.log)
                if rc == 0:
                    print(f"{name}: {tail}", flush=True)
                elif OOM_TEXT in tail.lower() and name not in retried:
                    retried[name] = ended
                    todo.insert(0, job)
                    print(
                        f"{name}: out of GPU memory; started again once another run has ended ({tail[:160]})",
                        flush=True,
                    )
                else:
                    failed.append(name)
                    print(f"{name}: failed (rc {rc}): {tail[:300]}", flush=True)
    except KeyboardInterrupt:
        stop(running, "on interrupt")
        raise
    return failed


def stop(running: dict[str, tuple[Job, subprocess.Popen[bytes]]], why: str) -> None:
    for _, proc in running.values():
        proc.terminate()
    for name, (_, proc) in running.items():
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(f"{name}: stopped {why} (resumes from its last epoch)", flush=True)


def start_mps(mode: str) -> bool:
    """Start CUDA MPS (several processes then share the GPU's cores; the stored epoch times
    were measured under it) where its control program and a GPU are there; True if started."""
    if mode == "off" or not shutil.which("nvidia-cuda-mps-control"):
        return False
    if subprocess.run(["nvidia-smi"], capture_output=True).returncode:
        return False
    ok = subprocess.run(["nvidia-cuda-mps-control", "-d"], capture_output=True).returncode == 0
    if ok:
        print("CUDA MPS started", flush=True)
    return ok


def stop_mps() -> None:
    subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", capture_output=True)


def prepare_data(cfg: dict[str, Any], config: str) -> None:
    from psrnn import registry

    study = registry.study_of(cfg)
    if not study.data_jobs:
        return
    jobs = study.job_commands  # the commands of its download and prepare jobs
    for ds in C.enabled_datasets(cfg):
        if (C.data_root(cfg) / "prepared" / ds / "manifest.json").exists():
            continue
        for step in ("download", "prepare"):
            res = subprocess.run(psrnn(jobs[step], ds, "--config", config))
            if res.returncode:
                raise UserError(f"{step} {ds} failed (rc {res.returncode})")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument("--measured", default=str(MEASURED), help="stored measurements (default %(default)s)")
    p.add_argument("--gpu-gb", type=float, help="the GPU's memory in GiB (default: read from the GPU)")
    p.add_argument(
        "--cap",
        type=float,
        default=0.875,
        help="share of the GPU's memory the runs may reserve (default %(default)s)",
    )
    p.add_argument("--threads", type=int, default=1, help="CPU threads per run (default %(default)s)")
    p.add_argument(
        "--minutes",
        type=float,
        help="stop after this many minutes (a lent GPU's limit): the runs keep their last epoch and the "
        "same command continues; the plan says how many such commands the whole takes",
    )
    p.add_argument(
        "--mps", choices=("auto", "off"), default="auto", help="start CUDA MPS where it can (default auto)"
    )
    p.add_argument("--plan-only", action="store_true", help="print the plan, run nothing")


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    m = read_measured(Path(args.measured))
    gpu_gb = args.gpu_gb or gpu_memory_gb()
    if not gpu_gb:
        raise UserError("no GPU found: give its memory with --gpu-gb")
    if not 0 < args.cap <= 1:
        raise UserError(f"--cap {args.cap}: a share between 0 and 1")
    search, finals = search_jobs(cfg, m), final_jobs(cfg, m)
    search_plan = plan(search, gpu_gb, m, args.cap)
    final_plan = plan([j for j in finals if j.epochs], gpu_gb, m, args.cap)
    for line in describe("search", search_plan, gpu_gb, m, args.cap) + describe(
        "final runs", final_plan, gpu_gb, m, args.cap
    ):
        print(line, flush=True)
    total = max((s.end_s for s in search_plan), default=0.0) + max((s.end_s for s in final_plan), default=0.0)
    if args.minutes:
        if args.minutes <= 0:
            raise UserError(f"--minutes {args.minutes}: a positive number")
        calls = math.ceil(total / 60 / args.minutes) if total else 1
        print(
            f"whole: expected {total / 60:.1f} min of training: "
            + ("one command" if calls <= 1 else f"about {calls} commands")
            + f" of {args.minutes:g} min (the same command again continues where the last stopped)",
            flush=True,
        )
    print(f"measurements: {m.source}", flush=True)
    if args.plan_only:
        return 0
    t0 = time.monotonic()
    deadline = t0 + 60 * args.minutes if args.minutes else None
    mps = start_mps(args.mps)
    try:
        return run_all(cfg, args, m, gpu_gb, search, finals, deadline, t0)
    except OutOfTime as err:
        print(f"gpu-run: {err}", flush=True)
        return 3
    finally:
        if mps:
            stop_mps()


def run_all(
    cfg: dict[str, Any],
    args: argparse.Namespace,
    m: Measured,
    gpu_gb: float,
    search: list[Job],
    finals: list[Job],
    deadline: float | None,
    t0: float,
) -> int:
    """prepare, search, select, final runs, compile (run's work once the plan is printed)."""
    prepare_data(cfg, args.config)
    failed = execute(search, gpu_gb, m, args.cap, args.config, args.threads, deadline)
    if failed:
        raise UserError(
            f"search runs failed: {', '.join(failed)} (their logs say why; the same command resumes)"
        )
    for exp in C.enabled_experiments(cfg):
        if (
            C.has_grid(cfg, exp)
            and subprocess.run(psrnn("select", "--config", args.config, "--experiment", exp)).returncode
        ):
            raise UserError(f"select {exp} failed")
    failed = execute(finals, gpu_gb, m, args.cap, args.config, args.threads, deadline)
    if failed:
        raise UserError(
            f"final runs failed: {', '.join(failed)} (their logs say why; the same command resumes)"
        )
    if subprocess.run(psrnn("compile", "--config", args.config)).returncode:
        raise UserError("compile failed")
    root = C.results_root(cfg)
    print(f"gpu-run: compiled {root}/REPORT.md after {time.monotonic() - t0:.0f} s wall", flush=True)
    return 0
