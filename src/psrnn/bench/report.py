"""The benchmark's result: its sections, the project's targets, merging of parts, Markdown.

    python -m psrnn bench --only budget --merge    # redo one section, keep the others' numbers

The result is one JSON object per device (results/bench/<device slug>.json, keys below);
`to_markdown` renders it beside it (.md). Each target is met / not met / not measured.
"""

from __future__ import annotations

from typing import Any

from psrnn.bench.speed import VARIANT_LABELS
from psrnn.errors import UserError

SECTIONS = ("train", "options", "packing", "profile", "prepare", "budget", "snakemake")
SCHEMA = "psrnn-bench/1"
# what each section adds to the result; train's settings and memory method go with its table
SECTION_KEYS = {
    "train": ("train", "ratios", "settings", "memory_method"),
    "options": ("options",),
    "packing": ("packing",),
    "profile": ("profile",),
    "prepare": ("prepare",),
    "budget": ("budget",),
    "snakemake": ("snakemake",),
}

TARGETS = {
    "aux_overhead": 1.2,  # ps50 / plain GRU step time at the MNIST shape
    "speedup_cuda": 20.0,  # naive / ours
    "speedup_cpu": 5.0,
    "imdb_prepare_s": 60.0,
    "imdb_prepared_mb": 100.0,
    "snakemake_s": 10.0,
    "peak_gib": 16.0,  # every experiment's largest batch, training and evaluation
    "paper_gpu_hours": 48.0,  # config/paper.yaml, with jobs sharing a GPU as measured
}
# packing: the bench measures hidden-128 jobs; bigger models are counted unpacked, and a
# dataset without its own packing row takes the one of the same kind of input
PACKED_HIDDEN = 256
PACKING_PROXY = {"fmnist": "mnist", "dbpedia": "imdb"}


# --- targets -------------------------------------------------------------------------------


def _target(
    name: str, threshold: str, measured: float | None, ok: bool | None, unit: str, note: str = ""
) -> dict[str, Any]:
    status = "not measured" if measured is None else ("met" if ok else "not met")
    return {
        "target": name,
        "threshold": threshold,
        "measured": measured,
        "unit": unit,
        "status": status,
        "note": note,
    }


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each project target: met / not met / not measured, with the measured value."""
    quick = result["quick"]
    device = result["environment"]["device"]
    found = {(r["shape"], r["numerator"], r["denominator"]): r for r in result.get("ratios", [])}
    out = []

    def cpu_ratio(r: dict[str, Any] | None) -> str:
        return f"; process CPU-time ratio {r['cpu_median']:.2f}x" if r and r.get("cpu_median") else ""

    over = found.get(("mnist", "ps50", "gru"))
    why = "--quick shapes" if quick else "train section not run or mnist not measured" if over is None else ""
    value = None if quick or over is None else over["median"]
    out.append(
        _target(
            "private/shared 50 % step time / plain GRU step time, MNIST shape",
            f"<= {TARGETS['aux_overhead']}",
            value,
            None if value is None else value <= TARGETS["aux_overhead"],
            "x",
            why
            or "; ".join(
                x
                for x in (
                    f"measured on {device}; the target is set for a GPU" if device != "cuda" else "",
                    cpu_ratio(over).lstrip("; "),
                    device_floor(result),
                )
                if x
            ),
        )
    )

    speed = found.get(("mnist", "naive", "ps50"))
    value = None if quick or speed is None else speed["median"]
    for dev, key in (("cuda", "speedup_cuda"), ("cpu", "speedup_cpu")):
        here = dev == device
        out.append(
            _target(
                f"vectorised speed-up over the naive loop ({'GPU' if dev == 'cuda' else 'CPU'}), MNIST shape",
                f">= {TARGETS[key]}",
                value if here else None,
                None if (value is None or not here) else value >= TARGETS[key],
                "x",
                cpu_ratio(speed).lstrip("; ")
                if here and value is not None
                else ("--quick shapes" if quick and here else f"needs a run on {dev}"),
            )
        )

    imdb = next((p for p in result.get("prepare", []) if p["dataset"] == "imdb"), None)
    full = imdb is not None and imdb["items"] >= 50_000
    note = "" if full else ("--quick: 1K reviews" if imdb else "prepare section not run")
    t = imdb["prepare_s"] if full else None
    out.append(
        _target(
            "IMDB preparation of 50K reviews, time",
            f"< {TARGETS['imdb_prepare_s']:.0f} s",
            t,
            None if t is None else t < TARGETS["imdb_prepare_s"],
            "s",
            note or f"{result['environment']['cpu_count']} CPU cores",
        )
    )
    mb = imdb["prepared_mb"] if full else None
    out.append(
        _target(
            "IMDB prepared size on disk",
            f"< {TARGETS['imdb_prepared_mb']:.0f} MB",
            mb,
            None if mb is None else mb < TARGETS["imdb_prepared_mb"],
            "MB",
            note or f"dense float32 one-hot would take {imdb['dense_onehot_gb']:.1f} GB",
        )
    )

    out.append(memory_target(result))
    out.append(budget_target(result))

    snake = result.get("snakemake") or {}
    s = snake.get("seconds") if snake.get("status") == "ok" and snake.get("paper") else None
    out.append(
        _target(
            "snakemake -n of the paper config",
            f"< {TARGETS['snakemake_s']:.0f} s",
            s,
            None if s is None else s < TARGETS["snakemake_s"],
            "s",
            ""
            if s is not None
            else (
                snake.get("status") if snake.get("status", "ok") != "ok" else "not run on config/paper.yaml"
            ),
        )
    )
    return out


def device_floor(result: dict[str, Any]) -> str:
    """The profile section's device busy time of private/shared 50 % over the plain GRU's
    at the MNIST shape: the ratio with the host fully hidden, what a step cannot go below."""
    rows = {r["variant"]: r for r in result.get("profile", []) if r.get("shape") == "mnist"}
    ps, gru = rows.get("ps50"), rows.get("gru")
    if not ps or not gru or ps.get("status") != "ok" or gru.get("status") != "ok":
        return ""
    busy = ps["per_step"]["device_busy_ms"], gru["per_step"]["device_busy_ms"]
    if not busy[1]:
        return ""
    return (
        f"device busy time {busy[0]:.1f} / {busy[1]:.1f} ms = {busy[0] / busy[1]:.2f}x (profile: the floor)"
    )


def _peak(value: Any) -> str:
    return value if isinstance(value, str) else _n(value, 0)


def packed_hours(result: dict[str, Any]) -> dict[str, Any] | None:
    """The budget with `jobs` training jobs per GPU, from the packing section's measured
    speed-up at that many jobs: each experiment's hours / the speed-up of its dataset's
    shape (models up to PACKED_HIDDEN units; bigger ones alone). None without both sections."""
    b, rows = result.get("budget"), result.get("packing") or []
    ok = [r for r in rows if r.get("status") == "ok" and r.get("speedup")]
    if not b or not ok:
        return None
    # the config's jobs per GPU, or the most measured up to it (none set: the most measured)
    wanted = b.get("jobs_per_gpu") or max(r["jobs"] for r in ok)
    jobs = max((r["jobs"] for r in ok if r["jobs"] <= wanted), default=1)
    speedup = {r["shape"]: r["speedup"] for r in ok if r["jobs"] == jobs}
    per, total, disabled = {}, 0.0, 0.0
    for e in b["experiments"]:
        if e.get("hours") is None:
            continue
        f = speedup.get(e["dataset"], speedup.get(PACKING_PROXY.get(e["dataset"], ""), 1.0))
        f = f if e["hidden"] <= PACKED_HIDDEN else 1.0
        per[e["experiment"]] = e["hours"] / f
        if e["enabled"]:
            total += per[e["experiment"]]
        else:
            disabled += per[e["experiment"]]
    by_dataset: dict[str, float] = {}
    for e in b["experiments"]:
        if e["enabled"] and e["experiment"] in per:
            by_dataset[e["dataset"]] = by_dataset.get(e["dataset"], 0.0) + per[e["experiment"]]
    return {
        "jobs": jobs,
        "speedup": speedup,
        "experiments": per,
        "total_hours": total,
        "disabled_hours": disabled,
        "by_dataset": by_dataset,
    }


def budget_floor(result: dict[str, Any]) -> str:
    """Where the packed budget goes: each dataset's hours, the largest first, with its
    models' sizes and the packing speed-up they got (what a budget over its target is made of)."""
    packed, b = packed_hours(result), result.get("budget") or {}
    if packed is None or not packed["by_dataset"]:
        return ""
    parts = []
    for ds, hours in sorted(packed["by_dataset"].items(), key=lambda kv: -kv[1]):
        hidden = sorted(e["hidden"] for e in b["experiments"] if e["dataset"] == ds and e["enabled"])
        f = packed["speedup"].get(ds, packed["speedup"].get(PACKING_PROXY.get(ds, ""), 1.0))
        alone = all(h > PACKED_HIDDEN for h in hidden)
        parts.append(
            f"{ds} {hours:.1f} h ({hours / packed['total_hours']:.0%}; hidden {hidden[0]}-{hidden[-1]}"
            + ("; alone on the GPU" if alone else f"; packed {f:.2f}x")
            + ")"
        )
    return "; ".join(parts)


def budget_target(result: dict[str, Any]) -> dict[str, Any]:
    """config/paper.yaml's GPU hours with packing, measured on a GPU."""
    b = result.get("budget") or {}
    packed = packed_hours(result)
    here = result["environment"]["device"] == "cuda" and not result["quick"]
    paper = str(b.get("config", "")).endswith("config/paper.yaml") or b.get("config") == "paper.yaml"
    value = packed["total_hours"] if packed and here and paper else None
    if value is not None:
        note = f"{packed['jobs']} jobs per GPU; by dataset: {budget_floor(result)}"
    elif not here:
        note = "needs the budget and packing sections on a GPU"
    else:
        note = "needs the budget section of config/paper.yaml and the packing section"
    return _target(
        "GPU hours of config/paper.yaml, jobs sharing GPUs as measured",
        f"<= {TARGETS['paper_gpu_hours']:.0f} h",
        value,
        None if value is None else value <= TARGETS["paper_gpu_hours"],
        "h",
        note,
    )


def memory_target(result: dict[str, Any]) -> dict[str, Any]:
    """The largest peak memory over the budget's enabled experiments, on a GPU."""
    b = result.get("budget") or {}
    rows = [e for e in b.get("experiments", []) if e["enabled"]]
    failed = [e["experiment"] for e in rows if isinstance(e.get("longest_batch_peak_mb"), str)]
    peaks = [(e["peak_mb"], e["experiment"]) for e in rows if isinstance(e.get("peak_mb"), float)]
    gpu = result["environment"]["device"] == "cuda" and not result["quick"]
    value = max(peaks)[0] / 1024 if peaks and gpu and not failed else None
    note = (
        f"failed: {', '.join(failed)}"
        if failed
        else f"largest: {max(peaks)[1]} ({b.get('config')})"
        if value is not None
        else "needs the budget section on a GPU"
    )
    return _target(
        "peak GPU memory of every experiment (longest text batch under max_tokens)",
        f"<= {TARGETS['peak_gib']:.0f} GiB",
        value,
        None if value is None else value <= TARGETS["peak_gib"] and not failed,
        "GiB",
        note,
    )


# --- merging parts -------------------------------------------------------------------------


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
    out["load_average"] = {
        **new["load_average"],
        "earlier_parts": [
            *old.get("load_average", {}).get("earlier_parts", []),
            {k: v for k, v in old.get("load_average", {}).items() if k != "earlier_parts"},
        ],
    }
    out["total_s"] = new["total_s"] + old.get("total_s", 0.0)
    out["errors"] = {**{k: v for k, v in old.get("errors", {}).items() if k in kept}, **new.get("errors", {})}
    out["targets"] = targets(out)
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
        out += [
            "**--quick: tiny shapes and 1–2 repeats; checks that the benchmark runs, "
            "the numbers mean nothing.**",
            "",
        ]
    out += [
        f"`{result['command']}`",
        "",
        f"psrnn {env['psrnn_version']}, torch {env['torch_version']}, CUDA {env['cuda_version']}, "
        f"cuDNN {env['cudnn_version']}, Python {env['python']}, {env['platform']}; "
        f"{env['cpu_count']} CPUs ({env['cpu_model']}), {env['torch_threads']} torch threads"
        + (f", {env['gpu_memory_gb']} GiB GPU memory" if env["gpu_memory_gb"] else "")
        + ".",
        "Load average (1, 5, 15 min) at start / end: "
        + "; ".join(
            f"{la['start']} / {la['end']}"
            for la in [*result["load_average"].get("earlier_parts", []), result["load_average"]]
        )
        + ".",
    ]
    out += [f"Note: {n}" for n in result["notes"]]
    out += [f"**Section {name} failed:** {msg}" for name, msg in result.get("errors", {}).items()]
    out += [
        "",
        "## Targets",
        "",
        table(
            ["target", "threshold", "measured", "status", "note"],
            [
                [
                    t["target"],
                    t["threshold"],
                    "–" if t["measured"] is None else f"{t['measured']:.2f} {t['unit']}",
                    f"**{t['status']}**",
                    t["note"],
                ]
                for t in result["targets"]
            ],
        ),
    ]

    if result.get("train"):
        out += [
            "",
            "## Training step",
            "",
            f"One optimizer step of `training.train_epoch` (batch gather, forward, CE + aux loss, "
            f"backward, clip, SGD + warm restarts): hidden {st['hidden']}, batch {st['batch']}, "
            f"{st['anchors']} anchors, window {st['window']}, tasks {'+'.join(st['tasks'])}; "
            f"{st['warmup']} warm-up steps, then median (min–max) of {st['repeats']} steps "
            f"(wall clock; CPU ms = process CPU time, all threads). "
            f"Peak memory: {result['memory_method']}.",
            "",
            table(
                ["shape", "model", "T x F", "batch", "step ms", "CPU ms", "samples/s", "peak MB", "params"],
                [
                    [
                        r["shape"],
                        VARIANT_LABELS[r["variant"]],
                        f"{r['seq_len']} x {r['features']}",
                        r["batch"],
                        *_step_cells(r, cpu=True),
                        _n(r.get("params")),
                    ]
                    for r in result["train"]
                ],
            ),
        ]
    if result.get("ratios"):
        out += [
            "",
            "Ratios of step times: median, range [min/max, max/min] over the repeats, and "
            "the ratio of median process CPU times.",
            "",
            table(
                ["shape", "ratio", "median", "range", "CPU-time ratio"],
                [
                    [
                        r["shape"],
                        ("aux overhead " if r["kind"] == "aux_overhead" else "speed-up ")
                        + f"{r['numerator']} / {r['denominator']}",
                        f"{r['median']:.2f}x",
                        f"{r['min']:.2f}–{r['max']:.2f}",
                        "–" if r.get("cpu_median") is None else f"{r['cpu_median']:.2f}x",
                    ]
                    for r in result["ratios"]
                ],
            ),
        ]
    if result.get("options"):
        base = {(r["shape"], r["variant"]): r for r in result.get("train", [])}
        rows = []
        for r in result["options"]:
            b = base.get((r["shape"], r["variant"]))
            rel = "–"
            if b and r.get("status") == "ok" and b.get("status") == "ok":
                rel = (
                    f"{r['step_ms']['median'] / b['step_ms']['median']:.2f}x / "
                    f"{r['step_cpu_ms']['median'] / b['step_cpu_ms']['median']:.2f}x"
                )
            first = f"{r['first_step_ms'] / 1e3:.1f}" if r.get("status") == "ok" else "–"
            rows.append(
                [
                    f"{r['option']} = {r['value']}",
                    r["shape"],
                    VARIANT_LABELS[r["variant"]],
                    r["batch"],
                    *_step_cells(r, cpu=True),
                    rel,
                    first,
                ]
            )
        out += [
            "",
            "## Options",
            "",
            "Step time relative to the same model in the table above, "
            "wall clock / process CPU time (batch rows: compare samples/s); first step s = "
            "warm-up incl. compilation.",
            "",
            table(
                [
                    "option",
                    "shape",
                    "model",
                    "batch",
                    "step ms",
                    "CPU ms",
                    "samples/s",
                    "peak MB",
                    "vs default",
                    "first step s",
                ],
                rows,
            ),
        ]
    if result.get("packing"):
        out += [
            "",
            "## Several jobs on one device",
            "",
            "Private/shared 50 % training jobs started together (`speed.bench_packing`), each in its "
            "own process with its own threads; speed-up = all jobs' samples/s over one job's alone.",
            "",
            table(
                [
                    "shape",
                    "jobs",
                    "threads each",
                    "step ms each",
                    "samples/s (all)",
                    "speed-up",
                    "peak MB each",
                ],
                [
                    [
                        r["shape"],
                        r["jobs"],
                        r["threads"],
                        _n(r["step_ms"]),
                        _n(r["samples_per_s"], 0),
                        "–" if r["speedup"] is None else f"{r['speedup']:.2f}x",
                        _n(r["peak_mem_mb"], 0),
                    ]
                    if r["status"] == "ok"
                    else [r["shape"], r["jobs"], r["threads"], r["status"], "", "", ""]
                    for r in result["packing"]
                ],
            ),
        ]
    if result.get("profile"):
        out += profile_markdown(result["profile"])
    if result.get("prepare"):
        out += [
            "",
            "## Data preparation",
            "",
            "Generated look-alike archives of full size, then the real `prepare` "
            "(`psrnn.data.prepare.prepare`) on them; time of `prepare` alone.",
            "",
            table(
                [
                    "dataset",
                    "items",
                    "generate s",
                    "prepare s",
                    "archive MB",
                    "prepared MB",
                    "kept (train/valid/test)",
                    "dense float32 one-hot",
                ],
                [
                    [
                        p["dataset"],
                        _n(p["items"]),
                        _n(p["generate_s"]),
                        f"**{p['prepare_s']:.1f}**",
                        _n(p["raw_mb"]),
                        f"**{p['prepared_mb']:.1f}**",
                        "/".join(str(p["counts"][s]) for s in ("train", "valid", "test")),
                        "–"
                        if p["dense_onehot_gb"] is None
                        else f"{p['dense_onehot_gb']:.1f} GB ragged, "
                        f"{p['dense_padded_onehot_gb']:.0f} GB padded",
                    ]
                    for p in result["prepare"]
                ],
            ),
        ]
    if result.get("budget"):
        b = result["budget"]
        unit = b["unit"]
        packed = packed_hours(result)
        rows = [
            [
                e["experiment"] + ("" if e["enabled"] else " (disabled)"),
                e["dataset"],
                f"{e['seq_len']} x {e['features']}",
                e["hidden"],
                e["shared_units"],
                e["batch"],
                _n(e.get("step_ms"), 0),
                _n(None if e["epoch_s"] is None else e["epoch_s"] / 60),
                "–" if e.get("runs") is None else f"{e['grid_points']} + {e['runs'] - e['grid_points']}",
                e["max_epochs"],
                _n(e["hours"]) if e["status"] == "ok" else e["status"],
                _n((packed or {}).get("experiments", {}).get(e["experiment"])),
                _peak(e.get("peak_mb")),
                _peak(e.get("longest_batch_peak_mb")),
            ]
            for e in b["experiments"]
        ]
        out += [
            "",
            "## Compute budget",
            "",
            f"**{b['config']}: {b['total_hours']:,.0f} {unit}** at the max_epochs cap"
            + (f" (+ {b['disabled_hours']:,.0f} for disabled datasets)" if b["disabled_hours"] else "")
            + f". {b['method']}."
            + (
                ""
                if packed is None
                else f" **With {packed['jobs']} jobs per GPU: {packed['total_hours']:,.0f} {unit}**"
                + (f" (+ {packed['disabled_hours']:,.0f} disabled)" if packed["disabled_hours"] else "")
                + f": each experiment's hours / the measured speed-up of its shape (packing section; "
                f"models over {PACKED_HIDDEN} units alone). By dataset: {budget_floor(result)}."
            ),
            "",
            table(
                [
                    "experiment",
                    "dataset",
                    "T x F",
                    "hidden",
                    "shared",
                    "batch",
                    "step ms",
                    "epoch min",
                    "runs (search + final)",
                    "epochs cap",
                    unit,
                    "packed",
                    "peak MB",
                    "longest batch MB",
                ],
                rows,
            ),
        ]
    if result.get("snakemake"):
        s = result["snakemake"]
        out += [
            "",
            "## Workflow",
            "",
            f"`{s['command']}`: "
            + (f"{s['seconds']:.1f} s, {s['jobs']} jobs" if s["status"] == "ok" else s["status"]),
        ]
    return "\n".join(out) + "\n"


def profile_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The profile section: per-step counts, then each measurement's top operators."""
    ok = [r for r in rows if r.get("status") == "ok"]
    counts = [
        [
            r["shape"],
            VARIANT_LABELS[r["variant"]],
            _n(r["per_step"]["wall_ms"]),
            _n(r["per_step"]["device_busy_ms"]),
            *[_n(r["per_step"][k], 0) for k in PROFILE_COUNTS],
        ]
        for r in ok
    ]
    out = [
        "",
        "## Profile",
        "",
        "Per training step, from torch.profiler (`bench.profile`): wall time under the profiler, "
        "device busy time, and counts of device kernels, host-to-device copies (pageable: the host "
        "waits), synchronisations, `.item()` reads, aten operator calls and kernel launches.",
        "",
        table(["shape", "model", "wall ms", "device ms", *PROFILE_COUNTS.values()], counts),
    ]
    for r in ok:
        out += [
            "",
            f"{r['shape']}, {VARIANT_LABELS[r['variant']]}: top operators by {r['top_by']} per step",
            "",
            table(
                ["operator", "calls", "ms"],
                [[f"`{t['op']}`", _n(t["calls_per_step"]), _n(t["self_ms_per_step"], 2)] for t in r["top"]],
            ),
        ]
    out += [f"- {r['shape']} {r['variant']}: {r.get('status')}" for r in rows if r.get("status") != "ok"]
    return out


PROFILE_COUNTS = {
    "device_kernels": "kernels",
    "h2d_copies": "H2D",
    "h2d_pageable": "pageable",
    "d2h_copies": "D2H",
    "syncs": "syncs",
    "item_reads": "item",
    "aten_ops": "aten ops",
    "kernel_launches": "launches",
}
