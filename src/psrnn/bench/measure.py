"""One measurement: a few training steps of one model, timed, with its peak memory.

    python -m psrnn bench --only train --shapes mnist   # one measure_train per model

A `Spec` says what is measured; `measure_train` runs it through `train_epoch` itself
(the step training takes: batch gather, forward, CE + aux loss, backward, clip, SGD with warm
restarts) on synthetic data in memory, so data loading is not timed apart.

Memory: on CUDA, torch.cuda.max_memory_allocated growth over the allocation before the
first step (exact, allocator view). On CPU, growth of the process's peak resident set
(VmHWM, reset through /proc/self/clear_refs) over the RSS before the first step; in a
fresh process per measurement (`run_measurement(spec, isolate=True)`), else later
measurements can reuse memory freed by earlier ones and read low.

Why not torch.utils.benchmark.Timer: it times a statement it runs again and again, while
a training step here is the epoch loop's own step (its batch order, SGDR's per-step rate,
the optimizer state that each step changes), stamped from training's on_step hook so that
every step of one real epoch is timed once, with process CPU time beside the wall clock
(Timer measures wall time only).
"""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from psrnn import config as C
from psrnn.machine import PeakMemory
from psrnn.studies.private_shared import settings as S


@dataclass(frozen=True)
class Shape:
    """One dataset's input as the model sees it."""

    dataset: str
    seq_len: int  # T: steps per sequence (text: every synthetic sequence has this length)
    features: int  # values per step, or alphabet size for text
    input: str  # "continuous" | "categorical"
    classes: int


# The paper's shapes: pixel MNIST, pixel CIFAR-10 (RGB per step), IMDB characters
# (mean kept length 1430, 60-symbol one-hot).
SHAPES = {
    "mnist": Shape("mnist", 784, 1, "continuous", 10),
    "cifar10": Shape("cifar10", 1024, 3, "continuous", 10),
    "imdb": Shape("imdb", 1430, 60, "categorical", 2),
}
QUICK_LEN = 48  # --quick: every shape cut to this many steps


@dataclass(frozen=True)
class Spec:
    """What one measurement times: `warmup + repeats` training steps of one model on
    batch x (warmup + repeats) synthetic sequences of `shape`, each seq_len steps long."""

    shape: Shape
    seq_len: int  # T timed (the budget times shorter ones on CPU and extrapolates)
    hidden: int
    shared: float  # proportion of shared units (0: plain GRU)
    tasks: tuple[str, ...]
    anchors: int
    window: int
    batch: int
    warmup: int  # untimed steps first (the first step is never timed)
    repeats: int  # timed steps
    device: str  # "cpu", "cuda", "cuda:N"
    seed: int = 0
    threads: int | None = None  # CPU threads; None: torch's default
    naive: bool = False  # the slow reference psrnn.studies.private_shared.naive.NaivePSRNN, same weights
    amp: str | None = None  # "bf16": forward under bf16 autocast
    compile: bool = False  # torch.compile the auxiliary decoders
    eval_batches: int = 0  # also time this many validation batches (eval_batch_ms)
    embedding: int = 0
    decoder_layers: int = 1
    decoder_input: str = "teacher"
    head: str = "linear"
    max_tokens: int = 0  # training's token budget (data.micro_batches)
    # RunConfig.cuda_graphs, as training has it; the naive, autocast and compiled models
    # always run eager (autocast's cast cache and torch.compile do not go into a graph)
    graphs: bool = True

    def run_config(self) -> S.RunConfig:
        """The training RunConfig (optimizer and clipping as training's defaults)."""
        return C.coerce_run(
            {
                "dataset": self.shape.dataset,
                "hidden": self.hidden,
                "shared": self.shared,
                "tasks": list(self.tasks),
                "anchors": self.anchors,
                "window": self.window,
                "batch_size": self.batch,
                "embedding": self.embedding,
                "decoder_layers": self.decoder_layers,
                "head": self.head,
                "decoder_input": self.decoder_input,
                "max_tokens": self.max_tokens,
                "cuda_graphs": self.graphs and not (self.naive or self.amp or self.compile),
                "seed": self.seed,
            }
        )


# --- timing and memory ---------------------------------------------------------------------


def spread(values: list[float], scale: float = 1.0) -> dict[str, Any]:
    """{"median", "min", "max", "n"} of values x scale (e.g. seconds -> ms)."""
    return {
        "median": statistics.median(values) * scale,
        "min": min(values) * scale,
        "max": max(values) * scale,
        "n": len(values),
    }


def synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


# --- one measurement: a few training steps of one model ------------------------------------


class Autocast(torch.nn.Module):
    """Runs the wrapped model's forward under bf16 autocast; losses come back in float32."""

    def __init__(self, model: torch.nn.Module, device_type: str):
        super().__init__()
        self.model = model
        self.device_type = device_type

    @property
    def has_aux(self) -> bool:
        return bool(self.model.has_aux)

    def forward(self, x, lengths, anchors=None):
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            logits, aux = self.model(x, lengths, anchors)
        return logits.float(), (None if aux is None else aux.float())


def compile_decoders(model: torch.nn.Module) -> None:
    """torch.compile each auxiliary decoder in place (parameters stay the same tensors)."""
    decoders = model.get_submodule("decoders")
    assert isinstance(decoders, torch.nn.ModuleDict)
    for task in list(decoders.keys()):
        decoders[task] = cast(torch.nn.Module, torch.compile(decoders[task]))  # an OptimizedModule


def synthetic_split(shape: Shape, n: int, seq_len: int, seed: int):
    """A SequenceSplit of n random sequences in the prepared format (values do not matter
    for speed; shapes do)."""
    from psrnn.studies.private_shared.data import SequenceSplit

    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, shape.classes, (n,), generator=g)  # (N,)
    if shape.input == "categorical":
        x = torch.randint(0, shape.features, (n * seq_len,), generator=g, dtype=torch.uint8)  # (L,)
        offsets = torch.arange(n + 1, dtype=torch.int64) * seq_len  # (N + 1,)
        return SequenceSplit(x=x, y=y, offsets=offsets, categorical=True)
    x = torch.randint(0, 256, (n, seq_len, shape.features), generator=g, dtype=torch.uint8)  # (N, T, F)
    return SequenceSplit(x=x, y=y, offsets=None, categorical=False, scale=255.0)


@dataclass
class Setup:
    """What `warmup + repeats` steps of `Spec` run on: built as training builds it."""

    model: torch.nn.Module
    cfg: S.RunConfig
    opt: Any
    sched: Any
    split: Any  # SequenceSplit of batch x (warmup + repeats) synthetic sequences
    gens: Any  # Generators
    device: torch.device
    params: int
    shared_units: int

    def epoch(self, on_step: Callable[[int, int, torch.nn.Module], None]) -> None:
        """One `train_epoch` over the split: every step of the measurement."""
        from psrnn.studies.private_shared.epoch import train_epoch

        args = (self.model, self.split, self.cfg, self.opt, self.sched, self.gens, self.device)
        train_epoch(*args, 1, on_step)


def setup(spec: Spec) -> Setup:
    """The model (naive, compiled or autocast as the spec says), optimizer and data of `spec`."""
    from psrnn.engine.books import seed_everything
    from psrnn.engine.checkpoint import Generators
    from psrnn.studies.private_shared.hooks import make_optimizer
    from psrnn.studies.private_shared.models import build_model
    from psrnn.studies.private_shared.naive import NaivePSRNN

    device = torch.device(spec.device)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    shape = spec.shape
    seed_everything(spec.seed, device)
    cfg = spec.run_config()
    built = build_model(cfg, shape.input, shape.features, shape.classes)
    shared_units = built.shared_units
    model: torch.nn.Module = NaivePSRNN.from_model(built) if spec.naive else built
    model = model.to(device)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if spec.compile and model.has_aux:
        compile_decoders(model)
    if spec.amp == "bf16":
        model = Autocast(model, device.type)
    opt, sched = make_optimizer(cfg, model)
    split = synthetic_split(shape, spec.batch * (spec.warmup + spec.repeats), spec.seq_len, spec.seed)
    gens = Generators.seeded(spec.seed)
    return Setup(model, cfg, opt, sched, split, gens, device, params, shared_units)


_start_together: Any = None  # a multiprocessing Barrier in run_together's workers


def _join(barrier: Any) -> None:
    global _start_together
    _start_together = barrier


def run_together(specs: list[Spec]) -> list[dict[str, Any]]:
    """measure_train of every spec at once, each in its own process, their timed steps
    started together (a barrier after set-up): jobs sharing one device."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(specs))
    try:
        with ProcessPoolExecutor(len(specs), mp_context=ctx, initializer=_join, initargs=(barrier,)) as pool:
            return [f.result() for f in [pool.submit(measure_train, spec) for spec in specs]]
    except Exception as err:  # one failed job (out of memory) fails the measurement, not the bench
        return [{"status": error_status(err)}] * len(specs)


def measure_train(spec: Spec) -> dict[str, Any]:
    """Time `warmup + repeats` training steps of one model (see `Spec`); returns step
    times in ms (median/min/max, wall clock and process CPU), samples/s, peak memory in
    MiB, parameter count, and with spec.eval_batches the time of one validation batch."""
    from psrnn.studies.private_shared.epoch import evaluate

    run = setup(spec)
    model, cfg, device, shape = run.model, run.cfg, run.device, spec.shape
    sync = synchronizer(device)
    stamps: list[tuple[float, float]] = []  # (wall, process CPU) after each step

    def on_step(epoch: int, step: int, m: torch.nn.Module) -> None:
        sync()
        stamps.append((time.perf_counter(), time.process_time()))

    memory = PeakMemory(device)
    memory.start()
    if _start_together is not None:  # packing: jobs sharing the device start timing at once
        _start_together.wait()
    sync()
    start = (time.perf_counter(), time.process_time())
    run.epoch(on_step)
    wall, cpu = np.diff(np.array([start, *stamps]), axis=0).T  # (steps,) seconds per step each
    timed = wall[spec.warmup :].tolist()
    out = {
        "step_ms": spread(timed, 1e3),
        "first_step_ms": float(wall[0]) * 1e3,
        # CPU seconds of all this process's threads: on a shared CPU it does not count the
        # time other processes held the cores (but does count idle threads' spin-waiting)
        "step_cpu_ms": spread(cpu[spec.warmup :].tolist(), 1e3),
        "samples_per_s": spec.batch / statistics.median(timed),
        "peak_mem_mb": None,  # below, after the validation batches
        "memory_method": memory.method,
        "params": run.params,
        "shared_units": run.shared_units,
        # the trained parameters' bytes: two measurements of one spec that differ only in how
        # the step runs (RunConfig.cuda_graphs) must train the same numbers
        "params_sha256": parameters_sha256(model),
        "status": "ok",
    }
    if spec.eval_batches:
        eval_split = synthetic_split(shape, spec.batch * spec.eval_batches, spec.seq_len, spec.seed + 1)
        evaluate(model, synthetic_split(shape, spec.batch, spec.seq_len, 2), cfg, device)
        sync()
        t0 = time.perf_counter()
        evaluate(model, eval_split, cfg, device)
        sync()
        out["eval_batch_ms"] = (time.perf_counter() - t0) / spec.eval_batches * 1e3
    out["peak_mem_mb"] = memory.peak() / 2**20  # training steps and validation batches
    return out


def parameters_sha256(model: torch.nn.Module) -> str:
    """sha256 over the parameters' names and bytes (on the CPU, in the model's order)."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode() + b"\0" + p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def run_measurement(
    spec: Spec, isolate: bool, measure: Callable[[Spec], dict[str, Any]] = measure_train
) -> dict[str, Any]:
    """measure(spec) (default measure_train) in this process or in a fresh one; an error
    becomes status "error: ..."."""
    try:
        if not isolate:
            try:
                return measure(spec)
            finally:
                release(spec.device)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            return pool.submit(measure, spec).result()
    except Exception as err:  # a failed option (e.g. no compiler) must not stop the benchmark
        return {"status": error_status(err)}


def release(device: str) -> None:
    """Free what a measurement in this process left on a GPU: a model and its CUDA graphs
    (epoch.GraphedPieces) refer to each other, so only the cycle collector frees them, and
    their memory pools with them."""
    if device.startswith("cuda"):
        gc.collect()
        torch.cuda.empty_cache()


def error_status(err: BaseException) -> str:
    """A failed measurement's status: "error: <type>: <the message's first line>"."""
    msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"error: {type(err).__name__}: {msg[:300]}"
