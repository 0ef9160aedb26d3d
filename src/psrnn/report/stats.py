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


SMALL = "small config"  # what a config that is not paper-scale is, unless it names itself


def not_compared(paper: float | None, ours: Summary, paper_scale: bool, scale: str = SMALL) -> str | None:
    """Why a cell compares nothing ('no paper value', 'missing', 'not assessed (small
    config)'), None when it can be compared; both studies' verdict rules start here. scale:
    what the config is when it is not paper-scale (its scale_label)."""
    if paper is None or (isinstance(paper, float) and math.isnan(paper)):
        return "no paper value"
    if ours.n == 0:
        return "missing"
    if not paper_scale:
        return f"not assessed ({scale})"
    return None


# Table 2's equivalence margin (ours; the paper gives none): two accuracies within it count
# as the same. Table 2 prints 0.1 pp and its gaps between models of one dataset are 0.1-3 pp.
MARGIN_PP = 0.5
MAX_SEEDS = 1000  # seeds_to_resolve looks no further


def verdict(
    paper: float | None, ours: Summary, paper_scale: bool, margin: float = MARGIN_PP, scale: str = SMALL
) -> str:
    """An equivalence test of our mean against the paper's value.

    reproduced: our whole 95 % interval lies within ± margin of the paper's value; not
    reproduced: it lies wholly beyond, on one side; inconclusive otherwise, with how many
    seeds would decide it at our seeds' spread (`seeds_to_resolve`). The earlier rule
    ("the paper's value is inside our interval") rewarded wide intervals. One seed has no
    interval: no verdict. A small config never claims a reproduction: its numbers come from
    shrunken data and models, so the comparison is not assessed at all.
    """
    if (why := not_compared(paper, ours, paper_scale, scale)) is not None:
        return why
    assert paper is not None  # not_compared said so
    if ours.n < 2:
        return "1 seed: no verdict"
    low, high = paper - margin, paper + margin
    if low <= ours.ci_low and ours.ci_high <= high:
        return f"reproduced (95% CI within ±{margin:g} pp)"
    if ours.ci_low > high or ours.ci_high < low:
        return f"not reproduced (ours {'higher' if ours.mean > paper else 'lower'})"
    clause = resolve_text(seeds_to_resolve(ours, abs(ours.mean - paper) - margin))
    return f"inconclusive ({clause[2:] or 'the CI crosses the margin'})"


def seeds_to_resolve(s: Summary, gap: float) -> int | None:
    """The fewest seeds whose 95 % t-interval half-width, at the spread `s.std` measured,
    is under |gap|: the distance from the mean to the point the interval must clear (the
    margin's edge for a value, 0 for a difference); MAX_SEEDS + 1 when more than MAX_SEEDS.
    None: no spread to go by (one seed, or an interval that is not a t-interval) or a gap
    of 0."""
    if not (s.n >= 2 and math.isfinite(s.std) and s.std > 0 and abs(gap) > 0):
        return None
    for n in range(2, MAX_SEEDS + 1):
        if t_quantile(n) * s.std / math.sqrt(n) < abs(gap):
            return n
    return MAX_SEEDS + 1


def resolve_text(n: int | None) -> str:
    """The seeds clause of an unresolved reading ('' when there is nothing to go by)."""
    if n is None:
        return ""
    if n > MAX_SEEDS:
        return f"; no number of seeds up to {MAX_SEEDS} would decide it at this spread"
    return f"; about {n} seeds would decide it at this spread"


def difference_verdict(diff: Summary) -> str:
    """Reading of a paired difference's CI: which model is better, if either; when neither,
    how many seeds would tell at this spread."""
    if diff.n == 0:
        return "missing"
    if diff.n < 2:
        return "1 seed: no verdict"
    if diff.ci_low > 0:
        return "better (CI above 0)"
    if diff.ci_high < 0:
        return "worse (CI below 0)"
    return f"no clear difference (CI contains 0{resolve_text(seeds_to_resolve(diff, diff.mean))})"
