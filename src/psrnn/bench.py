"""`python -m psrnn bench`: training speed and memory, data preparation, compute budget.

    python -m psrnn bench                          # everything -> results/bench/<device>.json + .md
    python -m psrnn bench --quick                  # tiny shapes, ~20 s -> results/bench/quick/
    python -m psrnn bench --only train --shapes mnist --repeats 3
    python -m psrnn bench --only budget --merge    # redo one section, keep the others' numbers
    PYTHONPATH=src python -m psrnn bench --device cuda   # on a GPU machine, no install

Sections (`--only`, comma separated):
  train     one training step (forward, backward, clip, SGD step: `training.train_epoch`
            itself) at the paper's shapes for the plain GRU (the floor: nn.GRU + linear
            head), full share, private/shared 50 %, and the slow reference
            `psrnn.naive.NaivePSRNN`; step time (warm-up, then median/min/max of repeats),
            process CPU time, samples/s, peak memory; ratios aux overhead (variant / GRU)
            and vectorised speed-up (naive / ours)
  options   bf16 autocast (torch.autocast on the device, cuda or cpu), torch.compile of
            the decoders (CPU with --compile-cpu), batch size 64 / 256
  prepare   generate a full-size IMDB-like tarball (50K reviews) and MNIST-like IDX files
            (60K + 10K), run the real `prepare` on them: time and disk size
  budget    device hours of the whole paper config (experiments x seeds x grid points x
            max_epochs cap) from measured step times at each experiment's shapes (GPU: at
            the full length; CPU: two shorter lengths, extrapolated, batch 32 scaled)
  snakemake wall time of `snakemake -n` on the paper config
Each target of the project is reported as met / not met / not measured; a section that
fails is recorded in the output ("errors") and the others still run.

Memory: on CUDA, torch.cuda.max_memory_allocated growth over the allocation before the
first step (exact, allocator view). On CPU, growth of the process's peak resident set
(VmHWM, reset through /proc/self/clear_refs) over the RSS before the first step; in a
fresh process per measurement unless --isolate off (then later measurements can reuse
memory freed by earlier ones and read low). Data loading is not timed apart: the step
includes `SequenceSplit.batch` as training does (synthetic data in memory). On a CPU
shared with other jobs use --threads 1 and read the process CPU times.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from psrnn import __version__
from psrnn import config as C
from psrnn.cli import UserError
from psrnn.files import read_json, write_bytes, write_json, write_text

SECTIONS = ("train", "options", "prepare", "budget", "snakemake")
SCHEMA = "psrnn-bench/1"


# --- shapes and settings -------------------------------------------------------------------


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


FULL = Settings()
QUICK = Settings(hidden=32, batch=16, anchors=2, window=8, warmup=1, repeats=2, batches=(8,), threads=1)
GPU_REPEATS = (5, 20)  # (warmup, repeats) on a GPU: steps are cheap there

# variant -> (shared proportion, naive)
VARIANTS = {"gru": (0.0, False), "full": (1.0, False), "ps50": (0.5, False), "naive": (0.5, True)}
VARIANT_LABELS = {"gru": "plain GRU (nn.GRU + head)", "full": "full share (RNN-AE)",
                  "ps50": "private/shared 50 %", "naive": "naive private/shared 50 % (slow reference)"}

TARGETS = {
    "aux_overhead": 1.2,  # ps50 / plain GRU step time at the MNIST shape
    "speedup_cuda": 20.0,  # naive / ours
    "speedup_cpu": 5.0,
    "imdb_prepare_s": 60.0,
    "imdb_prepared_mb": 100.0,
    "snakemake_s": 10.0,
}


# --- environment ---------------------------------------------------------------------------


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"




def device_label(device: torch.device) -> tuple[str, str]:
    """(device name, file-name slug), e.g. ("NVIDIA H100 80GB HBM3", "cuda-nvidia-h100-80gb-hbm3")."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return name, f"cuda-{slug(name)}"
    name = cpu_model()
    return name, f"cpu-{slug(name)}"


def environment(device: torch.device) -> dict[str, Any]:
    name, device_slug = device_label(device)
    cudnn = None
    if device.type == "cuda" and torch.backends.cudnn.is_available():
        cudnn = torch.backends.cudnn.version()
    gpu_mem = (round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
               if device.type == "cuda" else None)
    return {
        "device": device.type, "device_slug": device_slug, "device_name": name,
        "gpu_memory_gb": gpu_mem,
        "torch_version": torch.__version__, "cuda_version": torch.version.cuda if device.type == "cuda" else None,
        "cudnn_version": cudnn, "python": platform.python_version(), "platform": platform.platform(),
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "psrnn_version": __version__,
    }


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


# --- timing and memory ---------------------------------------------------------------------


def spread(values: list[float], scale: float = 1.0) -> dict[str, Any]:
    """{"median", "min", "max", "n"} of values x scale (e.g. seconds -> ms)."""
    return {"median": statistics.median(values) * scale, "min": min(values) * scale,
            "max": max(values) * scale, "n": len(values)}


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
        return self.model.has_aux

    def forward(self, x, lengths, anchors=None):
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            logits, aux = self.model(x, lengths, anchors)
        return logits.float(), (None if aux is None else aux.float())


def compile_decoders(model: torch.nn.Module) -> None:
    """torch.compile each auxiliary decoder in place (parameters stay the same tensors)."""
    for task in list(model.decoders.keys()):
        model.decoders[task] = torch.compile(model.decoders[task])


def synthetic_split(shape: Shape, n: int, seq_len: int, seed: int):
    """A SequenceSplit of n random sequences in the prepared format (values do not matter
    for speed; shapes do)."""
    from psrnn.data import SequenceSplit

    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, shape.classes, (n,), generator=g)  # (N,)
    if shape.input == "categorical":
        x = torch.randint(0, shape.features, (n * seq_len,), generator=g, dtype=torch.uint8)  # (L,)
        offsets = torch.arange(n + 1, dtype=torch.int64) * seq_len  # (N + 1,)
        return SequenceSplit(x=x, y=y, offsets=offsets, categorical=True)
    x = torch.randint(0, 256, (n, seq_len, shape.features), generator=g, dtype=torch.uint8)  # (N, T, F)
    return SequenceSplit(x=x, y=y, offsets=None, categorical=False, scale=255.0)


def run_config(spec: dict[str, Any]) -> C.RunConfig:
    """The training RunConfig of a measurement (optimizer and clipping as training defaults)."""
    return C.coerce_run({
        "dataset": spec["dataset"], "hidden": spec["hidden"], "shared": spec["shared"],
        "tasks": list(spec["tasks"]), "anchors": spec["anchors"], "window": spec["window"],
        "batch_size": spec["batch"], "embedding": spec.get("embedding", 0),
        "decoder_layers": spec.get("decoder_layers", 1), "head": spec.get("head", "linear"),
        "decoder_input": spec.get("decoder_input", "teacher"), "seed": spec["seed"],
    })


def measure_train(spec: dict[str, Any]) -> dict[str, Any]:
    """Time `warmup + repeats` training steps of one model; returns step times and memory.

    spec: shape (Shape fields), seq_len, hidden, shared, tasks, anchors, window, batch,
    naive, amp ("bf16" | None), compile (bool), warmup, repeats, eval_batches, device, seed,
    threads (CPU threads; None = torch's default).
    Uses `training.train_epoch` (same step as training: CE + aux, backward, clip, SGD with
    warm restarts) on a synthetic split of batch x (warmup + repeats) sequences.
    """
    from psrnn import training
    from psrnn.models import build_model
    from psrnn.naive import NaivePSRNN

    device = torch.device(spec["device"])
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    shape = Shape(**spec["shape"])
    training.seed_everything(spec["seed"], device)
    cfg = run_config({**spec, "dataset": shape.dataset})
    model = build_model(cfg, shape.input, shape.features, shape.classes)
    shared_units = model.shared_units
    if spec.get("naive"):
        model = NaivePSRNN.from_model(model)
    model = model.to(device)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if spec.get("compile") and model.has_aux:
        compile_decoders(model)
    if spec.get("amp") == "bf16":
        model = Autocast(model, device.type)
    opt, sched = training.make_optimizer(cfg, model)
    steps = spec["warmup"] + spec["repeats"]
    split = synthetic_split(shape, spec["batch"] * steps, spec["seq_len"], spec["seed"])
    gens = training.Generators.seeded(spec["seed"])
    sync = synchronizer(device)
    stamps: list[tuple[float, float]] = []  # (wall, process CPU) after each step

    def on_step(epoch: int, step: int, m: torch.nn.Module) -> None:
        sync()
        stamps.append((time.perf_counter(), time.process_time()))

    memory = PeakMemory(device)
    memory.start()
    sync()
    start = (time.perf_counter(), time.process_time())
    training.train_epoch(model, split, cfg, opt, sched, gens, device, 1, on_step)
    peak = memory.peak()
    wall, cpu = np.diff(np.array([start, *stamps]), axis=0).T  # (steps,) seconds per step each
    timed = wall[spec["warmup"]:].tolist()
    out = {
        "step_ms": spread(timed, 1e3), "first_step_ms": float(wall[0]) * 1e3,
        # CPU seconds of all this process's threads: on a shared CPU it does not count the
        # time other processes held the cores (but does count idle threads' spin-waiting)
        "step_cpu_ms": spread(cpu[spec["warmup"]:].tolist(), 1e3),
        "samples_per_s": spec["batch"] / statistics.median(timed),
        "peak_mem_mb": peak / 2**20, "memory_method": memory.method,
        "params": params, "shared_units": shared_units, "status": "ok",
    }
    if spec.get("eval_batches"):
        eval_split = synthetic_split(shape, spec["batch"] * spec["eval_batches"], spec["seq_len"],
                                     spec["seed"] + 1)
        training.evaluate(model, synthetic_split(shape, spec["batch"], spec["seq_len"], 2), cfg, device)
        sync()
        t0 = time.perf_counter()
        training.evaluate(model, eval_split, cfg, device)
        sync()
        out["eval_batch_ms"] = (time.perf_counter() - t0) / spec["eval_batches"] * 1e3
    return out


def run_measurement(spec: dict[str, Any], isolate: bool) -> dict[str, Any]:
    """measure_train in this process or in a fresh one; an error becomes status "error: ..."."""
    try:
        if not isolate:
            return measure_train(spec)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            return pool.submit(measure_train, spec).result()
    except Exception as err:  # a failed option (e.g. no compiler) must not stop the benchmark
        msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return {"status": f"error: {type(err).__name__}: {msg[:300]}"}


def make_spec(shape: Shape, variant: str, s: Settings, device: torch.device, seq_len: int,
              **extra: Any) -> dict[str, Any]:
    shared, naive = VARIANTS[variant]
    return {"shape": vars(shape), "seq_len": seq_len, "hidden": s.hidden, "shared": shared,
            "tasks": list(s.tasks), "anchors": s.anchors, "window": s.window, "batch": s.batch,
            "naive": naive, "amp": None, "compile": False, "warmup": s.warmup,
            "repeats": s.repeats, "device": str(device), "seed": s.seed, "threads": s.threads,
            **extra}


def record(shape: Shape, variant: str, spec: dict[str, Any], result: dict[str, Any],
           **labels: Any) -> dict[str, Any]:
    return {"shape": shape.dataset, "variant": variant, "seq_len": spec["seq_len"],
            "features": shape.features, "hidden": spec["hidden"], "batch": spec["batch"],
            "anchors": spec["anchors"], "window": spec["window"], "tasks": spec["tasks"],
            **labels, **result}


# --- section: train ------------------------------------------------------------------------


def bench_train(shapes: list[Shape], s: Settings, device: torch.device, isolate: bool,
                seq_len: Callable[[Shape], int], log: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    for shape in shapes:
        for variant in VARIANTS:
            spec = make_spec(shape, variant, s, device, seq_len(shape))
            res = run_measurement(spec, isolate)
            rows.append(record(shape, variant, spec, res))
            log(f"train {shape.dataset:8s} {variant:6s} {_fmt_step(res)}")
    return rows


def ratio(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """a / b of two step-time spreads: ratio of medians, range [min_a/max_b, max_a/min_b]."""
    if a.get("status") != "ok" or b.get("status") != "ok":
        return None
    sa, sb = a["step_ms"], b["step_ms"]
    out = {"median": sa["median"] / sb["median"], "min": sa["min"] / sb["max"],
           "max": sa["max"] / sb["min"]}
    if "step_cpu_ms" in a and "step_cpu_ms" in b:  # the same from process CPU time
        out["cpu_median"] = a["step_cpu_ms"]["median"] / b["step_cpu_ms"]["median"]
    return out


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Aux overhead (variant / plain GRU) and vectorised speed-up (naive / ours) per shape."""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        by = {r["variant"]: r for r in rows if r["shape"] == shape and r.get("option") is None}
        pairs = [("aux_overhead", "full", "gru"), ("aux_overhead", "ps50", "gru"),
                 ("speedup", "naive", "ps50")]
        for kind, a, b in pairs:
            if a in by and b in by:
                r = ratio(by[a], by[b])
                if r is not None:
                    out.append({"shape": shape, "kind": kind, "numerator": a, "denominator": b, **r})
    return out


# --- section: options ----------------------------------------------------------------------


def bench_options(shape: Shape, s: Settings, device: torch.device, isolate: bool,
                  seq_len: int, compile_on_cpu: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """bf16 autocast, torch.compile of the decoders, other batch sizes; at one shape."""
    rows = []

    def measure(variant: str, option: str, value: Any, skip: str | None = None, **extra: Any) -> None:
        spec = make_spec(shape, variant, s, device, seq_len, **extra)
        res = {"status": f"not measured: {skip}"} if skip else run_measurement(spec, isolate)
        rows.append(record(shape, variant, spec, res, option=option, value=value))
        log(f"option {option}={value} {variant:6s} {_fmt_step(res)}")

    for variant in ("gru", "ps50"):  # CPU autocast too: bf16 matmuls where the CPU has them
        measure(variant, "amp", "bf16", amp="bf16")
    compile_skip = None if device.type == "cuda" or compile_on_cpu else "CPU: pass --compile-cpu"
    for variant in ("full", "ps50"):
        # more warm-up: the first calls compile
        measure(variant, "compile", "decoders", skip=compile_skip, compile=True,
                warmup=max(s.warmup, 3))
    for batch in s.batches:
        for variant in ("gru", "ps50"):
            measure(variant, "batch", batch, batch=batch)
    return rows


# --- section: prepare ----------------------------------------------------------------------

# Review lengths: log-normal with median e^6.98 = 1075 and sigma 0.63, clipped to the real
# corpus's [52, 13704] characters: mean ~1310 characters overall, ~89 % of reviews >= 500
# characters and a mean ~1430 of those (the paper's 22.2K kept reviews and 1430 steps).
IMDB_LOGN = (6.98, 0.63)
IMDB_CLIP = (52, 13_704)


def imdb_lengths(n: int, rng: np.random.Generator) -> np.ndarray:
    mu, sigma = IMDB_LOGN
    return np.clip(rng.lognormal(mu, sigma, n), *IMDB_CLIP).astype(np.int64)  # (n,)


def write_imdb_like(path: Path, reviews_per_split: int, seed: int = 0) -> dict[str, Any]:
    """An aclImdb_v1.tar.gz look-alike: {train,test}/{pos,neg}/<id>_<rating>.txt with
    reviews_per_split reviews per split (half per class) of IMDB-like lengths; word soup
    from a Zipf vocabulary with IMDB's punctuation and <br /> tags, so that the character
    statistics (and so the 60-symbol alphabet) look like English text."""
    import io
    import tarfile

    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    freq = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4,
                     2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.15, 0.15, 0.1, 0.07])
    words = ["".join(rng.choice(letters, size=int(k), p=freq / freq.sum()))
             for k in rng.integers(1, 11, 4000)]
    words += [w.capitalize() for w in words[:1500:3]]  # sentence starts and names
    # rarer symbols real reviews have, so that the alphabet fills its 60 symbols
    words += ["(1999)", "7/10", "3/10", '"great"', "it's", "don't", "-", "--", "...", ":", ";",
              "&", "$5", "100%", "#1", "café", "über", "señor", "Zoë", "[sic]", "*", "Q&A", "e-mail",
              "X-Men", "JFK", "UK", "TV", "DVD", "OK", "WWII", "Y2K", "B+", "Jr.", "4", "8", "6", "2"]
    vocab = np.array([w + sep for w in words for sep in (" ", ", ", ". ", " ", "! ", "? ", " ")],
                     dtype=object)
    rng.shuffle(vocab)
    zipf = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    n = 2 * reviews_per_split
    lengths = imdb_lengths(n, rng)
    chunks = rng.choice(len(vocab), size=int(lengths.sum() // 4) + 1000, p=zipf / zipf.sum())
    text = "".join(vocab[chunks].tolist())
    text = text.replace("x. ", "x.<br /><br />")  # IMDB's line breaks, ~ every few hundred chars
    buf = io.BytesIO()
    pos = 0
    t0 = time.perf_counter()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for i in range(n):
            split = "train" if i < reviews_per_split else "test"
            j = i % reviews_per_split
            label = "pos" if j % 2 else "neg"
            rating = int(rng.integers(7, 11) if label == "pos" else rng.integers(1, 5))
            body = text[pos:pos + int(lengths[i])].encode("utf-8")
            pos = (pos + int(lengths[i])) % max(len(text) - IMDB_CLIP[1], 1)
            info = tarfile.TarInfo(f"aclImdb/{split}/{label}/{j // 2}_{rating}.txt")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    write_bytes(path, buf.getvalue())
    return {"reviews": n, "chars": int(lengths.sum()), "mean_chars": float(lengths.mean()),
            "archive_mb": path.stat().st_size / 2**20, "write_s": time.perf_counter() - t0}


def write_idx_like(folder: Path, n_train: int, n_test: int, seed: int = 0) -> dict[str, Any]:
    """MNIST-format gzipped IDX files (28 x 28 uint8, labels 0..9): strokes on black, so the
    files compress about like MNIST's."""
    import gzip

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[0:28, 0:28]
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = np.empty((n, 28, 28), dtype=np.uint8)
        for i in range(0, n, 5000):  # rings of random centre, radius and thickness
            m = min(5000, n - i)
            c = rng.uniform(9, 19, (m, 2, 1, 1))
            radius = rng.uniform(4, 9, (m, 1, 1))
            d = np.hypot(yy - c[:, 0], xx - c[:, 1])  # (m, 28, 28)
            ink = np.clip(1.6 - np.abs(d - radius), 0, 1)  # (m, 28, 28)
            images[i:i + m] = (ink * 255).astype(np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        header_x = np.array([2051, n, 28, 28], dtype=">i4").tobytes()
        header_y = np.array([2049, n], dtype=">i4").tobytes()
        with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb", compresslevel=6) as fh:
            fh.write(header_x + images.tobytes())
        with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb", compresslevel=6) as fh:
            fh.write(header_y + labels.tobytes())
    return {"images": n_train + n_test,
            "archive_mb": sum(p.stat().st_size for p in folder.iterdir()) / 2**20}


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def bench_prepare(scratch: Path, quick: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Generate full-size look-alike archives and time the real `prepare` on them."""
    from psrnn.data.prepare import prepare

    rows = []
    per_split = 500 if quick else 25_000
    raw, out = scratch / "raw" / "imdb", scratch / "prepared" / "imdb"
    t0 = time.perf_counter()
    gen = write_imdb_like(raw / "aclImdb_v1.tar.gz", per_split)
    gen_s = time.perf_counter() - t0
    opts = {"train_size": int(per_split * 0.8)} if quick else {}
    t0 = time.perf_counter()
    m = prepare("imdb", raw, out, opts)
    prep_s = time.perf_counter() - t0
    chars = sum(int(round(m["length"][s]["mean"] * m["counts"][s])) for s in m["counts"])
    max_len = max(m["length"][s]["max"] for s in m["counts"])
    n_seq = sum(m["counts"].values())
    rows.append({
        "dataset": "imdb", "source": "generated aclImdb look-alike", "items": gen["reviews"],
        "generate_s": gen_s, "prepare_s": prep_s, "raw_mb": gen["archive_mb"],
        "prepared_mb": folder_mb(out), "kept": n_seq, "counts": m["counts"],
        "mean_length": m["length"]["train"]["mean"], "features": m["features"],
        # what the same splits would take as dense float32 one-hot: ragged, and padded to
        # the longest review (the naive tensor)
        "dense_onehot_gb": chars * m["features"] * 4 / 1e9,
        "dense_padded_onehot_gb": n_seq * max_len * m["features"] * 4 / 1e9,
    })
    log(f"prepare imdb: {gen['reviews']} reviews, prepare {prep_s:.1f}s, "
        f"{rows[-1]['prepared_mb']:.1f} MB (dense one-hot {rows[-1]['dense_onehot_gb']:.1f} GB)")

    n_train, n_test = (600, 100) if quick else (60_000, 10_000)
    raw, out = scratch / "raw" / "mnist", scratch / "prepared" / "mnist"
    t0 = time.perf_counter()
    gen = write_idx_like(raw, n_train, n_test)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = prepare("mnist", raw, out, {"valid_size": 100} if quick else {})
    prep_s = time.perf_counter() - t0
    rows.append({
        "dataset": "mnist", "source": "generated IDX look-alike", "items": gen["images"],
        "generate_s": gen_s, "prepare_s": prep_s, "raw_mb": gen["archive_mb"],
        "prepared_mb": folder_mb(out), "kept": sum(m["counts"].values()), "counts": m["counts"],
        "mean_length": m["length"]["train"]["mean"], "features": m["features"],
        "dense_onehot_gb": None, "dense_padded_onehot_gb": None,
    })
    log(f"prepare mnist: {gen['images']} images, prepare {prep_s:.1f}s, {rows[-1]['prepared_mb']:.1f} MB")
    return rows


# --- section: snakemake --------------------------------------------------------------------


def bench_snakemake(config_path: Path, timeout: float = 300.0) -> dict[str, Any]:
    """Wall time of `snakemake -n --configfile <config>` in the repository root."""
    exe = shutil.which("snakemake") or str(Path(sys.executable).with_name("snakemake"))
    cmd = [exe, "-n", "--cores", "1", "--configfile", str(config_path)]
    shown = ["snakemake", *cmd[1:]]
    if not Path(exe).exists() or not (C.ROOT / "Snakefile").is_file():
        return {"command": " ".join(shown), "status": "not measured: snakemake or Snakefile missing"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=C.ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"command": " ".join(shown), "status": f"error: timed out after {timeout:.0f}s",
                "seconds": timeout}
    seconds = time.perf_counter() - t0
    jobs = None
    m = re.search(r"^total\s+(\d+)", proc.stdout + proc.stderr, re.MULTILINE)
    if m:
        jobs = int(m.group(1))
    status = "ok" if proc.returncode == 0 else \
        f"error: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
    return {"command": " ".join(shown), "seconds": seconds, "jobs": jobs, "status": status}


# --- rendering -----------------------------------------------------------------------------


def _fmt_step(res: dict[str, Any]) -> str:
    if res.get("status") != "ok":
        return res.get("status", "?")
    s = res["step_ms"]
    return (f"{s['median']:.1f} ms ({s['min']:.1f}-{s['max']:.1f}), "
            f"{res['samples_per_s']:.0f} samples/s, {res['peak_mem_mb']:.0f} MB")


# --- section: budget -----------------------------------------------------------------------

# Official training-set sizes the prepared splits are cut from. IMDB: the training reviews
# left after the 500-character filter (paper Table 1: 20K train + 2.2K valid).
OFFICIAL_TRAIN = {"mnist": 60_000, "fmnist": 60_000, "cifar10": 50_000, "imdb": 22_200,
                  "dbpedia": 560_000}
IMAGE_SIDE = {"mnist": 28, "fmnist": 28, "cifar10": 32}
IMAGE_FEATURES = {"mnist": 1, "fmnist": 1, "cifar10": 3}
NUM_CLASSES = {"mnist": 10, "fmnist": 10, "cifar10": 10, "imdb": 2, "dbpedia": 14}
# DBpedia "<title> <abstract>": assumed log-normal, mean ~300 characters (Table 1), when no
# prepared data is at hand to read the real lengths from.
DBPEDIA_LOGN = (5.6, 0.45)
DBPEDIA_CLIP = (10, 3_000)


def paper_table1(dataset: str) -> dict[str, Any]:
    """The paper's Table 1 row of a dataset (config/reference.yaml)."""
    ref = C.load_yaml(C.ROOT / "config" / "reference.yaml")
    return next(row for row in ref["table1"] if row["dataset"] == dataset)


def split_sizes(dataset: str, opts: dict[str, Any],
                manifest: dict[str, Any] | None) -> tuple[int, int, str]:
    """(train, valid, source): sequences per epoch from the prepared manifest when there is
    one, else what `prepare` would cut from the official set with these options, else
    (prepare not importable, e.g. no torchvision on a bare GPU box) the paper's Table 1."""
    if manifest is not None:
        return int(manifest["counts"]["train"]), int(manifest["counts"]["valid"]), "prepared manifest"
    try:
        from psrnn.data.prepare import resolve_options, valid_count
    except ImportError as err:
        row = paper_table1(dataset)
        return int(row["train"]), int(row["valid"]), f"paper Table 1 (prepare not importable: {err})"
    o = resolve_options(dataset, opts)
    n = OFFICIAL_TRAIN[dataset]
    n_valid = valid_count(n, o)
    train, valid = n - n_valid, n_valid
    return min(train, o["train"] or train), min(valid, o["valid"] or valid), "official dataset sizes"


def text_lengths(dataset: str, opts: dict[str, Any], prepared: Path | None,
                 rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """(lengths of training texts, where they come from): the prepared train split when it
    exists, else the length model (IMDB_LOGN / DBPEDIA_LOGN) after the same filter and cut."""
    if prepared is not None and (prepared / "train.pt").is_file():
        d = torch.load(prepared / "train.pt", map_location="cpu", weights_only=True)
        return (d["offsets"][1:] - d["offsets"][:-1]).numpy(), f"prepared data ({prepared})"
    try:
        from psrnn.data.prepare import resolve_options

        o = resolve_options(dataset, opts)
    except ImportError:  # the paper's filter (IMDB >= 500 characters), no cut
        o = {"min_chars": opts.get("min_chars", 500 if dataset == "imdb" else 0),
             "max_length": opts.get("max_length")}
    if dataset == "imdb":
        lengths, source = imdb_lengths(200_000, rng), "IMDB length model (log-normal, bench.IMDB_LOGN)"
    else:
        mu, sigma = DBPEDIA_LOGN
        lengths = np.clip(rng.lognormal(mu, sigma, 200_000), *DBPEDIA_CLIP).astype(np.int64)
        source = "assumed DBpedia length model (log-normal, bench.DBPEDIA_LOGN)"
    lengths = lengths[lengths >= o["min_chars"]]
    if o["max_length"]:
        lengths = np.minimum(lengths, o["max_length"])
    return lengths, source


def padded_length(lengths: np.ndarray, batch: int, bucket: int, n: int, seed: int = 0,
                  epochs: int = 3) -> int:
    """Mean padded length of a training batch: training pads each batch to its longest text
    and the main GRU runs over all of it. Simulated with training's own batch order
    (`training.batch_order`, bucketed when bucket > 0) over epochs of n sequences drawn
    from `lengths`."""
    from psrnn.training import batch_order

    rng = np.random.default_rng(seed)
    maxima = []
    for epoch in range(epochs):
        sample = torch.from_numpy(rng.choice(lengths, size=n, replace=True))  # (n,)
        for b in batch_order(sample, batch, bucket, torch.Generator().manual_seed(seed + epoch)):
            maxima.append(int(sample[b].max()))
    return int(round(float(np.mean(maxima))))


def budget_shapes(suite: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (experiment, grid point) with everything its epoch time depends on."""
    rng = np.random.default_rng(0)
    droot = C.data_root(suite)
    rows = []
    cache: dict[tuple[str, int, int], tuple[int, str]] = {}
    enabled = set(C.enabled_datasets(suite))
    for name, exp in suite["experiments"].items():
        ds = exp["dataset"]
        opts = dict(suite["datasets"][ds].get("prepare") or {})
        prepared = droot / "prepared" / ds
        manifest_path = prepared / "manifest.json"
        manifest = None
        if manifest_path.is_file():
            manifest = read_json(manifest_path)
        train_n, valid_n, sizes_source = split_sizes(ds, opts, manifest)
        points = C.grid_points(exp) if C.has_grid(suite, name) else [(None, {})]
        for pid, _ in points:
            cfg = C.resolve_run(suite, name, suite["seeds"][0], point=pid)
            if ds in IMAGE_SIDE:
                side = opts.get("downsample") or IMAGE_SIDE[ds]
                seq_len, features, kind = side * side, IMAGE_FEATURES[ds], "continuous"
                length_source = "image size"
            else:
                key = (ds, cfg.batch_size, cfg.bucket)
                if key not in cache:
                    lengths, src = text_lengths(ds, opts, prepared, rng)
                    cache[key] = (padded_length(lengths, cfg.batch_size, cfg.bucket, train_n), src)
                seq_len, length_source = cache[key]
                features = manifest["features"] if manifest else opts.get(
                    "alphabet_size", 60 if ds == "imdb" else 70)
                kind = "categorical"
            rows.append({
                "experiment": name, "point": pid, "dataset": ds, "enabled": ds in enabled,
                "sizes_source": sizes_source,
                "seq_len": seq_len, "length_source": length_source, "features": features,
                "input": kind, "hidden": cfg.hidden, "shared": cfg.shared,
                "shared_units": cfg.shared_units if cfg.has_aux else 0,
                "tasks": list(cfg.tasks), "anchors": cfg.anchors, "window": cfg.window,
                "batch": cfg.batch_size, "embedding": cfg.embedding,
                "decoder_layers": cfg.decoder_layers, "decoder_input": cfg.decoder_input,
                "head": cfg.head, "max_epochs": cfg.max_epochs, "train_n": train_n,
                "valid_n": valid_n, "seeds": len(suite["seeds"]), "search": pid is not None,
            })
    return rows


def shape_key(row: dict[str, Any]) -> tuple:
    keys = ("dataset", "seq_len", "features", "input", "hidden", "shared", "tasks", "anchors",
            "window", "batch", "embedding", "decoder_layers", "decoder_input", "head")
    return tuple(tuple(row[k]) if isinstance(row[k], list) else row[k] for k in keys)


def budget_lengths(seq_len: int, window: int, anchors: int, device: torch.device,
                   quick: bool) -> list[int]:
    """Sequence lengths to time a shape at: the real one on a GPU; on CPU (or --quick) two
    shorter ones, extrapolated linearly (step time = a + b * T: the main GRU is linear in T,
    the decoders' cost does not depend on T; a 4x lever arm keeps timing noise small)."""
    shortest = 2 * window + anchors + 1  # anchors need [window, T - window)
    if device.type == "cuda" and not quick:
        return [seq_len]
    t1 = max(shortest, QUICK_LEN if quick else 128)
    if t1 >= seq_len:
        return [seq_len]
    return [t1, min((2 if quick else 4) * t1, seq_len)]


def extrapolate(points: list[tuple[int, float]], seq_len: int) -> float:
    """Line through two (T, time) points evaluated at seq_len (one point: itself). A
    negative slope (timing noise) counts as flat: a longer sequence never runs faster."""
    if len(points) == 1:
        return points[0][1]
    (t1, s1), (t2, s2) = points
    slope = max(0.0, (s2 - s1) / (t2 - t1))
    return s2 + slope * (seq_len - t2)


def bench_budget(suite: dict[str, Any], device: torch.device, quick: bool,
                 batch_cap: int | None, repeats: tuple[int, int],
                 log: Callable[[str], None], threads: int | None = None) -> dict[str, Any]:
    """Device hours of every run of `suite` at its max_epochs cap, from timed steps."""
    rows = budget_shapes(suite)
    measured: dict[tuple, dict[str, Any]] = {}
    # One CPU thread: its process CPU time is the step's wall time on an idle core, and
    # unlike wall time it does not grow while other processes hold the cores.
    clock = "step_cpu_ms" if device.type == "cpu" and threads == 1 else "step_ms"
    warmup, reps = repeats
    for row in rows:
        key = shape_key(row)
        if key in measured:
            continue
        batch = min(row["batch"], batch_cap) if batch_cap else row["batch"]
        shape = Shape(row["dataset"], row["seq_len"], row["features"], row["input"],
                      NUM_CLASSES[row["dataset"]])
        points, eval_points, status = [], [], "ok"
        lengths = budget_lengths(row["seq_len"], row["window"] if row["shared_units"] else 0,
                                 row["anchors"] if row["shared_units"] else 0, device, quick)
        for t in lengths:
            spec = {"shape": vars(shape), "seq_len": t, "hidden": row["hidden"], "shared": row["shared"],
                    "tasks": row["tasks"], "anchors": row["anchors"], "window": row["window"],
                    "batch": batch, "embedding": row["embedding"], "decoder_layers": row["decoder_layers"],
                    "decoder_input": row["decoder_input"], "head": row["head"], "naive": False,
                    "warmup": warmup, "repeats": reps, "eval_batches": 1, "device": str(device), "seed": 0,
                    "threads": threads}
            res = run_measurement(spec, isolate=False)
            if res.get("status") != "ok":
                status = res.get("status", "error")
                break
            points.append((t, res[clock]["min"] / 1e3))  # best of the repeats: least disturbed
            eval_points.append((t, res["eval_batch_ms"] / 1e3))
        scale = row["batch"] / batch  # CPU --budget-batch: time scaled linearly in batch size
        if status == "ok":
            step_s = extrapolate(points, row["seq_len"]) * scale
            eval_s = extrapolate(eval_points, row["seq_len"]) * scale
        else:
            step_s = eval_s = None
        measured[key] = {"step_s": step_s, "eval_batch_s": eval_s, "timed_lengths": lengths,
                         "timed_batch": batch, "status": status}
        log(f"budget {row['experiment']:26s} T={row['seq_len']:5d} d={row['hidden']:5d} "
            f"step {step_s if step_s is None else round(step_s, 3)} s ({status})")

    experiments: dict[str, dict[str, Any]] = {}
    for row in rows:
        m = measured[shape_key(row)]
        e = experiments.setdefault(row["experiment"], {
            "experiment": row["experiment"], "dataset": row["dataset"], "enabled": row["enabled"],
            "seq_len": row["seq_len"], "length_source": row["length_source"],
            "features": row["features"], "hidden": row["hidden"],
            "shared_units": row["shared_units"], "batch": row["batch"],
            "train_n": row["train_n"], "valid_n": row["valid_n"], "sizes_source": row["sizes_source"],
            "max_epochs": row["max_epochs"],
            "seeds": row["seeds"], "grid_points": 0, "epoch_s": [], "status": "ok",
            "timed_lengths": m["timed_lengths"], "timed_batch": m["timed_batch"]})
        if m["status"] != "ok":
            e["status"] = m["status"]
            continue
        e["clock"] = clock
        steps = math.ceil(row["train_n"] / row["batch"])
        evals = math.ceil(row["valid_n"] / row["batch"])
        epoch_s = steps * m["step_s"] + evals * m["eval_batch_s"]
        e["epoch_s"].append(epoch_s)
        e["step_ms"] = m["step_s"] * 1e3
        e["grid_points"] += int(row["search"])
    total = {"enabled": 0.0, "disabled": 0.0}
    out = []
    for e in experiments.values():
        if e["status"] != "ok" or not e["epoch_s"]:
            e.update(epoch_s=None, runs=None, hours=None)
            out.append(e)
            continue
        worst = max(e["epoch_s"])  # final runs: the selected point is not known beforehand
        search_h = sum(e["epoch_s"]) * e["max_epochs"] / 3600 if e["grid_points"] else 0.0
        final_h = e["seeds"] * worst * e["max_epochs"] / 3600
        e.update(epoch_s=worst, runs=e["seeds"] + e["grid_points"], search_hours=search_h,
                 final_hours=final_h, hours=search_h + final_h)
        total["enabled" if e["enabled"] else "disabled"] += e["hours"]
        out.append(e)
    return {"experiments": out, "total_hours": total["enabled"],
            "disabled_hours": total["disabled"],
            "method": (f"step ({'process CPU time, one thread' if clock == 'step_cpu_ms' else 'wall clock'}"
                       ", best of the repeats) and validation-batch times measured at each "
                       "experiment's hidden "
                       "size, shared units, anchors, window, batch and sequence length "
                       + ("(timed at the full length)" if device.type == "cuda" and not quick else
                          "(timed at two shorter lengths, extrapolated linearly in T)")
                       + (f", batch timed at {batch_cap} and scaled linearly" if batch_cap else "")
                       + "; epoch = ceil(train/B) steps + ceil(valid/B) validation batches; "
                         "every run to its max_epochs cap (early stopping only shortens it); "
                         "search = every grid point once (first seed), final = seeds x the "
                         "slowest grid point; text padded to each batch's longest sequence (batches as "
                         "training draws them, bucketed where the config says so: seq_len is the "
                         "mean padded length)")}


# --- targets -------------------------------------------------------------------------------


def _target(name: str, threshold: str, measured: float | None, ok: bool | None,
            unit: str, note: str = "") -> dict[str, Any]:
    status = "not measured" if measured is None else ("met" if ok else "not met")
    return {"target": name, "threshold": threshold, "measured": measured, "unit": unit,
            "status": status, "note": note}


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each project target: met / not met / not measured, with the measured value."""
    quick = result["quick"]
    device = result["environment"]["device"]
    found = {(r["shape"], r["numerator"], r["denominator"]): r for r in result.get("ratios", [])}
    out = []

    def cpu_ratio(r: dict[str, Any] | None) -> str:
        return f"; process CPU-time ratio {r['cpu_median']:.2f}x" if r and r.get("cpu_median") else ""

    over = found.get(("mnist", "ps50", "gru"))
    why = "--quick shapes" if quick else ("train section not run or mnist not measured" if over is None else "")
    value = None if quick or over is None else over["median"]
    out.append(_target("private/shared 50 % step time / plain GRU step time, MNIST shape",
                       f"<= {TARGETS['aux_overhead']}", value,
                       None if value is None else value <= TARGETS["aux_overhead"], "x",
                       why or ((f"measured on {device}; the target is set for a GPU" if device != "cuda" else "")
                               + cpu_ratio(over))))

    speed = found.get(("mnist", "naive", "ps50"))
    value = None if quick or speed is None else speed["median"]
    for dev, key in (("cuda", "speedup_cuda"), ("cpu", "speedup_cpu")):
        here = dev == device
        out.append(_target(f"vectorised speed-up over the naive loop ({'GPU' if dev == 'cuda' else 'CPU'}), "
                           f"MNIST shape", f">= {TARGETS[key]}", value if here else None,
                           None if (value is None or not here) else value >= TARGETS[key], "x",
                           cpu_ratio(speed).lstrip("; ") if here and value is not None else
                           ("--quick shapes" if quick and here else f"needs a run on {dev}")))

    imdb = next((p for p in result.get("prepare", []) if p["dataset"] == "imdb"), None)
    full = imdb is not None and imdb["items"] >= 50_000
    note = "" if full else ("--quick: 1K reviews" if imdb else "prepare section not run")
    t = imdb["prepare_s"] if full else None
    out.append(_target("IMDB preparation of 50K reviews, time", f"< {TARGETS['imdb_prepare_s']:.0f} s",
                       t, None if t is None else t < TARGETS["imdb_prepare_s"], "s",
                       note or f"{result['environment']['cpu_count']} CPU cores"))
    mb = imdb["prepared_mb"] if full else None
    out.append(_target("IMDB prepared size on disk", f"< {TARGETS['imdb_prepared_mb']:.0f} MB", mb,
                       None if mb is None else mb < TARGETS["imdb_prepared_mb"], "MB",
                       note or f"dense float32 one-hot would take {imdb['dense_onehot_gb']:.1f} GB"))

    snake = result.get("snakemake") or {}
    s = snake.get("seconds") if snake.get("status") == "ok" and snake.get("paper") else None
    out.append(_target("snakemake -n of the paper config", f"< {TARGETS['snakemake_s']:.0f} s", s,
                       None if s is None else s < TARGETS["snakemake_s"], "s",
                       "" if s is not None else (snake.get("status") if snake.get("status", "ok") != "ok"
                                                 else "not run on config/paper.yaml")))
    return out


# --- Markdown ------------------------------------------------------------------------------


def _n(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _step_cells(r: dict[str, Any], cpu: bool = False) -> list[str]:
    if r.get("status") != "ok":
        return [r.get("status", "?"), *["–"] * (3 if cpu else 2)]
    s = r["step_ms"]
    cells = [f"{s['median']:,.1f} ({s['min']:,.1f}–{s['max']:,.1f})"]
    if cpu:
        cells.append(_n(r["step_cpu_ms"]["median"]))
    return cells + [_n(r["samples_per_s"], 0), _n(r["peak_mem_mb"], 0)]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(result: dict[str, Any]) -> str:
    env, st = result["environment"], result["settings"]
    out = [f"# psrnn benchmark: {env['device_name']} (`{env['device_slug']}`)", ""]
    if result["quick"]:
        out += ["**--quick: tiny shapes and 1–2 repeats; checks that the benchmark runs, "
                "the numbers mean nothing.**", ""]
    out += [f"`{result['command']}`", "",
            f"psrnn {env['psrnn_version']}, torch {env['torch_version']}, CUDA {env['cuda_version']}, "
            f"cuDNN {env['cudnn_version']}, Python {env['python']}, {env['platform']}; "
            f"{env['cpu_count']} CPUs ({env['cpu_model']}), {env['torch_threads']} torch threads"
            + (f", {env['gpu_memory_gb']} GiB GPU memory" if env["gpu_memory_gb"] else "") + ".",
            "Load average (1, 5, 15 min) at start / end: " + "; ".join(
                f"{la['start']} / {la['end']}" for la in
                [*result["load_average"].get("earlier_parts", []), result["load_average"]]) + "."]
    out += [f"Note: {n}" for n in result["notes"]]
    out += [f"**Section {name} failed:** {msg}" for name, msg in result.get("errors", {}).items()]
    out += ["", "## Targets", "", table(
        ["target", "threshold", "measured", "status", "note"],
        [[t["target"], t["threshold"], "–" if t["measured"] is None else f"{t['measured']:.2f} {t['unit']}",
          f"**{t['status']}**", t["note"]] for t in result["targets"]])]

    if result.get("train"):
        out += ["", "## Training step", "",
                f"One optimizer step of `training.train_epoch` (batch gather, forward, CE + aux loss, "
                f"backward, clip, SGD + warm restarts): hidden {st['hidden']}, batch {st['batch']}, "
                f"{st['anchors']} anchors, window {st['window']}, tasks {'+'.join(st['tasks'])}; "
                f"{st['warmup']} warm-up steps, then median (min–max) of {st['repeats']} steps "
                f"(wall clock; CPU ms = process CPU time, all threads). "
                f"Peak memory: {result['memory_method']}.", "",
                table(["shape", "model", "T x F", "batch", "step ms", "CPU ms", "samples/s", "peak MB",
                       "params"],
                      [[r["shape"], VARIANT_LABELS[r["variant"]], f"{r['seq_len']} x {r['features']}",
                        r["batch"], *_step_cells(r, cpu=True), _n(r.get("params"))]
                       for r in result["train"]])]
    if result.get("ratios"):
        out += ["", "Ratios of step times: median, range [min/max, max/min] over the repeats, and "
                "the ratio of median process CPU times.", "",
                table(["shape", "ratio", "median", "range", "CPU-time ratio"],
                      [[r["shape"], ("aux overhead " if r["kind"] == "aux_overhead" else "speed-up ")
                        + f"{r['numerator']} / {r['denominator']}", f"{r['median']:.2f}x",
                        f"{r['min']:.2f}–{r['max']:.2f}",
                        "–" if r.get("cpu_median") is None else f"{r['cpu_median']:.2f}x"]
                       for r in result["ratios"]])]
    if result.get("options"):
        base = {(r["shape"], r["variant"]): r for r in result.get("train", [])}
        rows = []
        for r in result["options"]:
            b = base.get((r["shape"], r["variant"]))
            rel = "–"
            if b and r.get("status") == "ok" and b.get("status") == "ok":
                rel = (f"{r['step_ms']['median'] / b['step_ms']['median']:.2f}x / "
                       f"{r['step_cpu_ms']['median'] / b['step_cpu_ms']['median']:.2f}x")
            first = f"{r['first_step_ms'] / 1e3:.1f}" if r.get("status") == "ok" else "–"
            rows.append([f"{r['option']} = {r['value']}", r["shape"], VARIANT_LABELS[r["variant"]],
                         r["batch"], *_step_cells(r, cpu=True), rel, first])
        out += ["", "## Options", "", "Step time relative to the same model in the table above, "
                "wall clock / process CPU time (batch rows: compare samples/s); first step s = "
                "warm-up incl. compilation.", "",
                table(["option", "shape", "model", "batch", "step ms", "CPU ms", "samples/s", "peak MB",
                       "vs default", "first step s"], rows)]
    if result.get("prepare"):
        out += ["", "## Data preparation", "",
                "Generated look-alike archives of full size, then the real `prepare` "
                "(`psrnn.data.prepare.prepare`) on them; time of `prepare` alone.", "",
                table(["dataset", "items", "generate s", "prepare s", "archive MB", "prepared MB",
                       "kept (train/valid/test)", "dense float32 one-hot"],
                      [[p["dataset"], _n(p["items"]), _n(p["generate_s"]), f"**{p['prepare_s']:.1f}**",
                        _n(p["raw_mb"]), f"**{p['prepared_mb']:.1f}**",
                        "/".join(str(p["counts"][s]) for s in ("train", "valid", "test")),
                        "–" if p["dense_onehot_gb"] is None else
                        f"{p['dense_onehot_gb']:.1f} GB ragged, {p['dense_padded_onehot_gb']:.0f} GB padded"]
                       for p in result["prepare"]])]
    if result.get("budget"):
        b = result["budget"]
        unit = b["unit"]
        rows = [[e["experiment"] + ("" if e["enabled"] else " (disabled)"), e["dataset"],
                 f"{e['seq_len']} x {e['features']}", e["hidden"], e["shared_units"], e["batch"],
                 _n(e.get("step_ms"), 0), _n(None if e["epoch_s"] is None else e["epoch_s"] / 60),
                 f"{e['seeds']} + {e['grid_points']}", e["max_epochs"],
                 _n(e["hours"]) if e["status"] == "ok" else e["status"]]
                for e in b["experiments"]]
        out += ["", "## Compute budget", "",
                f"**{b['config']}: {b['total_hours']:,.0f} {unit}** at the max_epochs cap"
                + (f" (+ {b['disabled_hours']:,.0f} for disabled datasets)" if b["disabled_hours"] else "")
                + f". {b['method']}.", "",
                table(["experiment", "dataset", "T x F", "hidden", "shared", "batch", "step ms",
                       "epoch min", "runs (seeds + grid)", "epochs cap", unit], rows)]
    if result.get("snakemake"):
        s = result["snakemake"]
        out += ["", "## Workflow", "",
                f"`{s['command']}`: " + (f"{s['seconds']:.1f} s, {s['jobs']} jobs" if s["status"] == "ok"
                                         else s["status"])]
    return "\n".join(out) + "\n"


# --- command line --------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true",
                   help="tiny shapes, 1-2 repeats, small data (CI: checks the output is well formed)")
    p.add_argument("--out", help="output folder (default results/bench, or results/bench/quick with --quick)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)} (default all)")
    p.add_argument("--shapes", help=f"comma-separated shapes for train: {','.join(SHAPES)} (default all)")
    p.add_argument("--config", help="suite config for budget and snakemake "
                                     "(default config/paper.yaml; config/small.yaml with --quick)")
    p.add_argument("--warmup", type=int, help="warm-up steps per measurement")
    p.add_argument("--repeats", type=int, help="timed steps per measurement")
    p.add_argument("--batch", type=int, help=f"train/options batch size (default {FULL.batch})")
    p.add_argument("--threads", type=int, help="CPU threads per measurement (default: all cores; 1 with --quick)")
    p.add_argument("--isolate", choices=("auto", "on", "off"), default="auto",
                   help="one fresh process per CPU measurement, for clean peak RSS "
                        "(auto: on for a full CPU run)")
    p.add_argument("--compile-cpu", action="store_true", help="also time torch.compile on CPU (slow to compile)")
    p.add_argument("--budget-batch", type=int,
                   help="time budget steps at this batch and scale linearly (default: 32 on CPU)")
    p.add_argument("--merge", action="store_true",
                   help="keep the sections of an existing output that this run does not redo")
    p.add_argument("--note", action="append", default=[], help="a line recorded in the output (repeatable)")


def parse_list(text: str | None, known: tuple[str, ...] | list[str], what: str) -> list[str]:
    if not text:
        return list(known)
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in known]
    if bad:
        raise UserError(f"unknown {what} {', '.join(bad)}; known: {', '.join(known)}")
    return items


def command_line(args: argparse.Namespace) -> str:
    """The bench command as typed, rebuilt from the parsed arguments (defaults left out)."""
    parts = ["python -m psrnn bench"]
    for key, value in sorted(vars(args).items()):
        flag = "--" + key.replace("_", "-")
        if key.startswith("_") or key == "command" or value in (None, False, [], "auto"):
            continue
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):
            parts += [f"{flag} {v!r}" for v in value]
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def settings_for(args: argparse.Namespace, device: torch.device) -> Settings:
    """FULL or QUICK, with more repeats on a GPU and the command line's overrides."""
    s = QUICK if args.quick else FULL
    if device.type == "cuda" and not args.quick:
        s = Settings(**{**vars(s), "warmup": GPU_REPEATS[0], "repeats": GPU_REPEATS[1]})
    given = {"warmup": args.warmup, "repeats": args.repeats, "batch": args.batch, "threads": args.threads}
    s = Settings(**{**vars(s), **{k: v for k, v in given.items() if v is not None}})
    if s.warmup < 1 or s.repeats < 1:
        raise UserError("--warmup and --repeats must be >= 1 (the first step is never timed)")
    return s


# what each section adds to the result; train's settings and memory method go with its table
SECTION_KEYS = {"train": ("train", "ratios", "settings", "memory_method"), "options": ("options",), "prepare": ("prepare",),
                "budget": ("budget",), "snakemake": ("snakemake",)}


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new` plus the sections only `old` has (same device and quick mode), targets redone.

    Lets a long benchmark run in parts (`--only train`, then `--only budget --merge`)."""
    if old.get("schema") != SCHEMA or old.get("quick") != new["quick"]:
        raise UserError("--merge: the existing output is from another bench version or mode")
    out = dict(new)
    kept = [sec for sec in old.get("sections", []) if sec not in new["sections"]]
    for sec in kept:
        for key in SECTION_KEYS[sec]:
            if key in old:
                out[key] = old[key]
    out["sections"] = [sec for sec in SECTIONS if sec in new["sections"] or sec in kept]
    out["command"] = "; ".join(dict.fromkeys([*old.get("command", "").split("; "), new["command"]]))
    out["notes"] = list(dict.fromkeys([*old.get("notes", []), *new["notes"]]))
    out["load_average"] = {**new["load_average"], "earlier_parts": [
        *old.get("load_average", {}).get("earlier_parts", []),
        {k: v for k, v in old.get("load_average", {}).items() if k != "earlier_parts"}]}
    out["total_s"] = new["total_s"] + old.get("total_s", 0.0)
    out["errors"] = {**{k: v for k, v in old.get("errors", {}).items() if k in kept},
                     **new.get("errors", {})}
    out["targets"] = targets(out)
    return out


def run(args: argparse.Namespace) -> int:
    from psrnn.training import pick_device  # one device rule for training and bench

    device = pick_device(args.device)
    sections = parse_list(args.only, SECTIONS, "section")
    shapes = [SHAPES[s] for s in parse_list(args.shapes, tuple(SHAPES), "shape")]
    s = settings_for(args, device)
    config_path = Path(args.config or ("config/small.yaml" if args.quick else "config/paper.yaml"))
    out_dir = Path(args.out or ("results/bench/quick" if args.quick else "results/bench"))
    threads = torch.get_num_threads()
    try:
        if s.threads:
            torch.set_num_threads(s.threads)
        result = benchmark(args, device, s, sections, shapes, config_path)
    finally:
        torch.set_num_threads(threads)  # in-process callers (tests) get their setting back
    slug_ = result["environment"]["device_slug"]
    json_path = out_dir / f"{slug_}.json"
    if args.merge and json_path.is_file():
        result = merge(read_json(json_path), result)
    write_json(json_path, result)
    write_text(out_dir / f"{slug_}.md", to_markdown(result))
    for t in result["targets"]:
        print(f"target {t['status']:>12s}: {t['target']} {t['threshold']}"
              + ("" if t["measured"] is None else f" (measured {t['measured']:.2f} {t['unit']})"))
    print(f"wrote {json_path} and {json_path.with_suffix('.md')} ({result['total_s']:.0f}s)")
    return 0


def benchmark(args: argparse.Namespace, device: torch.device, s: Settings, sections: list[str],
              shapes: list[Shape], config_path: Path) -> dict[str, Any]:
    """Run the chosen sections; returns the whole result (what the JSON holds)."""
    quick = args.quick
    isolate = {"on": True, "off": False}.get(args.isolate, device.type == "cpu" and not quick)
    budget_batch = args.budget_batch or (32 if device.type == "cpu" and not quick else None)

    def log(msg: str) -> None:
        print(msg, flush=True)

    env = environment(device)
    seq_len = (lambda sh: min(QUICK_LEN, sh.seq_len)) if quick else (lambda sh: sh.seq_len)
    result: dict[str, Any] = {
        "schema": SCHEMA, "quick": quick, "command": command_line(args), "sections": sections,
        "environment": env, "load_average": {"start": load_average(), "end": None},
        "settings": {**vars(s), "tasks": list(s.tasks), "batches": list(s.batches),
                     "shapes": [sh.dataset for sh in shapes], "isolate": isolate},
        "memory_method": PeakMemory(device).method + (" (fresh process per measurement)" if isolate else ""),
        "notes": list(args.note),
    }
    log(f"bench on {env['device_name']} ({env['device_slug']}), sections {', '.join(sections)}"
        + (" [quick]" if quick else ""))
    suite = C.load_suite(config_path) if {"budget", "snakemake"} & set(sections) else None
    t_all = time.perf_counter()

    def do_train() -> None:
        result["train"] = bench_train(shapes, s, device, isolate, seq_len, log)
        result["ratios"] = ratios(result["train"])

    def do_options() -> None:
        shape = shapes[0]
        result["options"] = bench_options(shape, s, device, isolate, seq_len(shape), args.compile_cpu, log)

    def do_prepare() -> None:
        with tempfile.TemporaryDirectory(prefix="psrnn-bench-") as tmp:
            result["prepare"] = bench_prepare(Path(tmp), quick, log)

    def do_budget() -> None:
        reps = (1, 1) if quick else ((3, 5) if device.type == "cuda" else (1, 3))
        b = bench_budget(suite, device, quick, budget_batch, reps, log, s.threads)
        unit = "GPU hours" if device.type == "cuda" else "CPU hours"
        b.update(config=str(config_path), unit=unit, device_name=env["device_name"])
        result["budget"] = b
        log(f"budget {config_path}: {b['total_hours']:.1f} {unit} on {env['device_name']}")

    def do_snakemake() -> None:
        sm = bench_snakemake(config_path)
        sm["paper"] = config_path.name == "paper.yaml"
        result["snakemake"] = sm
        log(f"snakemake -n {config_path}: {sm.get('seconds', 0):.1f}s ({sm['status']})")

    steps = {"train": do_train, "options": do_options, "prepare": do_prepare,
             "budget": do_budget, "snakemake": do_snakemake}
    result["errors"] = {}
    for name in sections:
        try:
            steps[name]()
        except Exception as err:  # one broken section (e.g. a missing package) must not lose the others
            result["errors"][name] = f"{type(err).__name__}: {str(err).strip()[:500]}"
            log(f"{name}: failed: {result['errors'][name]}")
    result["load_average"]["end"] = load_average()
    result["total_s"] = time.perf_counter() - t_all
    result["targets"] = targets(result)
    return result
