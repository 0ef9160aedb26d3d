"""Seed statistics: mean, sample std, 95% t-interval, paired differences, verdicts.

    python -m psrnn compile --config config/paper.yaml    # uses these for every table

Pure functions of plain numbers, so the tests can check them against hand-computed values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.special import stdtrit  # Student's t quantile; far lighter to import than scipy.stats

LEVEL = 0.95  # confidence level of every interval in the tables and the report


@dataclass(frozen=True)
class Summary:
    """Mean over seeds with its spread; nan where undefined (std and CI need n >= 2)."""

    n: int
    mean: float
    std: float  # sample std (ddof = 1)
    ci_low: float
    ci_high: float

    @property
    def missing(self) -> bool:
        return self.n == 0


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
    half = float(stdtrit(n - 1, 0.5 + LEVEL / 2)) * std / math.sqrt(n)
    return Summary(n, mean, std, mean - half, mean + half)


def paired(a: dict[int, float], b: dict[int, float], scale: float = 1.0) -> tuple[Summary, list[int]]:
    """Summary of a[seed] - b[seed] over the seeds both have, and those seeds (sorted)."""
    seeds = sorted(set(a) & set(b))
    return summarize([a[s] - b[s] for s in seeds], scale), seeds


def verdict(paper: float | None, ours: Summary, paper_scale: bool) -> str:
    """Is the paper's number inside our 95% CI?

    A small config never claims a reproduction: its numbers come from shrunken data and
    models, so the comparison is not assessed at all.
    """
    if paper is None or (isinstance(paper, float) and math.isnan(paper)):
        return "no paper value"
    if ours.n == 0:
        return "missing"
    if not paper_scale:
        return "not assessed (small config)"
    if ours.n < 2:
        return "1 seed (no CI)"
    if ours.ci_low <= paper <= ours.ci_high:
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
