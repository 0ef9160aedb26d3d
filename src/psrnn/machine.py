"""The machine a number was measured on: one description for training and the benchmark.

    python -c "import torch, psrnn.machine as m; print(m.environment(torch.device('cpu')))"

`environment` is what every run's metrics.json records (device, versions, git commit);
`bench_environment` is the benchmark's fuller record (GPU memory, cuDNN, CPU count and
threads, and the device slug its output files are named after), `load_average` how busy
the machine was while it measured.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

import torch

from psrnn import __version__
from psrnn import config as C


def git_commit() -> str | None:
    """HEAD of the checkout the code runs from, "+dirty" when src/ or config/ differ from it
    (the numbers then come from uncommitted code); None outside git."""
    git = ["git", "-C", str(C.ROOT)]
    try:
        out = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        )
        dirty = (
            subprocess.run(
                [*git, "diff", "--quiet", "HEAD", "--", "src", "config"], capture_output=True, timeout=10
            ).returncode
            == 1
        )
        return (out.stdout.strip() + ("+dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_name(device: torch.device) -> str:
    """The GPU's name on cuda, the CPU's model name otherwise."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def device_slug(device: torch.device) -> str:
    """A file-name form of the device, e.g. "cuda-nvidia-h100-80gb-hbm3", "cpu-amd-epyc"."""
    return f"{'cuda' if device.type == 'cuda' else 'cpu'}-{slug(device_name(device))}"


def versions(device: torch.device) -> dict[str, Any]:
    """The software a number depends on; the CUDA version only where it runs on CUDA."""
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda if device.type == "cuda" else None,
        "platform": platform.platform(),
        "psrnn_version": __version__,
    }


def environment(device: torch.device) -> dict[str, Any]:
    """What a training run records in metrics.json about where it ran."""
    return {
        "device": device.type,
        "device_name": device_name(device),
        **versions(device),
        "git_commit": git_commit(),
        "torch_threads": torch.get_num_threads(),  # CPU numbers depend on it (psrnn.engine.checkpoint)
    }


def bench_environment(device: torch.device) -> dict[str, Any]:
    """What the benchmark records about where it ran (gpu_memory_gb in GiB)."""
    cuda = device.type == "cuda"
    cudnn = torch.backends.cudnn.version() if cuda and torch.backends.cudnn.is_available() else None
    gpu_mem = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1) if cuda else None
    return {
        "device": device.type,
        "device_slug": device_slug(device),
        "device_name": device_name(device),
        **versions(device),
        "gpu_memory_gb": gpu_mem,
        "cudnn_version": cudnn,
        "python": platform.python_version(),
        "cpu_model": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (2 on a busy 2-core machine); None where unknown."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


# --- peak memory (bench measurements, training's metrics.json) -------------------------------


def _proc_status_kb(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class PeakMemory:
    """Peak memory growth of the measured steps, in bytes; `method` says how it was taken."""

    def __init__(self, device: torch.device):
        self.device = device
        self.base = 0
        if device.type == "cuda":
            self.method = "cuda max_memory_allocated growth"
        elif _proc_status_kb("VmHWM") is not None and self._reset_hwm():
            self.method = "cpu peak RSS growth (VmHWM reset via clear_refs)"
        else:
            self.method = "cpu ru_maxrss growth"

    @staticmethod
    def _reset_hwm() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")  # 5 = reset the peak resident set size to the current one
            return True
        except OSError:
            return False

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        elif self.method.startswith("cpu peak RSS"):
            self._reset_hwm()
            self.base = (_proc_status_kb("VmRSS") or 0) * 1024
        else:
            import resource

            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def peak(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device) - self.base
        if self.method.startswith("cpu peak RSS"):
            return (_proc_status_kb("VmHWM") or 0) * 1024 - self.base
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.base
