"""GPU slots for training jobs on a host with several GPUs: each job claims a slot with a
lock file before CUDA starts, so `snakemake --cores all` runs `jobs_per_gpu` jobs on each
of the host's GPUs (the Snakefile sets the `gpu` resource to GPUs x jobs_per_gpu) and
spreads them over the devices before it stacks them.

    PSRNN_GPU_LOCKS=/tmp/psrnn-gpus-$(id -u)  # where the claims live (this is the default: the numeric uid)
    PSRNN_JOBS_PER_GPU=4                      # slots per device (the Snakefile sets it from
                                              # the suite config's resources.train.jobs_per_gpu)

A claim is an flock(2) on `<dir>/gpu<i>.lock` (slot 0) or `<dir>/gpu<i>.<slot>.lock`,
held by the training process until it exits: a crash or kill -9 releases it, and several
Snakemake instances on one host see each other's claims. Nothing is claimed when the job
already sees one GPU only (SLURM's allocation, a user's CUDA_VISIBLE_DEVICES=3) or none:
there is no device to choose, and Snakemake's `gpu` resource bounds the jobs.

Why flock(2) by hand, not filelock (installed with DVC): a claim must be tried on many
slot files without waiting (first free one wins) and held, unreleased, for the life of
the process that then imports CUDA; filelock's lock objects release when collected and
count re-entries per thread, so holding one across the training means keeping it alive
by hand as here, with nothing gained. The kernel releases a flock when the process dies.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from psrnn.errors import UserError

LOCKS_ENV = "PSRNN_GPU_LOCKS"
JOBS_PER_GPU_ENV = "PSRNN_JOBS_PER_GPU"
WAIT_LOG_S = 300.0  # while every slot is claimed, say so this often
_held: list[TextIO] = []  # open lock files: closing one releases its claim


def lock_dir() -> Path:
    return Path(os.environ.get(LOCKS_ENV) or f"/tmp/psrnn-gpus-{os.getuid()}")


def jobs_per_gpu() -> int:
    """Training jobs that may share one device: $PSRNN_JOBS_PER_GPU, 1 when unset (a job
    started outside Snakemake keeps a GPU to itself)."""
    raw = os.environ.get(JOBS_PER_GPU_ENV, "").strip()
    if not raw:
        return 1
    if not raw.isdigit() or int(raw) < 1:
        raise UserError(f"{JOBS_PER_GPU_ENV}={raw!r}: expected an integer >= 1")
    return int(raw)


def host_gpus() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else `nvidia-smi -L`
    (no CUDA initialisation, so the Snakefile can ask too); 0 without a driver."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def claim(
    count: int,
    directory: Path | None = None,
    poll_s: float = 1.0,
    log: Callable[[str], None] = print,
    per_device: int = 1,
) -> int | None:
    """Claim a slot on one of `count` devices (index into the visible ones); None when
    count <= 1, whatever `per_device`.

    Takes a free slot of the device with the fewest claimed (ties: the lowest index), so
    jobs spread over the devices before they share one, and waits, polling, while every
    slot is claimed (a job from another Snakemake run on this host, or one that outlived
    its scheduler slot).
    """
    if count <= 1:
        return None
    directory = directory or lock_dir()
    if directory.exists() and not directory.is_dir():
        where = f"{LOCKS_ENV}={directory}" if os.environ.get(LOCKS_ENV) else str(directory)
        raise UserError(f"{where}: is a file, not a folder (where the GPU claims are kept)")
    directory.mkdir(parents=True, exist_ok=True)
    waited_since = last_said = time.monotonic()
    while (index := _claim_least_used(directory, count, per_device)) is None:
        if time.monotonic() - last_said >= WAIT_LOG_S:
            log(
                f"waiting for a free GPU slot: all {per_device} slot(s) of each of {count} GPUs "
                f"are claimed in {directory} ({time.monotonic() - waited_since:.0f}s so far)"
            )
            last_said = time.monotonic()
        time.sleep(poll_s)
    return index


def release() -> None:
    """Give back this process's claims (exit does the same)."""
    while _held:
        _held.pop().close()


def _slot_path(directory: Path, index: int, slot: int) -> Path:
    """Slot 0 keeps the one-job-per-GPU name, so runs with and without sharing see it."""
    return directory / (f"gpu{index}.lock" if slot == 0 else f"gpu{index}.{slot}.lock")


def _lock(path: Path) -> TextIO | None:
    """`path` opened and flock'ed by this process, or None while another holder has it."""
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def _free_slots(directory: Path, index: int, per_device: int) -> list[int]:
    """Slots of device `index` nobody holds now; probing locks each for an instant."""
    free = []
    for slot in range(per_device):
        fh = _lock(_slot_path(directory, index, slot))
        if fh is not None:
            fh.close()
            free.append(slot)
    return free


def _claim_least_used(directory: Path, count: int, per_device: int) -> int | None:
    """Lock a free slot on the device with the most free slots; None when all are held
    (or taken by another job between the probe and the lock: the caller polls again)."""
    free = {index: _free_slots(directory, index, per_device) for index in range(count)}
    for index in sorted(free, key=lambda i: -len(free[i])):  # stable: ties keep the lowest index
        for slot in free[index]:
            fh = _lock(_slot_path(directory, index, slot))
            if fh is not None:
                fh.seek(0)
                fh.truncate()
                fh.write(f"{os.getpid()}\n")
                fh.flush()
                _held.append(fh)
                return index
    return None
