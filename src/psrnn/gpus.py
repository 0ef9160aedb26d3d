"""One GPU per training job on a host with several: each job claims a free device with a
lock file before CUDA starts, so `snakemake --cores all` runs as many jobs side by side
as the host has GPUs (the Snakefile sets the `gpu` resource to that count) and no two
share one.

    PSRNN_GPU_LOCKS=/tmp/psrnn-gpus-$USER     # where the claims live (this is the default)

A claim is an flock(2) on `<dir>/gpu<i>.lock`, held by the training process until it
exits: a crash or kill -9 releases it, and several Snakemake instances on one host see
each other's claims. Nothing is claimed when the job already sees one GPU only (SLURM's
allocation, a user's CUDA_VISIBLE_DEVICES=3) or none.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

LOCKS_ENV = "PSRNN_GPU_LOCKS"
WAIT_LOG_S = 300.0  # while every device is claimed, say so this often
_held: list[TextIO] = []  # open lock files: closing one releases its claim


def lock_dir() -> Path:
    return Path(os.environ.get(LOCKS_ENV) or f"/tmp/psrnn-gpus-{os.getuid()}")


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
    count: int, directory: Path | None = None, poll_s: float = 1.0, log: Callable[[str], None] = print
) -> int | None:
    """Claim one of `count` devices (index into the visible ones); None when count <= 1.

    Tries gpu0, gpu1, ... in order and waits, polling, while all are claimed (a job from
    another Snakemake run on this host, or one that outlived its scheduler slot).
    """
    if count <= 1:
        return None
    directory = directory or lock_dir()
    directory.mkdir(parents=True, exist_ok=True)
    waited_since = last_said = time.monotonic()
    while True:
        for index in range(count):
            fh = open(directory / f"gpu{index}.lock", "a+")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
            _held.append(fh)
            return index
        if time.monotonic() - last_said >= WAIT_LOG_S:
            log(
                f"waiting for a free GPU: all {count} are claimed in {directory} "
                f"({time.monotonic() - waited_since:.0f}s so far)"
            )
            last_said = time.monotonic()
        time.sleep(poll_s)


def release() -> None:
    """Give back this process's claims (exit does the same)."""
    while _held:
        _held.pop().close()
