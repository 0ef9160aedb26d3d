"""Table 4.5's verdict rule, stated before any run: a bootstrap interval over seeds, an
equivalence margin, the share of seeds that extrapolate, and a cause for every cell that
is not reproduced.

    python -m psrnn compile --config config/relreg-full.yaml    # REPORT.md: both Table 4.5s

Extrapolating from 3-bit numbers is all or nothing per seed: a run keeps the carry rule at
every length (100 %) or loses it (anywhere from 0 to 99 %). A Student's t-interval over such
values is the wrong shape: it runs past 100 %, and it has zero width when every seed scores
100 %, so a thesis value of 99.60 % "is not reproduced" by twenty perfect runs. Here:

- **Interval:** the 95 % percentile bootstrap of the mean over seeds (scipy.stats.bootstrap,
  BOOT_RESAMPLES resamples, a fixed generator, so compiles are byte-identical). It stays
  inside [0, 100] and needs no normality.
- **Margin:** |ours − thesis| up to max(MARGIN_PP, one test number) counts as equal: the
  thesis prints 4 decimals of a number whose test-set size it does not give, and one test
  number is 100/64 pp at 6 bits, 0.1 pp at 1,024.
- **Verdict:** reproduced when the whole interval lies within the margin of the thesis'
  value (an equivalence test, not "the thesis' value is inside our interval", which rewards
  wide intervals); not reproduced when the whole interval lies beyond it, on one side;
  inconclusive otherwise. Fewer than MIN_SEEDS seeds: no verdict.
- **Seeds at >= 99 %:** k of n, with the exact (Clopper-Pearson) interval of the share: the
  all-or-nothing outcome as a count, beside the mean.
- **Cause:** every cell that is not reproduced names one from CAUSES, picked from the data
  by `cause` (first that holds, in CAUSES' order).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from psrnn.report.stats import MISSING, Summary, not_compared, summarize

BOOT_RESAMPLES = 10_000
BOOT_SEED = 0
LEVEL = 0.95
MARGIN_PP = 0.5  # the smallest equivalence margin, pp (larger where one test number is more)
SUCCESS_PCT = 99.0  # a seed "extrapolates" at this length when it scores at least this
MIN_SEEDS = 10  # fewer seeds give no verdict: a share of seeds has no resolution below that

# Why a cell is not reproduced, in the order `cause` tries them. Ours, the thesis', chance.
CAUSES = {
    "too few seeds": "fewer than {min_seeds} seeds: no verdict",
    "our selection": "at the thesis' settings this row is reproduced at this length: the seeds of our "
    "search's tie set include points that do not extrapolate",
    "thesis row non-monotone": "the thesis' row rises with length ({rise}), which one model's exact match "
    "on ever longer numbers does not do: its values are no curve of one setting",
    "margin edge": "the mean is within the margin (Δ {d:+.2f} pp, margin {m:.2f} pp) and every seed reaches "
    "the thesis' value less it, but the interval crosses the margin's edge: a gap of a few test numbers",
    "seeds": "all or nothing per seed: {k} of {n} seeds reach the thesis' value, the others do not; "
    "the thesis reports one number",
    "our architecture reading": "ours higher, with settings of ours the thesis does not give ({settings})",
    "our training settings": "ours {side} (mean {mean:.2f} %{exact}; {k} of {n} seeds reach the thesis' "
    "value less the margin) under training settings of ours the thesis does not give (optimizer, epochs, "
    "batch size, clipping, training-set size)",
}
# Each cause in a phrase, for REPORT.md's list (CAUSES' sentences carry the cell's numbers)
CAUSE_SUMMARY = {
    "too few seeds": f"fewer than {MIN_SEEDS} seeds, no verdict",
    "our selection": "the row at the thesis' settings is reproduced at this length, the search's draws "
    "are not: its tie set holds points that do not extrapolate",
    "thesis row non-monotone": "the thesis' row rises with length by more than the margin somewhere",
    "margin edge": "the mean is within the margin and every seed reaches the thesis' value less it, but "
    "the interval crosses the margin's edge",
    "seeds": "some seeds reach the thesis' value and others do not (all or nothing per seed)",
    "our architecture reading": "ours higher, with model settings of ours the thesis does not give",
    "our training settings": "ours above or below the thesis at (nearly) every seed, under training "
    "settings of ours the thesis does not give",
}
# Model settings of ours that the thesis does not give, by model (psrnn.studies.relreg.settings)
ARCHITECTURE_OURS = {"transformer": ("causal",), "rmc": ("slots",)}


@dataclass(frozen=True)
class Seeds:
    """k of n seeds at >= SUCCESS_PCT, and the exact 95 % interval of that share (%)."""

    k: int
    n: int
    low: float
    high: float

    def text(self) -> str:
        if self.n == 0:
            return "—"
        return f"{self.k}/{self.n} [{self.low:.0f}, {self.high:.0f}]"


def percent_values(values: list[Any]) -> list[float]:
    return [100.0 * float(v) for v in values if v is not None and not math.isnan(float(v))]


def bootstrap(xs: list[float]) -> Summary:
    """Mean, sample std and the 95 % percentile bootstrap interval of the mean of `xs`."""
    return _bootstrap(tuple(xs))


@functools.lru_cache(maxsize=4096)
def _bootstrap(xs: tuple[float, ...]) -> Summary:
    base = summarize(xs)  # n, mean and sample std as everywhere; its t-interval is replaced
    if base.n < 2:
        return base
    if min(xs) == max(xs):  # every resample has this mean
        return dataclasses.replace(base, ci_low=base.mean, ci_high=base.mean)
    res = stats.bootstrap(
        (np.asarray(xs, dtype=np.float64),),
        np.mean,
        n_resamples=BOOT_RESAMPLES,
        confidence_level=LEVEL,
        method="percentile",
        rng=np.random.default_rng(BOOT_SEED),
    )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return dataclasses.replace(base, ci_low=low, ci_high=high)


def bootstrap_difference(a: list[float], b: list[float]) -> Summary:
    """mean(a) − mean(b) with a 95 % percentile bootstrap interval, resampling each sample
    on its own (the two sets of seeds are independent: no pairing)."""
    return _bootstrap_difference(tuple(a), tuple(b))


@functools.lru_cache(maxsize=1024)
def _bootstrap_difference(a: tuple[float, ...], b: tuple[float, ...]) -> Summary:
    if not a or not b:
        return MISSING
    diff = math.fsum(a) / len(a) - math.fsum(b) / len(b)
    if len(a) < 2 or len(b) < 2:
        return Summary(min(len(a), len(b)), diff, math.nan, math.nan, math.nan)
    if min(a) == max(a) and min(b) == max(b):
        return Summary(min(len(a), len(b)), diff, 0.0, diff, diff)
    res = stats.bootstrap(
        (np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)),
        lambda x, y, axis=-1: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        n_resamples=BOOT_RESAMPLES,
        confidence_level=LEVEL,
        method="percentile",
        rng=np.random.default_rng(BOOT_SEED),
    )
    return Summary(
        min(len(a), len(b)),
        diff,
        math.nan,
        float(res.confidence_interval.low),
        float(res.confidence_interval.high),
    )


def seeds_at(xs: list[float], threshold: float = SUCCESS_PCT) -> Seeds:
    n = len(xs)
    if n == 0:
        return Seeds(0, 0, math.nan, math.nan)
    k = sum(1 for x in xs if x >= threshold)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=LEVEL, method="exact")
    return Seeds(k, n, 100.0 * float(ci.low), 100.0 * float(ci.high))


def margin(count: int | None) -> float:
    """The equivalence margin (pp) at a length with `count` test numbers."""
    return max(MARGIN_PP, 100.0 / count) if count else MARGIN_PP


def verdict(paper: float | None, ours: Summary, count: int | None, paper_scale: bool) -> str:
    """The thesis' value (%) against our bootstrap interval, with the margin (module doc)."""
    if (why := not_compared(paper, ours, paper_scale)) is not None:
        return why
    assert paper is not None  # not_compared said so
    if ours.n < MIN_SEEDS:
        return f"too few seeds (n = {ours.n} < {MIN_SEEDS})"
    m = margin(count)
    if paper - m <= ours.ci_low and ours.ci_high <= paper + m:
        return f"reproduced (our 95% interval within ±{m:.2f} pp of the thesis)"
    if ours.ci_high < paper - m:
        return "not reproduced (ours lower)"
    if ours.ci_low > paper + m:
        return "not reproduced (ours higher)"
    return f"inconclusive (our 95% interval reaches past ±{m:.2f} pp of the thesis on one side only)"


def reproduced(v: str) -> bool:
    return v.startswith("reproduced")


def decisive(v: str) -> bool:
    return v.startswith(("reproduced", "not reproduced"))


def judged(v: str) -> bool:
    """A verdict that compares (not 'no paper value', 'missing', 'not assessed')."""
    return v.startswith(("reproduced", "not reproduced", "inconclusive", "too few seeds"))


def rise(row: dict[int, float], tolerance: float) -> tuple[int, int, float] | None:
    """The largest rise of a thesis row from a shorter to a longer length, over `tolerance`
    pp: (shorter, longer, rise), None if the row never rises by more."""
    lengths = sorted(row)
    best = None
    for i, a in enumerate(lengths):
        for b in lengths[i + 1 :]:
            up = row[b] - row[a]
            if up > tolerance and (best is None or up > best[2]):
                best = (a, b, up)
    return best


def difference_reading(d: Summary, m: float) -> str:
    """A difference of two rows' means (its bootstrap interval) against the margin `m`:
    'equal within the margin', 'resolved, first higher', 'resolved, second higher' or
    'not resolved'."""
    if d.n < 2 or math.isnan(d.ci_low):
        return "not resolved"
    if -m <= d.ci_low and d.ci_high <= m:
        return "equal within the margin"
    if d.ci_low > m:
        return "resolved, first higher"
    if d.ci_high < -m:
        return "resolved, second higher"
    return "not resolved"


def cause(
    v: str,
    paper: float | None,
    xs: list[float],
    count: int | None,
    thesis_row: dict[int, float],
    twin_reproduced: bool | None,
    settings: dict[str, Any],
) -> tuple[str, str]:
    """(CAUSES key, its sentence) of a cell whose verdict `v` is not 'reproduced' ('', '' for
    one that is, or that compares nothing). `xs`: our seeds (%); `thesis_row`: the thesis'
    row (bits -> %); `twin_reproduced`: whether the same row at the thesis' settings is
    reproduced at this length (None: no such row, or this is it); `settings`: the run's."""
    if reproduced(v) or not judged(v) or paper is None:
        return "", ""
    m = margin(count)
    k = sum(1 for x in xs if x >= paper - m)
    n = len(xs)
    if n < MIN_SEEDS:
        return "too few seeds", CAUSES["too few seeds"].format(min_seeds=MIN_SEEDS)
    if twin_reproduced:
        return "our selection", CAUSES["our selection"]
    up = rise(thesis_row, m)
    if up is not None:
        a, b, d = up
        text = f"{thesis_row[a]:.2f} % at {a} bits, {thesis_row[b]:.2f} % at {b} bits: +{d:.2f} pp"
        return "thesis row non-monotone", CAUSES["thesis row non-monotone"].format(rise=text)
    mean = math.fsum(xs) / n
    if v.startswith("inconclusive") and k == n and abs(mean - paper) <= m:
        return "margin edge", CAUSES["margin edge"].format(d=mean - paper, m=m)
    if 0 < k < n and not v.endswith("(ours higher)"):
        return "seeds", CAUSES["seeds"].format(k=k, n=n)
    ours_keys = ARCHITECTURE_OURS.get(str(settings.get("model")), ())
    if mean > paper and ours_keys:
        named = ", ".join(f"{key} = {settings.get(key)}" for key in ours_keys)
        return "our architecture reading", CAUSES["our architecture reading"].format(settings=named)
    side = "higher" if mean > paper else "lower"
    exact = ", every seed exact on every test number" if min(xs) == 100.0 else ""
    return "our training settings", CAUSES["our training settings"].format(
        k=k, n=n, side=side, mean=mean, exact=exact
    )
