"""The profile section: where a training step's time goes, per model, from torch.profiler.

    python -m psrnn bench --only profile --shapes mnist

For each variant of the train section (the plain GRU, full share, private/shared 50 %) at
each shape, `repeats` steps of `epoch.train_epoch` after `warmup` run under
torch.profiler; per step it counts what costs a GPU step its overlap of host and device:
device kernels and their busy time, host-to-device copies (pageable ones block the host),
synchronisations (cudaStreamSynchronize/cudaDeviceSynchronize/cudaEventSynchronize, and
blocking cudaMemcpy), `.item()`-style reads (aten::_local_scalar_dense) and aten operator
calls (on CPU these are the whole story); plus the operators with the most self time.
The counts do not depend on the machine's speed, so a CPU run already shows the host side.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType

from psrnn.bench.measure import Shape, run_measurement, setup, synchronizer
from psrnn.bench.speed import VARIANTS, Settings, make_spec

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
TOP = 12  # operators listed per measurement
# kineto, torch.profiler's backend, prints "USDT: ... profiler_start" and "profiler_stop" on
# stderr around every measurement, at its highest log level: only a level above it silences
# them, and with them its errors (on a CPU host, "gpuGetDeviceCount failed"). It reads the
# level when the first profiler starts; KINETO_LOG_LEVEL=4 in the environment keeps its errors.
KINETO_QUIET = "6"


def _self_device_us(avg: Any) -> float:
    """An averaged event's self time on the device (the attribute's name moved in torch 2.4)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(avg, name):
            return float(getattr(avg, name))
    return 0.0


def profile_train(spec: Any) -> dict[str, Any]:
    """Per-step counts and the top operators of `spec.repeats` steps after `spec.warmup`."""
    run = setup(spec)
    device = run.device
    sync = synchronizer(device)
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=activities)
    done = {"steps": 0, "wall": 0.0}

    def on_step(epoch: int, step: int, m: torch.nn.Module) -> None:
        if step == spec.warmup:
            sync()
            prof.start()
            done["wall"] = time.perf_counter()
        elif step == spec.warmup + spec.repeats:
            sync()
            done["wall"] = time.perf_counter() - done["wall"]
            prof.stop()
            done["steps"] = spec.repeats

    run.epoch(on_step)
    n = max(done["steps"], 1)
    events = prof.events()
    device_events = [e for e in events if e.device_type == DeviceType.CUDA]
    host = Counter(e.name for e in events if e.device_type == DeviceType.CPU)
    copies = [e for e in device_events if e.name.startswith("Memcpy")]
    per_step = {
        "wall_ms": done["wall"] / n * 1e3,
        "device_kernels": (len(device_events) - len(copies)) / n,
        "device_busy_ms": sum(e.device_time for e in device_events if hasattr(e, "device_time")) / n / 1e3
        if device_events
        else 0.0,
        "h2d_copies": sum("HtoD" in e.name for e in copies) / n,
        "h2d_pageable": sum("HtoD" in e.name and "Pageable" in e.name for e in copies) / n,
        "d2h_copies": sum("DtoH" in e.name for e in copies) / n,
        "syncs": sum(host[c] for c in SYNC_CALLS) / n,
        "item_reads": host["aten::_local_scalar_dense"] / n,
        "aten_ops": sum(v for k, v in host.items() if k.startswith("aten::")) / n,
        "kernel_launches": sum(host[k] for k in LAUNCH_CALLS) / n,
    }
    averages = prof.key_averages()
    key = _self_device_us if device.type == "cuda" else (lambda a: float(a.self_cpu_time_total))
    top = sorted((a for a in averages if key(a) > 0), key=key, reverse=True)[:TOP]
    return {
        "status": "ok",
        "steps": n,
        "per_step": per_step,
        "top": [
            {"op": a.key, "calls_per_step": a.count / n, "self_ms_per_step": key(a) / n / 1e3} for a in top
        ],
        "top_by": "self device time" if device.type == "cuda" else "self CPU time",
        "params": run.params,
    }


def bench_profile(
    shapes: list[Shape],
    s: Settings,
    device: torch.device,
    seq_len: Callable[[Shape], int],
    log: Callable[[str], None],
    isolate: bool = True,
) -> list[dict[str, Any]]:
    """profile_train of each fast variant at each shape (isolate: each in a fresh process)."""
    rows = []
    for shape in shapes:
        for variant, (_, naive) in VARIANTS.items():
            if naive:
                continue  # the slow reference's thousands of small ops say nothing about ours
            spec = make_spec(shape, variant, s, device, seq_len(shape))
            res = run_measurement(spec, isolate, measure=profile_train)
            rows.append({"shape": shape.dataset, "variant": variant, "seq_len": spec.seq_len, **res})
            if res.get("status") == "ok":
                p = res["per_step"]
                log(
                    f"profile {shape.dataset:8s} {variant:6s} {p['wall_ms']:.1f} ms/step, "
                    f"{p['device_kernels']:.0f} kernels ({p['device_busy_ms']:.1f} ms busy), "
                    f"{p['h2d_copies']:.0f} H2D ({p['h2d_pageable']:.0f} pageable), {p['syncs']:.0f} syncs, "
                    f"{p['item_reads']:.0f} item reads, {p['aten_ops']:.0f} aten ops"
                )
            else:
                log(f"profile {shape.dataset:8s} {variant:6s} {res.get('status')}")
    return rows
