"""The H200 budgets of this folder with paper.yaml's learning-rate grid of 4 points.

    uv run python results/bench/graphs/grid4.py     # -> grid4-budgets.json, grid4-budgets.md

The budgets here were measured (or recomputed from measured step times) with the grid
0.1 / 0.3 / 1. paper.yaml now searches 0.1 / 0.3 / 1 / 3 (its header says why). A budget
times every run to its epoch cap, so each searched experiment's search hours grow by 4/3
and nothing else changes: its final runs, the unsearched experiments and the step times
stay. `psrnn bench --only budget --times-from` cannot redo them: since they were measured,
the IMDB rows' decoders are teacher-forced, a shape these files hold no time for (a
teacher-forced step costs less, so the IMDB hours are an upper bound).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUDGETS = {  # config -> the stored budget (3-point grid)
    "quick.yaml": "quick-budget-h200.json",
    "quick.yaml, eager": "quick-budget-eager-h200.json",
    "quick-3seeds.yaml": "quick-3seeds-budget-h200.json",
    "paper.yaml": "paper-budget-h200.json",
    "paper.yaml, eager": "paper-budget-eager-h200-recomputed.json",
}
POINTS = 4


def widened(budget: dict) -> dict:
    exps = [e for e in budget["experiments"] if e["enabled"]]
    search = sum(e["search_hours"] * (POINTS / e["grid_points"] if e["grid_points"] else 1) for e in exps)
    final = sum(e["final_hours"] for e in exps)
    runs = sum(e["runs"] + (POINTS - e["grid_points"] if e["grid_points"] else 0) for e in exps)
    return {
        "total_hours": round(search + final, 2),
        "search_hours": round(search, 2),
        "final_hours": round(final, 2),
        "runs": runs,
        "was_total_hours": round(budget["total_hours"], 2),
        "was_runs": sum(e["runs"] for e in exps),
    }


def main() -> None:
    out = {
        name: {"from": f"results/bench/graphs/{f}", **widened(json.loads((HERE / f).read_text())["budget"])}
        for name, f in BUDGETS.items()
    }
    (HERE / "grid4-budgets.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    lines = [
        "# H200 budgets with paper.yaml's 4-point learning-rate grid",
        "",
        "`uv run python results/bench/graphs/grid4.py` (no GPU: arithmetic on the stored budgets;",
        "its docstring says why they cannot be re-timed). Each searched experiment's search",
        "hours x 4/3; final runs and step times unchanged. Hours at the epoch caps.",
        "",
        "| config | stored budget | runs then | H200-hours then | runs now | H200-hours now |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, b in out.items():
        lines.append(
            f"| {name} | `{Path(b['from']).name}` | {b['was_runs']} | {b['was_total_hours']:.1f} | "
            f"{b['runs']} | **{b['total_hours']:.1f}** |"
        )
    (HERE / "grid4-budgets.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
