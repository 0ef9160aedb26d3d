"""The benchmark's result: its sections, merging of parts, and its Markdown.

    python -m psrnn bench --only budget --merge    # redo one section, keep the others' numbers

The result is one JSON object per device (results/bench/<device slug>.json, keys below);
`to_markdown` renders it beside it (.md), the targets (psrnn.bench.goals) first: each is
met, not met or not measured.
"""

from __future__ import annotations

from typing import Any

from psrnn.bench.fused import KINDS, fused_markdown
from psrnn.bench.goals import (  # noqa: F401 (re-exports: the targets live in psrnn.bench.goals)
    PACKED_HIDDEN,
    TARGETS,
    budget_floor,
    budget_target,
    memory_target,
    packed_hours,
    targets,
)
from psrnn.bench.speed import VARIANT_LABELS
from psrnn.bench.stored import when
from psrnn.errors import UserError

SECTIONS = ("train", "options", "graphs", "packing", "profile", "prepare", "budget", "snakemake", "fused")
SCHEMA = "psrnn-bench/1"
# what each section adds to the result; train's settings and memory method go with its table
SECTION_KEYS = {
    "train": ("train", "ratios", "settings", "memory_method"),
    "options": ("options",),
    "graphs": ("graphs",),
    "packing": ("packing",),
    "profile": ("profile",),
    "prepare": ("prepare",),
    "budget": ("budget",),
    "snakemake": ("snakemake",),
    "fused": ("fused",),
}


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
    if old.get("fused") and new.get("fused"):  # fused: a kind measured again replaces its row only
        again = {r["kind"] for r in new["fused"]["kinds"]}
        rows = [r for r in old["fused"]["kinds"] if r["kind"] not in again] + new["fused"]["kinds"]
        out["fused"] = {**new["fused"], "kinds": sorted(rows, key=lambda r: list(KINDS).index(r["kind"]))}
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


def _hours(value: float) -> str:
    """A budget's hours: one decimal below 100 (a 6-hour target needs it), whole above."""
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def _peak(value: Any) -> str:
    return value if isinstance(value, str) else _n(value, 0)


def _step_cells(r: dict[str, Any], cpu: bool = False) -> list[str]:
    if r.get("status") != "ok":
        return [r.get("status", "?"), *["–"] * (3 if cpu else 2)]
    s = r["step_ms"]
    cells = [f"{s['median']:,.1f} ({s['min']:,.1f}–{s['max']:,.1f})"]
    if cpu:
        cells.append(_n(r["step_cpu_ms"]["median"]))
    return cells + [_n(r["samples_per_s"], 0), _n(r["peak_mem_mb"], 0)]


def graphs_table(rows: list[dict[str, Any]]) -> list[str]:
    """The graphs section: each model's step graphed and eager, the speed-up, and whether
    both trained the same parameters."""
    lines = []
    for on, off in zip(rows[0::2], rows[1::2]):
        speedup = "–"
        if on.get("status") == "ok" and off.get("status") == "ok":
            speedup = f"{off['step_ms']['median'] / on['step_ms']['median']:.2f}x"
        same = {True: "yes", False: "**no**", None: "–"}[off.get("same_params_as_graphed")]
        model = VARIANT_LABELS[on["variant"]]
        lines.append(
            [on["shape"], model, on["decoders"], _step_cells(off)[0], _step_cells(on)[0], speedup, same]
        )
    return [
        "",
        "## CUDA graphs",
        "",
        "The same training steps (same seed, data and schedule) eager and with each piece's "
        "forward and backward replayed as CUDA graphs (RunConfig.cuda_graphs, "
        "`epoch.GraphedPieces`); step ms median (min–max); same parameters = the trained "
        "parameters' bytes are identical after the last step.",
        "",
        table(
            ["shape", "model", "decoders", "eager step ms", "graphed step ms", "speed-up", "same parameters"],
            lines,
        ),
    ]


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
    ]
    if result.get("recomputed"):  # --times-from: the machine above is where the times were measured
        r, src = result["recomputed"], result["budget"]["times_from"]
        out += [
            "",
            f"**Nothing was measured for this file.** The budget below was recomputed on "
            f"{r['date']} (code {r['commit']}) from the step and validation-batch times stored in "
            f"`{src['file']}`: measured on the machine above ({when(src)}) for `{src['config']}` by "
            f"`{src['command']}`.",
        ]
        out += [f"Note of the stored result: {n}" for n in src["notes"]]
    else:
        if result.get("measured_at"):
            m = result["measured_at"]
            out.append(f"Measured {m['date']}, code {m['commit']}.")
        out.append(
            "Load average (1, 5, 15 min) at start / end: "
            + "; ".join(
                f"{la['start']} / {la['end']}"
                for la in [*result["load_average"].get("earlier_parts", []), result["load_average"]]
            )
            + "."
        )
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
            f"One optimizer step of `epoch.train_epoch` (batch gather, forward, CE + aux loss, "
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
    if result.get("graphs"):
        out += graphs_table(result["graphs"])
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
            "(`psrnn.studies.private_shared.data.prepare.prepare`) on them; time of `prepare` alone.",
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
            f"**{b['config']}: {_hours(b['total_hours'])} {unit}** at the max_epochs cap"
            + (f" (+ {_hours(b['disabled_hours'])} for disabled datasets)" if b["disabled_hours"] else "")
            + f". {b['method']}."
            + (
                ""
                if packed is None
                else f" **With {packed['jobs']} jobs per GPU: {_hours(packed['total_hours'])} {unit}**"
                + (f" (+ {_hours(packed['disabled_hours'])} disabled)" if packed["disabled_hours"] else "")
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
    if result.get("fused"):
        out += fused_markdown(result["fused"], table)
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
