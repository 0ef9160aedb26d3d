"""The project's benchmark targets (TARGETS) and whether a benchmark result meets them:
each is met, not met or not measured, with the measured value and a note.

    python -m psrnn bench            # results/bench/<device slug>.{json,md}, targets included

`targets` reads a result's sections (train ratios, prepare, budget with packing,
snakemake); psrnn.bench.report renders them first in the Markdown.
"""

from __future__ import annotations

from typing import Any

TARGETS = {
    "aux_overhead": 1.2,  # ps50 / plain GRU step time at the MNIST shape
    "speedup_cuda": 20.0,  # naive / ours
    "speedup_cpu": 5.0,
    "imdb_prepare_s": 60.0,
    "imdb_prepared_mb": 100.0,
    "snakemake_s": 10.0,
    "peak_gib": 16.0,  # every experiment's largest batch, training and evaluation
    "paper_gpu_hours": 48.0,  # config/paper.yaml, with jobs sharing a GPU as measured
    "fused_speedup": 8.0,  # relreg runs per CPU-hour, train-group / one process per run, every kind
}
# packing: the bench measures hidden-128 jobs; bigger models are counted unpacked, and a
# dataset without its own packing row takes the one of the same kind of input
PACKED_HIDDEN = 256
PACKING_PROXY = {"fmnist": "mnist", "dbpedia": "imdb"}


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
    full = imdb if imdb is not None and imdb["items"] >= 50_000 else None  # not --quick's 1K
    note = "" if full else ("--quick: 1K reviews" if imdb else "prepare section not run")
    t = full["prepare_s"] if full else None
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
    mb = full["prepared_mb"] if full else None
    out.append(
        _target(
            "IMDB prepared size on disk",
            f"< {TARGETS['imdb_prepared_mb']:.0f} MB",
            mb,
            None if mb is None else mb < TARGETS["imdb_prepared_mb"],
            "MB",
            f"dense float32 one-hot would take {full['dense_onehot_gb']:.1f} GB" if full else note,
        )
    )

    out.append(memory_target(result))
    out.append(budget_target(result))
    out.append(fused_target(result))

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
            else (snake["status"] if snake.get("status", "ok") != "ok" else "not run on config/paper.yaml"),
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
    if value is not None and packed is not None:
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


def fused_target(result: dict[str, Any]) -> dict[str, Any]:
    """Fused runs per CPU-hour over one process per run, the worst of the relreg kinds
    (all four measured: psrnn.bench.fused.KINDS)."""
    name = "relreg runs per CPU-hour, fused / one process per run, every model kind"
    rows = [r for r in (result.get("fused") or {}).get("kinds", []) if r.get("status") == "ok"]
    kinds = {r["kind"] for r in rows}
    why = (
        "--quick settings"
        if result["quick"]
        else "fused section not run"
        if not result.get("fused")
        else ""
        if kinds >= {"lstm", "proto", "rmc", "transformer"}
        else f"measured only {', '.join(sorted(kinds)) or 'none'}"
    )
    if why:
        return _target(name, f">= {TARGETS['fused_speedup']:.0f}x", None, None, "x", why)
    worst = min(rows, key=lambda r: r["ratio"]["cpu_s"])
    value = worst["ratio"]["cpu_s"]
    note = "; ".join(
        f"{r['kind']} {r['ratio']['cpu_s']:.1f}x (wall {r['ratio']['wall_s']:.1f}x)" for r in rows
    )
    return _target(
        name, f">= {TARGETS['fused_speedup']:.0f}x", value, value >= TARGETS["fused_speedup"], "x", note
    )
