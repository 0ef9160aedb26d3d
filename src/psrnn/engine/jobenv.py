"""A suite's `job_env` for `python -m psrnn train` started by hand: the same numbers as
under Snakemake.

    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0

Some variables (config/small.yaml's `job_env`: ATEN_CPU_CAPABILITY, MKL_CBWR) pick the CPU
kernels a run uses and must be set before torch starts. Snakemake's jobs export them; a
`train` command whose suite sets them, started without them, starts itself again with them
(os.execv, before torch is imported), so a run gives the same numbers however it was
started. Its checkpoint records them (psrnn.engine.checkpoint.KERNEL_ENV). Torch's CPU thread
count changes the numbers too: `set_threads` gives both commands the suite's.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def config_path(argv: list[str]) -> str | None:
    """The --config of a `train`, `train-group` or `restamp` command line (None for any other
    command): the commands that train."""
    if not argv or argv[0] not in ("train", "train-group", "restamp"):
        return None
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def suite_env(argv: list[str]) -> dict[str, str]:
    """The job_env of the suite a `train` command line names (empty if none or unreadable:
    the command itself then reports what is wrong)."""
    path = config_path(argv)
    if path is None:
        return {}
    from psrnn import config as C
    from psrnn.errors import UserError

    try:
        raw: Any = C.load_yaml(path)
        if not isinstance(raw, dict) or "experiments" not in raw:
            return {}  # a flat run YAML: no suite, no job_env
        suite = C.load_suite(path)
    except (UserError, OSError):
        return {}
    return {str(k): str(v) for k, v in (suite.get("job_env") or {}).items()}


def apply(argv: list[str]) -> None:
    """Start this command again with the suite's job_env when any of it is not in effect."""
    missing = {k: v for k, v in suite_env(argv).items() if os.environ.get(k) != v}
    if missing and "torch" not in sys.modules:
        os.execve(sys.executable, [sys.executable, "-m", "psrnn", *argv], {**os.environ, **missing})


def set_threads(threads: int | None, config: str) -> None:
    """torch's CPU threads for `train`/`train-group`: `threads` (--threads), else the suite's
    resources.train.threads as Snakemake's jobs run it (1 unless set; a flat run YAML, which
    has no suite: 1). A CPU run's numbers depend on it (its checkpoint records it)."""
    import torch

    from psrnn import config as C
    from psrnn.errors import UserError
    from psrnn.jobspec import train_threads

    if threads is None:
        raw = C.load_yaml(config)
        threads = train_threads(raw) if "experiments" in raw else 1
    if threads < 1:
        raise UserError(f"--threads {threads}: must be at least 1")
    torch.set_num_threads(threads)
