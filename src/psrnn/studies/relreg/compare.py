"""REPORT.md's selections beside another relreg suite's: how the choice moved with the grid.

A suite config's `compare_with: <file in config/>` (config/relreg-full.yaml:
`compare_with: relreg.yaml`) names the suite to compare with. For every experiment both
suites have, one row gives:
- each suite's grid size and how many points tied at the best validation accuracy;
- the test sequence accuracy of each suite's final runs (mean over seeds, its 95 %
  interval, seeds at >= 99 %) at the thesis' longest length.

The other suite's committed results are read as its own compile reads them (every run
checked, psrnn.report.collect.suite_run).
"""

from __future__ import annotations

from typing import Any

from psrnn import config as C
from psrnn.report import fmt
from psrnn.studies.relreg import verdicts as V
from psrnn.studies.relreg.collect import RelRegSuite, gather, per_length, seed_values, tied_points, with_ci

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
        f"### Grid searches: config {me} against config {them}",
        "",
        f"Each grid experiment that both configs have: its grid, how many points tied at the best "
        f"validation sequence accuracy (the tie set the final runs draw from), and the test sequence "
        f"accuracy at {LENGTH} bits: the mean over the final runs' seeds [95% interval] and "
        f"the seeds at >= {V.SUCCESS_PCT:g} %.",
        "",
        f"| Experiment | {them} points | {them} tied | {me} points | {me} tied "
        f"| {them} {LENGTH} bits % | {them} seeds | {me} {LENGTH} bits % | {me} seeds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for exp in s.experiments:
        if exp not in o.experiments or not C.has_grid(s.cfg, exp) or not C.has_grid(o.cfg, exp):
            continue
        cells: list[Any] = [
            exp,
            len(C.grid_points(o.cfg["experiments"][exp])),
            tied_points(o, exp),
            len(C.grid_points(s.cfg["experiments"][exp])),
            tied_points(s, exp),
            with_ci(per_length(o, exp, LENGTH)),
            V.seeds_at(seed_values(o, exp, LENGTH)).text(),
            with_ci(per_length(s, exp, LENGTH)),
            V.seeds_at(seed_values(s, exp, LENGTH)).text(),
        ]
        lines.append("| " + " | ".join(fmt.md(str(c)) for c in cells) + " |")
    return [*lines, ""]
