"""The budget section: device hours of a whole suite config from measured step times.

    python -m psrnn bench --only budget                                   # config/paper.yaml
    python -m psrnn bench --device cuda --only budget --config config/quick.yaml
    python -m psrnn bench --only budget --config config/quick.yaml --times-from FILE.json

Every run of the config (experiments x seeds x grid points) to its max_epochs cap: each
experiment's step and validation-batch times are measured at its own shapes (GPU: at the
full length; CPU: at two shorter lengths, extrapolated linearly in T, and with
--budget-batch at a smaller batch, scaled linearly). Text is padded to each batch's
longest sequence, as training draws its batches. `budget_hours` is the arithmetic from
times to hours; `psrnn.bench.stored` feeds it the times of an earlier result (--times-from)
instead of measuring them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psrnn import config as C
from psrnn.bench.measure import QUICK_LEN, Shape, Spec, run_measurement
from psrnn.files import read_json
from psrnn.studies.private_shared.data.lookalikes import imdb_lengths
from psrnn.studies.private_shared.datasets import REGISTRY

# DBpedia "<title> <abstract>": assumed log-normal, mean ~300 characters (Table 1), when no
# prepared data is at hand to read the real lengths from.
DBPEDIA_LOGN = (5.6, 0.45)
DBPEDIA_CLIP = (10, 3_000)


def paper_table1(dataset: str) -> dict[str, Any]:
    """The paper's Table 1 row of a dataset (config/reference.yaml)."""
    ref = C.load_yaml(C.ROOT / "config" / "reference.yaml")
    return next(row for row in ref["table1"] if row["dataset"] == dataset)


def split_sizes(dataset: str, opts: dict[str, Any], manifest: dict[str, Any] | None) -> tuple[int, int, str]:
    """(train, valid, source): sequences per epoch from the prepared manifest when there is
    one, else what `prepare` would cut from the official set with these options, else
    (prepare not importable, e.g. no torchvision on a bare GPU box) the paper's Table 1."""
    if manifest is not None:
        return int(manifest["counts"]["train"]), int(manifest["counts"]["valid"]), "prepared manifest"
    try:
        from psrnn.studies.private_shared.data.prepare import resolve_options, valid_count
    except ImportError as err:
        row = paper_table1(dataset)
        return int(row["train"]), int(row["valid"]), f"paper Table 1 (prepare not importable: {err})"
    o = resolve_options(dataset, opts)
    n = REGISTRY[dataset].split_pool  # IMDB: the training reviews left after its filter
    n_valid = valid_count(n, o)
    train, valid = n - n_valid, n_valid
    return min(train, o["train"] or train), min(valid, o["valid"] or valid), "official dataset sizes"


def text_lengths(
    dataset: str, opts: dict[str, Any], prepared: Path | None, rng: np.random.Generator
) -> tuple[np.ndarray, str]:
    """(lengths of training texts, where they come from): the prepared train split when it
    exists, else the length model (lookalikes.IMDB_LOGN, DBPEDIA_LOGN) after the same filter
    and cut."""
    if prepared is not None and (prepared / "train.pt").is_file():
        d = torch.load(prepared / "train.pt", map_location="cpu", weights_only=True)
        return (d["offsets"][1:] - d["offsets"][:-1]).numpy(), f"prepared data ({prepared})"
    try:
        from psrnn.studies.private_shared.data.prepare import resolve_options

        o = resolve_options(dataset, opts)
    except ImportError:  # the registry's filter (IMDB >= 500 characters), no cut
        o = {
            "min_chars": opts.get("min_chars", REGISTRY[dataset].min_chars),
            "max_length": opts.get("max_length"),
        }
    if dataset == "imdb":
        lengths = imdb_lengths(200_000, rng)
        source = "IMDB length model (log-normal, psrnn.studies.private_shared.data.lookalikes.IMDB_LOGN)"
    else:
        mu, sigma = DBPEDIA_LOGN
        lengths = np.clip(rng.lognormal(mu, sigma, 200_000), *DBPEDIA_CLIP).astype(np.int64)
        source = "assumed DBpedia length model (log-normal, psrnn.bench.budget.DBPEDIA_LOGN)"
    lengths = lengths[lengths >= o["min_chars"]]
    if o["max_length"]:
        lengths = np.minimum(lengths, o["max_length"])
    return lengths, source


def padded_length(
    lengths: np.ndarray, batch: int, bucket: int, n: int, seed: int = 0, epochs: int = 3
) -> int:
    """Mean padded length of a training batch: training pads each batch to its longest text
    and the main GRU runs over all of it. Simulated with training's own batch order
    (`data.batch_order`, bucketed when bucket > 0) over epochs of n sequences drawn
    from `lengths`."""
    from psrnn.studies.private_shared.data import batch_order

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
    cache: dict[tuple[str, int, int], tuple[int, str, int]] = {}
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
        points: list[tuple[str | None, dict[str, Any]]] = [(None, {})]
        if C.has_grid(suite, name):
            points = [*C.grid_points(exp)]
        for pid, _ in points:
            cfg = C.resolve_run(suite, name, C.search_seed(suite), point=pid)
            facts = REGISTRY[ds]
            steps = facts.steps(opts)
            if steps is not None:  # images: every sequence has the same length
                seq_len, features, kind = steps, facts.features, "continuous"
                length_source, longest = "image size", steps
            else:
                key = (ds, cfg.batch_size, cfg.bucket)
                if key not in cache:
                    lengths, src = text_lengths(ds, opts, prepared, rng)
                    padded = padded_length(lengths, cfg.batch_size, cfg.bucket, train_n)
                    cache[key] = (padded, src, int(lengths.max()))
                seq_len, length_source, longest = cache[key]
                features = manifest["features"] if manifest else facts.input_features(opts)
                kind = "categorical"
            rows.append(
                {
                    "experiment": name,
                    "point": pid,
                    "dataset": ds,
                    "enabled": ds in enabled,
                    "sizes_source": sizes_source,
                    "seq_len": seq_len,
                    "longest": longest,  # the longest sequence: its batch needs the most memory
                    "max_tokens": cfg.max_tokens,
                    # text batches pad to their own lengths, which seldom come back, so
                    # they train eager (epoch.GraphedPieces); timed so, not at one shape
                    "cuda_graphs": cfg.cuda_graphs and steps is not None,
                    "length_source": length_source,
                    "features": features,
                    "input": kind,
                    "hidden": cfg.hidden,
                    "shared": cfg.shared,
                    "shared_units": cfg.shared_units if cfg.has_aux else 0,
                    "tasks": list(cfg.tasks),
                    "anchors": cfg.anchors,
                    "window": cfg.window,
                    "batch": cfg.batch_size,
                    "embedding": cfg.embedding,
                    "decoder_layers": cfg.decoder_layers,
                    "decoder_input": cfg.decoder_input,
                    "head": cfg.head,
                    "max_epochs": cfg.max_epochs,
                    "train_n": train_n,
                    "valid_n": valid_n,
                    "seeds": len(suite["seeds"]),
                    "search": pid is not None,
                }
            )
    return rows


# What a step's time depends on: rows with the same values share one measurement. The
# budget's output records them per measured shape ("shapes"), so that a later budget can
# take its times from the file (psrnn.bench.stored, --times-from).
SHAPE_FIELDS = (
    "dataset",
    "seq_len",
    "features",
    "input",
    "hidden",
    "shared",
    "tasks",
    "anchors",
    "window",
    "batch",
    "embedding",
    "decoder_layers",
    "decoder_input",
    "head",
    "longest",
    "max_tokens",
    "cuda_graphs",
)


def shape_key(row: dict[str, Any]) -> tuple:
    # a shape measured before RunConfig.cuda_graphs ran eager
    row = {"cuda_graphs": False, **row}
    return tuple(tuple(row[k]) if isinstance(row[k], list) else row[k] for k in SHAPE_FIELDS)


# How hours follow from the times: every budget's method (measured or --times-from) ends with it.
ARITHMETIC = (
    "epoch = ceil(train/B) steps + ceil(valid/B) validation batches; "
    "every run to its max_epochs cap (early stopping only shortens it); "
    "search = every grid point once (first seed), final = the other seeds x the "
    "slowest grid point (the first seed's final run reuses its search run); "
    "text padded to each batch's longest sequence (batches as "
    "training draws them, bucketed where the config says so: seq_len is the "
    "mean padded length)"
)


def budget_lengths(seq_len: int, window: int, anchors: int, device: torch.device, quick: bool) -> list[int]:
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


def larger_peak(a: float | str | None, b: float | str | None) -> float | str | None:
    """The larger of two peaks in MiB; a failed measurement (its status string) wins, so it
    stays visible; None is not measured."""
    failed = [v for v in (a, b) if isinstance(v, str)]
    if failed:
        return failed[0]
    measured = [v for v in (a, b) if v is not None]
    return max(measured) if measured else None


def row_spec(
    row: dict[str, Any],
    shape: Shape,
    seq_len: int,
    batch: int,
    warmup: int,
    repeats: int,
    device: torch.device,
    threads: int | None,
) -> Spec:
    """The measurement of a budget row's model at seq_len steps."""
    return Spec(
        shape=shape,
        seq_len=seq_len,
        hidden=row["hidden"],
        shared=row["shared"],
        tasks=tuple(row["tasks"]),
        anchors=row["anchors"],
        window=row["window"],
        batch=batch,
        warmup=warmup,
        repeats=repeats,
        device=str(device),
        seed=0,
        threads=threads,
        eval_batches=1,
        embedding=row["embedding"],
        decoder_layers=row["decoder_layers"],
        decoder_input=row["decoder_input"],
        head=row["head"],
        max_tokens=row["max_tokens"],
        graphs=row.get("cuda_graphs", False),
    )


def bench_budget(
    suite: dict[str, Any],
    device: torch.device,
    quick: bool,
    batch_cap: int | None,
    repeats: tuple[int, int],
    log: Callable[[str], None],
    threads: int | None = None,
) -> dict[str, Any]:
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
        shape = Shape(
            row["dataset"], row["seq_len"], row["features"], row["input"], REGISTRY[row["dataset"]].classes
        )
        points, eval_points, status = [], [], "ok"
        lengths = budget_lengths(
            row["seq_len"],
            row["window"] if row["shared_units"] else 0,
            row["anchors"] if row["shared_units"] else 0,
            device,
            quick,
        )
        peaks = []
        for t in lengths:
            spec = row_spec(row, shape, t, batch, warmup, reps, device, threads)
            res = run_measurement(spec, isolate=False)
            if res.get("status") != "ok":
                status = res.get("status", "error")
                break
            points.append((t, res[clock]["min"] / 1e3))  # best of the repeats: least disturbed
            eval_points.append((t, res["eval_batch_ms"] / 1e3))
            peaks.append(res["peak_mem_mb"])
        longest = None
        if status == "ok" and device.type == "cuda" and row["longest"] > row["seq_len"]:
            # one step and one validation batch of the longest text's batch, under max_tokens
            spec = row_spec(row, shape, row["longest"], row["batch"], 1, 1, device, threads)
            res = run_measurement(spec, isolate=False)
            longest = res.get("peak_mem_mb") if res.get("status") == "ok" else res.get("status")
            if isinstance(longest, float):
                peaks.append(longest)
        scale = row["batch"] / batch  # CPU --budget-batch: time scaled linearly in batch size
        if status == "ok":
            step_s = extrapolate(points, row["seq_len"]) * scale
            eval_s = extrapolate(eval_points, row["seq_len"]) * scale
        else:
            step_s = eval_s = None
        measured[key] = {
            "step_s": step_s,
            "eval_batch_s": eval_s,
            # MiB over the allocation before the first step; on CPU at the timed batch
            "peak_mb": max(peaks) if peaks else None,
            "longest_batch_peak_mb": longest,
            "timed_lengths": lengths,
            "timed_batch": batch,
            "status": status,
        }
        log(
            f"budget {row['experiment']:26s} T={row['seq_len']:5d} d={row['hidden']:5d} "
            f"step {step_s if step_s is None else round(step_s, 3)} s, peak "
            f"{'-' if not peaks else round(max(peaks))} MB ({status})"
        )

    b = budget_hours(suite, rows, measured, clock)
    b["method"] = (
        f"step ({'process CPU time, one thread' if clock == 'step_cpu_ms' else 'wall clock'}"
        ", best of the repeats) and validation-batch times measured at each "
        "experiment's hidden "
        "size, shared units, anchors, window, batch and sequence length "
        + (
            "(timed at the full length)"
            if device.type == "cuda" and not quick
            else "(timed at two shorter lengths, extrapolated linearly in T)"
        )
        + (f", batch timed at {batch_cap} and scaled linearly" if batch_cap else "")
        + "; peak memory: the largest growth over the allocation before the first step, "
        "of the timed steps and (GPU, text) of one step and validation batch at the "
        "longest text's batch under the experiment's max_tokens; " + ARITHMETIC
    )
    return b


def budget_hours(
    suite: dict[str, Any], rows: list[dict[str, Any]], measured: dict[tuple, dict[str, Any]], clock: str
) -> dict[str, Any]:
    """The budget's arithmetic: hours of every run of `suite` (its `budget_shapes` rows) from
    the step and validation-batch seconds of each shape (`measured`, by `shape_key`: timed
    by `bench_budget` or read from a stored result by `psrnn.bench.stored`)."""
    experiments: dict[str, dict[str, Any]] = {}
    shapes: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = shape_key(row)
        m = measured[key]
        s = shapes.setdefault(
            key, {**{k: row[k] for k in SHAPE_FIELDS}, **m, "clock": clock, "experiments": []}
        )
        if row["experiment"] not in s["experiments"]:
            s["experiments"].append(row["experiment"])
        e = experiments.setdefault(
            row["experiment"],
            {
                "experiment": row["experiment"],
                "dataset": row["dataset"],
                "enabled": row["enabled"],
                "seq_len": row["seq_len"],
                "length_source": row["length_source"],
                "features": row["features"],
                "hidden": row["hidden"],
                "shared_units": row["shared_units"],
                "batch": row["batch"],
                "train_n": row["train_n"],
                "valid_n": row["valid_n"],
                "sizes_source": row["sizes_source"],
                "max_epochs": row["max_epochs"],
                "seeds": row["seeds"],
                "grid_points": 0,
                "epoch_s": [],
                "status": "ok",
                "timed_lengths": m["timed_lengths"],
                "timed_batch": m["timed_batch"],
                "longest": row["longest"],
                "max_tokens": row["max_tokens"],
                "cuda_graphs": row["cuda_graphs"],
                "peak_mb": None,
                "longest_batch_peak_mb": None,
            },
        )
        for k in ("peak_mb", "longest_batch_peak_mb"):  # the largest over the grid points
            e[k] = larger_peak(e[k], m[k])
        if m["status"] != "ok":
            e["status"] = m["status"]
            continue
        e["clock"] = clock
        steps = math.ceil(row["train_n"] / row["batch"])
        evals = math.ceil(row["valid_n"] / row["batch"])
        epoch_s = steps * m["step_s"] + evals * m["eval_batch_s"]
        e["epoch_s"].append(epoch_s)
        e["step_ms"] = m["step_s"] * 1e3
        e["eval_batch_ms"] = m["eval_batch_s"] * 1e3
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
        # the first seed's final run is the search run at the selected point (train --reuse)
        finals = e["seeds"] - 1 if e["grid_points"] else e["seeds"]
        final_h = finals * worst * e["max_epochs"] / 3600
        e.update(
            epoch_s=worst,
            runs=finals + e["grid_points"],
            search_hours=search_h,
            final_hours=final_h,
            hours=search_h + final_h,
        )
        total["enabled" if e["enabled"] else "disabled"] += e["hours"]
        out.append(e)
    return {
        "experiments": out,
        # the times per measured shape: what `--times-from` reads back (psrnn.bench.stored)
        "shapes": list(shapes.values()),
        # how many training jobs the config runs on one GPU (resources.train.jobs_per_gpu):
        # the report applies the packing section's speed-up at this many
        "jobs_per_gpu": int(((suite.get("resources") or {}).get("train") or {}).get("jobs_per_gpu", 1)),
        "total_hours": total["enabled"],
        "disabled_hours": total["disabled"],
    }
