"""Figures 4.1-4.2's claims: robustness over the hyper-parameter sweep, tested on our grids.

The thesis reads its sweep figures as claims (config/relreg-reference.yaml, `sweep_claims`):
the proto-LSTMs with L2 are more robust over the sweep than the LSTM with L2 (Figure 4.1),
and the proto-LSTMs with both regularizations the most robust of the four (Figure 4.2). It
names no statistic, so ours are stated: every grid point a figure shows (psrnn.studies.relreg.collect.
sweep_points: the thesis' 4 cells), its search run's test sequence accuracy at the thesis'
longest length, and
- per row: the median over the points, the share reaching REACH % (ours) and the mean;
- per comparison: when both grids hold the same settings but for the cells (lstm_l2 and
  proto_l2: hidden, l2, lr), the points are paired and compared by a two-sided sign test
  (scipy.stats.binomtest on wins against losses, ties left out); otherwise by a two-sided
  Mann-Whitney U test (scipy.stats.mannwhitneyu), with P(better > other) beside it.
A claim is supported when every comparison it makes is significant (p < ALPHA) in its
favour; the other way round it is not reproduced; otherwise inconclusive.

    python -m psrnn compile --config config/relreg-full.yaml    # REPORT.md's section
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from scipy import stats

from psrnn import config as C
from psrnn.report import fmt
from psrnn.studies.relreg.collect import RelRegSuite, bit_counts, reference_rows, seq_at, sweep_points
from psrnn.studies.relreg.compare import longest

REACH = 99.0  # % (ours): a grid point reaches the length at this test sequence accuracy or more
ALPHA = 0.05  # two-sided significance level of each comparison (ours)


@dataclass(frozen=True)
class Sweep:
    """One row's grid points at `bits`: settings (the grid's, cells aside) -> accuracy in %."""

    experiment: str
    values: dict[tuple[tuple[str, Any], ...], float]
    total: int  # finished grid points, every cell count

    @property
    def accs(self) -> list[float]:
        return list(self.values.values())


@dataclass(frozen=True)
class Comparison:
    better: Sweep
    other: Sweep
    test: str  # "sign test, paired" or "Mann-Whitney U"
    detail: str  # wins / losses / ties, or P(better > other)
    p: float
    favours: bool  # the difference goes the claim's way

    @property
    def verdict(self) -> str:
        if self.p >= ALPHA:
            return "inconclusive"
        return "supported" if self.favours else f"not reproduced, {self.other.experiment} higher"


def sweep(s: RelRegSuite, exp: str, bits: int) -> Sweep:
    grid = dict(C.grid_points(s.cfg["experiments"][exp]))
    values = {}
    for point, m in sweep_points(s, exp):
        acc = seq_at(m, bits)
        if acc is not None:
            values[tuple(sorted((k, v) for k, v in grid.get(point, {}).items() if k != "cells"))] = acc
    return Sweep(exp, values, len(s.points.get(exp, [])))


def compare(better: Sweep, other: Sweep) -> Comparison:
    if set(better.values) == set(other.values):
        diffs = [better.values[k] - other.values[k] for k in better.values]
        wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        p = stats.binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else 1.0
        detail = f"{wins} / {losses} / {len(diffs) - wins - losses}"
        return Comparison(better, other, "sign test, paired", detail, float(p), wins > losses)
    u, p = stats.mannwhitneyu(better.accs, other.accs, alternative="two-sided")
    superior = float(u) / (len(better.accs) * len(other.accs))  # ties count half
    return Comparison(better, other, "Mann-Whitney U", f"{superior:.2f}", float(p), superior > 0.5)


def _row(s: RelRegSuite, ref_id: str) -> str | None:
    exps = s.experiments_for(ref_id)
    return exps[0] if exps and s.points.get(exps[0]) else None


def robust_lines(s: RelRegSuite) -> list[str]:
    """REPORT.md's section ([] for a small config or without the rows' search runs)."""
    claims = s.reference.get("sweep_claims", [])
    bits = longest(bit_counts(s))
    if not s.paper_scale or not claims:
        return []
    names = {r: row["model"] for r, row in reference_rows(s.reference).items()}
    out: list[str] = []
    for claim in claims:
        better = _row(s, claim["better"])
        others = [e for e in (_row(s, r) for r in claim["than"]) if e]
        if better is None or not others:
            continue
        b = sweep(s, better, bits)
        comps = [compare(b, sweep(s, o, bits)) for o in others]
        if not b.accs or any(not c.other.accs for c in comps):
            continue
        verdicts = {c.verdict for c in comps}
        overall = "supported" if verdicts == {"supported"} else "inconclusive"
        if any(v.startswith("not") for v in verdicts):
            overall = "not reproduced"
        out += [
            f'**{claim["figure"]}.** The thesis: "{" ".join(claim["quote"].split())}". '
            f"{names.get(claim['better'], better)} against "
            + ", ".join(names.get(r, r) for r in claim["than"])
            + f". Verdict: **{overall}**.",
            "",
            f"| Row | Experiment | Points shown | Median % | Reaching {REACH:g} % | Mean % |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for w in [b, *(c.other for c in comps)]:
            ref = s.ref_of(w.experiment) or ""
            out.append(
                f"| {fmt.md(names.get(ref, w.experiment))} | {w.experiment} | {len(w.accs)} of {w.total} "
                f"| {statistics.median(w.accs):.2f} | {sum(a >= REACH for a in w.accs)} of {len(w.accs)} "
                f"| {statistics.fmean(w.accs):.2f} |"
            )
        out += ["", "| Comparison | Test | Wins / losses / ties, or P(better > other) | p | Verdict |"]
        out.append("|---|---|---|---:|---|")
        out += [
            f"| {c.better.experiment} against {c.other.experiment} | {c.test} | {c.detail} | {c.p:.3f} "
            f"| {c.verdict} |"
            for c in comps
        ]
        out.append("")
    if not out:
        return []
    k = s.reference.get("figure_cells")
    return [
        f"Each figure's grid points ({k} cells for the proto-LSTMs, as the thesis' figures; "
        f"each point's search run, the search seed) at {bits} bits: test sequence accuracy. The thesis names "
        f"no statistic; ours: median, share reaching {REACH:g} % and mean per row; paired sign test where "
        f"both grids hold the same settings, else Mann-Whitney U; a claim is supported when every "
        f"comparison is significant (two-sided p < {ALPHA:g}) its way (psrnn.studies.relreg.robust).",
        "",
        *out,
    ]
