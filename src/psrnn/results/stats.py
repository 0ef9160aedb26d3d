"""Seed statistics: mean, sample std, 95% t-interval (cut to the metric's range and flagged
when uninformative), paired differences, verdicts.

    python -m psrnn compile --config config/paper.yaml    # uses these for every table

Pure functions of plain numbers, so the tests can check them against hand-computed values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from scipy.special import stdtrit  # Student's t quantile; far lighter to import than scipy.stats

LEVEL = 0.95  # confidence level of every interval in the tables and the report

# The range each kind of number can take; an interval is cut to it (see `bounded`).
PERCENT = (0.0, 100.0)  # an accuracy in %
PP = (-100.0, 100.0)  # a difference of two accuracies, in percentage points
LOSS = (0.0, math.inf)  # cross-entropy and the auxiliary losses are never negative
# An accuracy interval wider than this (pp) cannot tell the paper's models apart: most of
# Table 2's gaps between models of one dataset are under 3 pp.
WIDE_PP = 10.0


@dataclass(frozen=True)
class Summary:
    """Mean over seeds with its spread; nan where undefined (std and CI need n >= 2)."""

    n: int
    mean: float
    std: float  # sample std (ddof = 1)
    ci_low: float
    ci_high: float
    clipped: bool = False  # the t-interval ran past the metric's range and is cut to it
    wide: bool = False  # the t-interval (before cutting) is wider than the metric's limit

    @property
    def missing(self) -> bool:
        return self.n == 0

    @property
    def uninformative(self) -> bool:
        return self.clipped or self.wide


MISSING = Summary(0, math.nan, math.nan, math.nan, math.nan)


def summarize(values: list[float] | tuple[float, ...], scale: float = 1.0) -> Summary:
    """Summary of `values` (one per seed) times `scale` (100 turns fractions into %).

    CI = mean +- t_{0.975, n-1} * std / sqrt(n) (Student's t, as the seeds are few).
    """
    xs = [float(v) * scale for v in values if v is not None and not math.isnan(float(v))]
    n = len(xs)
    if n == 0:
        return MISSING
    mean = math.fsum(xs) / n
    if n == 1:
        return Summary(1, mean, math.nan, math.nan, math.nan)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(n) * std / math.sqrt(n)
    return Summary(n, mean, std, mean - half, mean + half)


def t_quantile(n: int) -> float:
    """t_{0.975, n-1}, the CI's multiplier of std / sqrt(n): 12.71 for 2 seeds, 4.30 for 3."""
    return float(stdtrit(n - 1, 0.5 + LEVEL / 2))


def bounded(s: Summary, low: float, high: float, wide: float = math.inf) -> Summary:
    """`s` with its CI cut to [low, high], the range the metric can take, and flagged.

    With few seeds the t-interval is wide (mean +- 8.98 std for 2 seeds) and runs past
    what the metric can be, e.g. [-20.59, 144.59] for an accuracy in %. The rule: cut it
    to the range and set `clipped`; set `wide` when its uncut width exceeds `wide`.
    Either makes it uninformative, which the report marks. The uncut interval is
    mean +- t_quantile(n) * std / sqrt(n), from the numbers printed beside it.
    """
    if s.n < 2:
        return s
    lo, hi = max(s.ci_low, low), min(s.ci_high, high)
    return replace(
        s, ci_low=lo, ci_high=hi, clipped=(lo, hi) != (s.ci_low, s.ci_high), wide=s.ci_high - s.ci_low > wide
    )


def paired(a: dict[int, float], b: dict[int, float], scale: float = 1.0) -> tuple[Summary, list[int]]:
    """Summary of a[seed] - b[seed] over the seeds both have, and those seeds (sorted)."""
    seeds = sorted(set(a) & set(b))
    return summarize([a[s] - b[s] for s in seeds], scale), seeds


def not_compared(paper: float | None, ours: Summary, paper_scale: bool) -> str | None:
    """Why a cell compares nothing ('no paper value', 'missing', 'not assessed (small
    config)'), None when it can be compared; both studies' verdict rules start here."""
    if paper is None or (isinstance(paper, float) and math.isnan(paper)):
        return "no paper value"
    if ours.n == 0:
        return "missing"
    if not paper_scale:
        return "not assessed (small config)"
    return None


def verdict(paper: float | None, ours: Summary, paper_scale: bool) -> str:
    """Is the paper's number inside our 95% CI?

    A small config never claims a reproduction: its numbers come from shrunken data and
    models, so the comparison is not assessed at all.
    """
    if (why := not_compared(paper, ours, paper_scale)) is not None:
        return why
    assert paper is not None  # not_compared said so
    if ours.n < 2:
        return "1 seed (no CI)"
    if ours.ci_low <= paper <= ours.ci_high:
        if ours.wide:  # it would also hold numbers the paper tells apart
            return f"inconclusive (paper value within a CI wider than {WIDE_PP:g} pp)"
        return "reproduced (paper value within our 95% CI)"
    side = "higher" if ours.mean > paper else "lower"
    return f"not reproduced (ours {side})"


def difference_verdict(diff: Summary) -> str:
    """Reading of a paired difference's CI: which model is better, if either."""
    if diff.n == 0:
        return "missing"
    if diff.n < 2:
        return "1 seed (no CI)"
    if diff.ci_low > 0:
        return "better (CI above 0)"
    if diff.ci_high < 0:
        return "worse (CI below 0)"
    return "no clear difference (CI contains 0)"
