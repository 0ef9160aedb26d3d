"""REPORT.md's selections beside another relreg suite's: how the choice moved with the grid.

A suite config's `compare_with: <file in config/>` (config/relreg-full.yaml:
`compare_with: relreg.yaml`) names the suite to compare with. For every experiment both
suites have, one row gives:
- each suite's grid size, selected point and how many points tied at 100 % validation;
- the test sequence accuracy of each suite's final runs (mean over seeds) at the thesis'
  longest length.

The other suite's committed results are read as its own compile reads them (every run
checked, psrnn.results.collect.suite_run).
"""

from __future__ import annotations

from typing import Any

from psrnn import config as C
from psrnn.relreg.collect import RelRegSuite, gather, per_length, tied_points
from psrnn.results import fmt

LENGTH = 14  # bits: the thesis' longest test length (Table 4.5)


def longest(bits: list[int]) -> int:
    """The length a verdict reads: the thesis' LENGTH where it was tested, else the longest."""
    return LENGTH if LENGTH in bits else max(bits, default=LENGTH)


def other_suite(s: RelRegSuite) -> RelRegSuite | None:
    """The suite `compare_with` names, gathered from its results folder; None when unset."""
    name = s.cfg.get("compare_with")
    if not name:
        return None
    cfg = C.load_suite(C.ROOT / "config" / name)
    return gather(cfg, s.reference, C.ROOT / C.results_root(cfg))


def compare_lines(s: RelRegSuite) -> list[str]:
    """The section's lines ([] without `compare_with`)."""
    o = other_suite(s)
    if o is None:
        return []
    me, them = s.cfg["name"], o.cfg["name"]
    lines = [
        f"### Selection: config {me} against config {them}",
        "",
        f"Each experiment that both configs have: its grid, the selected point, and how many "
        f"points tied at 100 % validation sequence accuracy. Then the test sequence accuracy at "
        f"{LENGTH} bits, the mean over the final runs' seeds.",
        "",
        f"| Experiment | {them} points | {them} selected | {them} tied | {me} points "
        f"| {me} selected | {me} tied | Same point | {them} {LENGTH} bits % | {me} {LENGTH} bits % |",
        "|---|---:|---|---:|---:|---|---:|---|---:|---:|",
    ]
    moved = compared = 0
    for exp in s.experiments:
        if exp not in o.experiments:
            continue
        a, b = o.selected.get(exp), s.selected.get(exp)
        same = fmt.DASH if a is None or b is None else ("yes" if a == b else "no")
        moved += same == "no"
        compared += 1
        cells: list[Any] = [
            exp,
            len(C.grid_points(o.cfg["experiments"][exp])),
            f"`{a}`" if a else fmt.DASH,
            tied_points(o, exp),
            len(C.grid_points(s.cfg["experiments"][exp])),
            f"`{b}`" if b else fmt.DASH,
            tied_points(s, exp),
            same,
            fmt.num(per_length(o, exp, LENGTH).mean, 2),
            fmt.num(per_length(s, exp, LENGTH).mean, 2),
        ]
        lines.append("| " + " | ".join(fmt.md(str(c)) for c in cells) + " |")
    return [*lines, "", f"The selected point moved in {moved} of {compared} experiments.", ""]
