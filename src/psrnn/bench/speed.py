"""The train and options sections: step time and memory of each model at the paper's shapes.

    python -m psrnn bench --only train --shapes mnist --repeats 3
    python -m psrnn bench --only options --compile-cpu

train: the plain GRU (the floor: nn.GRU + linear head), full share, private/shared 50 % and
the slow reference `psrnn.studies.private_shared.naive.NaivePSRNN`, each timed by
`measure.measure_train`; ratios
aux overhead (variant / GRU) and vectorised speed-up (naive / ours).
options: bf16 autocast, torch.compile of the decoders, other batch sizes; at one shape.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from psrnn.bench.measure import Shape, Spec, run_measurement, run_together


@dataclass(frozen=True)
class Settings:
    """Knobs of the train/options measurements (`--quick` shrinks them)."""

    hidden: int = 128
    batch: int = 128
    anchors: int = 10
    window: int = 64
    tasks: tuple[str, ...] = ("rec", "pred")  # both tasks: the paper's best rows use both
    warmup: int = 2
    repeats: int = 5
    batches: tuple[int, ...] = (64, 256)  # batch sizes besides `batch` (options)
    seed: int = 0
    # CPU threads (None: torch's default, all cores). On a CPU shared with other busy
    # processes one thread is far steadier: idle OpenMP threads spin-wait for descheduled ones.
    threads: int | None = None
    max_tokens: int = 0  # training's token budget (RunConfig.max_tokens)
    variants: tuple[str, ...] = ("gru", "full", "ps50", "naive")  # train section


FULL = Settings()
QUICK = Settings(hidden=32, batch=16, anchors=2, window=8, warmup=1, repeats=2, batches=(8,), threads=1)
GPU_REPEATS = (5, 20)  # (warmup, repeats) on a GPU: steps are cheap there

# variant -> (shared proportion, naive)
VARIANTS = {"gru": (0.0, False), "full": (1.0, False), "ps50": (0.5, False), "naive": (0.5, True)}
VARIANT_LABELS = {
    "gru": "plain GRU (nn.GRU + head)",
    "full": "full share (RNN-AE)",
    "ps50": "private/shared 50 %",
    "naive": "naive private/shared 50 % (slow reference)",
}


def make_spec(
    shape: Shape, variant: str, s: Settings, device: torch.device, seq_len: int, **extra: Any
) -> Spec:
    """The measurement of one variant at `shape`, cut to seq_len steps; `extra` overrides
    Spec fields (an option's amp, compile, warmup or batch)."""
    shared, naive = VARIANTS[variant]
    spec = Spec(
        shape=shape,
        seq_len=seq_len,
        hidden=s.hidden,
        shared=shared,
        tasks=s.tasks,
        anchors=s.anchors,
        window=s.window,
        batch=s.batch,
        warmup=s.warmup,
        repeats=s.repeats,
        device=str(device),
        seed=s.seed,
        threads=s.threads,
        naive=naive,
        max_tokens=s.max_tokens,
    )
    return dataclasses.replace(spec, **extra)


def record(variant: str, spec: Spec, result: dict[str, Any], **labels: Any) -> dict[str, Any]:
    """One row of the output: what was measured, the option labels, the measurement."""
    return {
        "shape": spec.shape.dataset,
        "variant": variant,
        "seq_len": spec.seq_len,
        "features": spec.shape.features,
        "hidden": spec.hidden,
        "batch": spec.batch,
        "anchors": spec.anchors,
        "window": spec.window,
        "tasks": list(spec.tasks),
        **labels,
        **result,
    }


def _fmt_step(res: dict[str, Any]) -> str:
    """A log line's summary of one measurement."""
    if res.get("status") != "ok":
        return res.get("status", "?")
    s = res["step_ms"]
    return (
        f"{s['median']:.1f} ms ({s['min']:.1f}-{s['max']:.1f}), "
        f"{res['samples_per_s']:.0f} samples/s, {res['peak_mem_mb']:.0f} MB"
    )


# --- section: train ------------------------------------------------------------------------


def bench_train(
    shapes: list[Shape],
    s: Settings,
    device: torch.device,
    isolate: bool,
    seq_len: Callable[[Shape], int],
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Every variant at every shape (cut to seq_len(shape) steps): one row each."""
    rows = []
    for shape in shapes:
        for variant in s.variants:
            spec = make_spec(shape, variant, s, device, seq_len(shape))
            res = run_measurement(spec, isolate)
            rows.append(record(variant, spec, res))
            log(f"train {shape.dataset:8s} {variant:6s} {_fmt_step(res)}")
    return rows


def ratio(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """a / b of two step-time spreads: ratio of medians, range [min_a/max_b, max_a/min_b]."""
    if a.get("status") != "ok" or b.get("status") != "ok":
        return None
    sa, sb = a["step_ms"], b["step_ms"]
    out = {"median": sa["median"] / sb["median"], "min": sa["min"] / sb["max"], "max": sa["max"] / sb["min"]}
    if "step_cpu_ms" in a and "step_cpu_ms" in b:  # the same from process CPU time
        out["cpu_median"] = a["step_cpu_ms"]["median"] / b["step_cpu_ms"]["median"]
    return out


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Aux overhead (variant / plain GRU) and vectorised speed-up (naive / ours) per shape."""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        by = {r["variant"]: r for r in rows if r["shape"] == shape and r.get("option") is None}
        pairs = [
            ("aux_overhead", "full", "gru"),
            ("aux_overhead", "ps50", "gru"),
            ("speedup", "naive", "ps50"),
        ]
        for kind, a, b in pairs:
            if a in by and b in by:
                r = ratio(by[a], by[b])
                if r is not None:
                    out.append({"shape": shape, "kind": kind, "numerator": a, "denominator": b, **r})
    return out


# --- section: options ----------------------------------------------------------------------


def bench_options(
    shape: Shape,
    s: Settings,
    device: torch.device,
    isolate: bool,
    seq_len: int,
    compile_on_cpu: bool,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """bf16 autocast, torch.compile of the decoders, other batch sizes; at one shape."""
    rows = []

    def measure(variant: str, option: str, value: Any, skip: str | None = None, **extra: Any) -> None:
        spec = make_spec(shape, variant, s, device, seq_len, **extra)
        res = {"status": f"not measured: {skip}"} if skip else run_measurement(spec, isolate)
        rows.append(record(variant, spec, res, option=option, value=value))
        log(f"option {option}={value} {variant:6s} {_fmt_step(res)}")

    for variant in ("gru", "ps50"):  # CPU autocast too: bf16 matmuls where the CPU has them
        measure(variant, "amp", "bf16", amp="bf16")
    compile_skip = None if device.type == "cuda" or compile_on_cpu else "CPU: pass --compile-cpu"
    for variant in ("full", "ps50"):
        # more warm-up: the first calls compile
        measure(variant, "compile", "decoders", skip=compile_skip, compile=True, warmup=max(s.warmup, 3))
    for batch in s.batches:
        for variant in ("gru", "ps50"):
            measure(variant, "batch", batch, batch=batch)
    return rows


# --- section: graphs -----------------------------------------------------------------------

GRAPH_MODELS = (("gru", "teacher"), ("ps50", "teacher"), ("ps50", "estimate"))  # (variant, decoders)


def bench_graphs(
    shapes: list[Shape],
    s: Settings,
    device: torch.device,
    isolate: bool,
    seq_len: Callable[[Shape], int],
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """CUDA graphs (RunConfig.cuda_graphs, on by default, so a GPU's train table is graphed):
    at every shape, each of GRAPH_MODELS graphed and eager, same seed and steps; the eager
    row says whether it trained the very parameters of its graphed twin (params_sha256)."""
    rows: list[dict[str, Any]] = []
    skip = None if device.type == "cuda" else "not measured: CUDA graphs need a CUDA device"
    for shape in shapes:
        for variant, decoder in GRAPH_MODELS:
            for graphs in (True, False):
                # warm-up 3 at least: a shape's second step captures its graphs
                spec = make_spec(
                    shape,
                    variant,
                    s,
                    device,
                    seq_len(shape),
                    decoder_input=decoder,
                    warmup=max(s.warmup, 3),
                    graphs=graphs,
                )
                res = {"status": skip} if skip else run_measurement(spec, isolate)
                rows.append(record(variant, spec, res, decoders=decoder, graphs=graphs))
                mode = "on " if graphs else "off"
                log(f"graphs {shape.dataset:8s} {variant:6s} {decoder:8s} {mode} {_fmt_step(res)}")
            rows[-1]["same_params_as_graphed"] = same_params(rows[-1], rows[-2])
    return rows


def same_params(a: dict[str, Any], b: dict[str, Any] | None) -> bool | None:
    """Whether two measurements trained identical parameters (None: one was not measured)."""
    if not b or "params_sha256" not in a or "params_sha256" not in b:
        return None
    return a["params_sha256"] == b["params_sha256"]


# --- section: packing ----------------------------------------------------------------------

PACKING_JOBS = (1, 2, 4)  # training jobs sharing the device
PACKING_THREADS = 4  # CPU threads per job (config/paper.yaml resources.train.threads)


def bench_packing(
    shapes: list[Shape],
    s: Settings,
    device: torch.device,
    seq_len: Callable[[Shape], int],
    log: Callable[[str], None],
    jobs: tuple[int, ...] = PACKING_JOBS,
) -> list[dict[str, Any]]:
    """k private/shared 50 % jobs at once on the device, each with PACKING_THREADS threads
    (fewer on a small CPU): per-job step time and the throughput of all k over one job's."""
    threads = max(1, min(PACKING_THREADS, (os.cpu_count() or 1) // max(jobs)))
    rows = []
    for shape in shapes:
        alone = None
        for k in jobs:
            spec = make_spec(shape, "ps50", s, device, seq_len(shape), threads=threads)
            spec = dataclasses.replace(spec, warmup=max(spec.warmup, 5), repeats=max(spec.repeats, 30))
            res = run_together([dataclasses.replace(spec, seed=i) for i in range(k)])
            ok = all(r.get("status") == "ok" for r in res)
            step = statistics.median(r["step_ms"]["median"] for r in res) if ok else None
            throughput = None if step is None else k * spec.batch / step * 1e3  # sequences/s of all jobs
            if k == 1:
                alone = throughput
            speedup = throughput / alone if throughput is not None and alone else None
            status = "ok" if ok else next(r["status"] for r in res if r.get("status") != "ok")
            rows.append(
                {
                    "shape": shape.dataset,
                    "variant": "ps50",
                    "jobs": k,
                    "threads": threads,
                    "seq_len": spec.seq_len,
                    "batch": spec.batch,
                    "status": status,
                    "step_ms": step,
                    "peak_mem_mb": max(r["peak_mem_mb"] for r in res) if ok else None,
                    "samples_per_s": throughput,
                    "speedup": speedup,
                }
            )
            log(
                f"packing {shape.dataset:8s} {k} job(s) x {threads} threads: "
                + (
                    f"{step:.1f} ms/step each, {speedup:.2f}x one job's throughput"
                    if step is not None and speedup is not None
                    else status
                )
            )
    return rows
