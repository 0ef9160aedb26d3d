"""The budget section from stored times: `bench --only budget --times-from FILE`.

    python -m psrnn bench --only budget --config config/quick.yaml \\
        --times-from results/bench/cuda-nvidia-h100-80gb-hbm3-quick-budget.json \\
        --name cuda-nvidia-h100-80gb-hbm3-quick-budget-search

Nothing is measured: each experiment's step and validation-batch times are read from an
earlier bench result (FILE, the JSON `bench` wrote) at the experiment's shapes, and the
budget's own arithmetic (`budget.budget_hours`) turns them into runs, epochs and hours
for the config as it is now (its seeds, grid points, max_epochs, split sizes). An
experiment whose shapes FILE did not measure is an error naming it: measure it with
`bench --device cuda --only budget` instead (no mixing of stored and new times).

How shapes are matched:
- results written since the budget records its measured shapes (`budget.shapes`): every
  field of `budget.SHAPE_FIELDS` must be equal (dataset, sequence length, features, hidden,
  shared fraction, tasks, anchors, window, batch, embedding, decoder, head, longest text,
  max_tokens);
- older results record one entry per experiment with some of those fields: the entry of
  the same experiment name, with every field it records equal to the config's
  (`LEGACY_FIELDS`); its validation-batch time is solved from its epoch time. The fields
  it does not record (tasks, anchors, window, ...) are taken to be those of the experiment
  of that name when it was measured, and the output says so.

The result keeps the source's environment (the device the times are from) and names the
source file, its device, the config and command it measured, and when: the date and
commit the file records (`measured_at`, written by bench since it was added), else the
last git commit that changed the file.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.bench.budget import ARITHMETIC, SHAPE_FIELDS, budget_hours, budget_shapes, shape_key
from psrnn.errors import UserError
from psrnn.files import read_json

# The shape fields an older result's experiment entries record (longest and max_tokens
# only since the token budget); the rest of SHAPE_FIELDS are not in it.
LEGACY_FIELDS = ("dataset", "seq_len", "features", "hidden", "shared_units", "batch", "longest", "max_tokens")
MEASURED_KEYS = ("step_s", "eval_batch_s", "peak_mb", "longest_batch_peak_mb", "timed_lengths", "timed_batch")


def load_times(path: Path) -> dict[str, Any]:
    """A stored bench result with a budget section (else a one-line error)."""
    if not path.is_file():
        raise UserError(f"--times-from {path}: no such file")
    try:
        data = read_json(path)
    except ValueError as err:
        raise UserError(f"--times-from {path}: not JSON ({err})") from None
    b = data.get("budget") if isinstance(data, dict) else None
    if not b or not b.get("experiments"):
        raise UserError(f"--times-from {path}: no budget section (run `bench --only budget` to make one)")
    return data


def last_commit(path: Path) -> dict[str, Any] | None:
    """The last git commit that changed `path` (short hash, ISO date), and whether the file
    differs from it now; None outside git or for a file git does not track."""
    git = ["git", "-C", str(C.ROOT)]
    try:
        out = subprocess.run(
            [*git, "log", "-1", "--format=%h %cI", "--", str(path.resolve())],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
        if len(out) != 2:
            return None
        changed = subprocess.run(
            [*git, "diff", "--quiet", "HEAD", "--", str(path.resolve())], capture_output=True, timeout=10
        ).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": out[0], "date": out[1], "modified_since": changed == 1}


def provenance(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Where and when the stored times were measured, as far as the file (and git) tell."""
    env = data.get("environment") or {}
    return {
        "file": str(path),
        "device": env.get("device"),
        "device_name": env.get("device_name"),
        "device_slug": env.get("device_slug"),
        "torch_version": env.get("torch_version"),
        "cuda_version": env.get("cuda_version"),
        "config": data["budget"].get("config"),
        "command": data.get("command"),
        "notes": list(data.get("notes") or []),
        "measured_at": data.get("measured_at"),  # {"date", "commit"} where bench recorded it
        "committed": last_commit(path),
    }


def when(src: dict[str, Any]) -> str:
    """The provenance's date and commit in words."""
    m, c = src.get("measured_at"), src.get("committed")
    if m:
        return f"measured {m.get('date')} at commit {m.get('commit')}"
    if c:
        return (
            f"the file records no date or commit; measured before {c['date']}, when commit "
            f"{c['commit']} last changed it"
            + (" (changed since, uncommitted)" if c["modified_since"] else "")
        )
    return "the file records no date or commit, and git has no history of it"


def _diff(row: dict[str, Any], entry: dict[str, Any], fields: tuple[str, ...]) -> list[str]:
    def norm(v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v

    return [
        f"{k} {norm(row[k])} here, {norm(entry[k])} there"
        for k in fields
        if k in entry and norm(entry[k]) != norm(row[k])
    ]


def stored_times(
    data: dict[str, Any], rows: list[dict[str, Any]]
) -> tuple[dict[tuple, dict[str, Any]], str, str, dict[str, str]]:
    """(times by shape_key, clock, how they were matched, {experiment: why not found}) for
    the config's budget rows from a stored result's budget section."""
    b = data["budget"]
    by_name = {e["experiment"]: e for e in b["experiments"]}
    measured: dict[tuple, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    if b.get("shapes"):
        table = {shape_key(s): s for s in b["shapes"] if s.get("status") == "ok"}
        clocks = {s.get("clock", "step_ms") for s in b["shapes"]}
        for row in rows:
            s = table.get(shape_key(row))
            if s is not None:
                measured[shape_key(row)] = {k: s[k] for k in MEASURED_KEYS} | {"status": "ok"}
                continue
            same = [x for x in b["shapes"] if row["experiment"] in x.get("experiments", [])]
            why = "; ".join(_diff(row, same[0], SHAPE_FIELDS)) if same else "no measurement at its shapes"
            if same and same[0].get("status") != "ok":
                why = f"measured there with status {same[0].get('status')}"
            missing.setdefault(row["experiment"], why)
        match = "every shape field equal (" + ", ".join(SHAPE_FIELDS) + ")"
        return measured, "/".join(sorted(clocks)), match, missing

    recorded: set[str] = set()
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["experiment"], []).append(row)
    for name, group in groups.items():
        e = by_name.get(name)
        if e is None:
            missing[name] = "no experiment of that name (the file records no shapes, only experiments)"
            continue
        if len({shape_key(r) for r in group}) > 1:
            missing[name] = "its grid points differ in shape; the file has one time per experiment"
            continue
        diffs = _diff(group[0], e, LEGACY_FIELDS)
        if diffs:
            missing[name] = "; ".join(diffs)
            continue
        if e.get("status") != "ok" or e.get("step_ms") is None or e.get("epoch_s") is None:
            missing[name] = f"measured there with status {e.get('status')}"
            continue
        recorded |= {k for k in LEGACY_FIELDS if k in e}
        step_s = e["step_ms"] / 1e3
        # epoch_s = steps x step + evals x validation batch (the arithmetic that wrote it)
        steps, evals = math.ceil(e["train_n"] / e["batch"]), math.ceil(e["valid_n"] / e["batch"])
        measured.setdefault(
            shape_key(group[0]),
            {
                "step_s": step_s,
                "eval_batch_s": (e["epoch_s"] - steps * step_s) / evals,
                "peak_mb": e.get("peak_mb"),
                "longest_batch_peak_mb": e.get("longest_batch_peak_mb"),
                "timed_lengths": e.get("timed_lengths"),
                "timed_batch": e.get("timed_batch"),
                "status": "ok",
            },
        )
    clocks = {e.get("clock", "step_ms") for e in b["experiments"] if e.get("status") == "ok"}
    unrecorded = [k for k in SHAPE_FIELDS if k not in recorded and k != "input"]
    match = (
        "the experiment of the same name, with every shape field the file records equal ("
        + ", ".join(k for k in LEGACY_FIELDS if k in recorded)
        + "); the file predates recorded shapes, so "
        + ", ".join(unrecorded)
        + " are those of that experiment when it was measured; validation-batch time = "
        "(epoch - ceil(train/B) steps) / ceil(valid/B), from its own train, valid and B"
    )
    return measured, "/".join(sorted(clocks)) or "step_ms", match, missing


def budget_from_file(suite: dict[str, Any], path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The budget section of `suite` with the times stored in `data` (read from `path`)."""
    rows = budget_shapes(suite)
    measured, clock, match, missing = stored_times(data, rows)
    if missing:
        raise UserError(
            f"--times-from {path} has no times at the shapes of {len(missing)} experiment(s): "
            + "; ".join(f"{name} ({why})" for name, why in missing.items())
            + " (measure them on a GPU: bench --device cuda --only budget, without --times-from)"
        )
    b = budget_hours(suite, rows, measured, clock)
    src = provenance(path, data)
    b["times_from"] = {**src, "match": match}
    what = "process CPU time, one thread" if clock == "step_cpu_ms" else "wall clock"
    b["method"] = (
        f"nothing measured here: step ({what}) and validation-batch times read from {path} "
        f"({src['device_name']}, torch {src['torch_version']}; {when(src)}; it measured "
        f"{src['config']}), at each experiment's shapes: {match}; peak memory as measured there; "
        + ARITHMETIC
    )
    return b
