"""The REPORT sections every study writes alike: the run time, the grid-search size, the
notes beside the report, and the commits and machines the runs were made on (the
Provenance section of each study's REPORT.md).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from psrnn import config as C
from psrnn.report import fmt
from psrnn.report.collect import Suite


def machine_text(m: dict[str, Any]) -> str:
    """Where a run ran, from its metrics.json: 'AMD EPYC (cpu), torch 2.14.1+cu130' (and its
    CUDA version where it ran on CUDA)."""
    out = f"{m.get('device_name') or m.get('device') or 'unknown'} ({m.get('device') or '?'})"
    out += f", torch {m.get('torch_version') or m.get('torch') or '?'}"
    return out + (f", CUDA {m['cuda_version']}" if m.get("cuda_version") else "")


def hours(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Summed wall time in hours per device type ("cuda" -> GPU, "cpu" -> CPU). A final run
    that took its search run's record (metrics.json's reused_from) trained nothing: its
    wall time is the search run's, counted there, so it is left out."""
    out: dict[str, float] = defaultdict(float)
    for m in metrics:
        if not m.get("reused_from"):
            out[str(m.get("device") or "unknown")] += float(m.get("wall_time_s") or 0.0) / 3600.0
    return dict(sorted(out.items()))


def reused_note(metrics: list[dict[str, Any]]) -> str:
    """What the compute line says of the final runs `hours` leaves out ("" for none)."""
    n = sum(1 for m in metrics if m.get("reused_from"))
    if not n:
        return ""
    runs, their = ("runs", "their") if n != 1 else ("run", "its")
    return f" ({n} final {runs} reused {their} search run's record: counted in the search)"


def _hours_text(h: dict[str, float]) -> str:
    names = {"cuda": "GPU", "cpu": "CPU"}
    return ", ".join(f"{v:.2f} h on {names.get(k, k)}" for k, v in h.items()) or "none"


def run_time_line(final: list[dict[str, Any]], search: list[dict[str, Any]]) -> str:
    """Provenance's run-time line: each finished run's wall clock, summed per
    device. Runs that shared a machine each count in full, so this is no machine time."""
    total = sum(hours(final + search).values())
    return (
        "- Run time (each finished run's wall clock, summed; runs that shared a machine count in full): "
        f"final runs {_hours_text(hours(final))}; grid search {_hours_text(hours(search))}; "
        f"total {total:.2f} h{reused_note(final)}"
    )


def search_points(s: Suite) -> int:
    """The grid points of the suite's enabled experiments: its grid-search runs."""
    return sum(len(C.grid_points(s.cfg["experiments"][e])) for e in s.experiments if C.has_grid(s.cfg, e))


def notes_lines(s: Suite) -> list[str]:
    """Provenance's pointer to the notes beside the report: how its runs were
    made, by which command and where ([] when there are none)."""
    if not s.notes:
        return []
    return [
        "- How the runs were made (commands, machine, time): " + ", ".join(f"[{n}]({n})" for n in s.notes)
    ]


def tally_lines(commits: Counter[str], machines: Counter[str]) -> list[str]:
    """Provenance's "Commits" and "Machines" lines: each with its number of runs."""
    return [
        "- Commits: "
        + (", ".join(f"`{c}` ({fmt.plural(n, 'run')})" for c, n in sorted(commits.items())) or "none"),
        "- Machines: "
        + ("; ".join(f"{m} ({fmt.plural(n, 'run')})" for m, n in sorted(machines.items())) or "none"),
    ]
