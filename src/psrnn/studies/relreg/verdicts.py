"""Table 4.5's verdict rule, stated before any run: an interval of the mean over seeds that
sees how many seeds failed, an equivalence margin read from the thesis' own resolution, and
a cause only where a run tests one.

    python -m psrnn compile --config config/relreg-full.yaml    # REPORT.md: both Table 4.5s

Most runs score 100 % at a length or well below it (the carry rule kept or lost), so the
seeds' values pile at the ceiling. A percentile bootstrap over 20 seeds at 100 % has zero
width ([100, 100]) and covers a true mean of 98 % (2 % of seeds failing) only when no
failing seed was drawn; it then calls any thesis value below 100 % "not reproduced". Here
(docs/results.md argues the choice; tests/test_relreg_verdicts.py simulates its coverage):

- **Interval (`interval`):** the mean is (1 − f)·μ_pass + f·μ_fail, with f the share of seeds
  below SUCCESS_PCT (failing). f is drawn from its Jeffreys posterior Beta(k + ½, n − k + ½)
  (k of n seeds failing); μ_pass from a Bayesian bootstrap (Dirichlet weights) of the passing
  seeds; μ_fail from a Bayesian bootstrap of the failing seeds plus the two ends 0 and
  SUCCESS_PCT at weight ½ each, so failures not yet seen may score anywhere below the
  threshold. DRAWS Monte Carlo draws from a fixed generator (compiles are byte-identical);
  the interval is their 2.5 and 97.5 % quantiles, with the share's end at 0 (or 1) where no
  seed failed (or passed), as Jeffreys' interval does. 20 seeds at 100 % give
  [92.6, 100.0]: they cannot rule out a few % of failing seeds.
- **Margin (`thesis_margin`):** |ours − thesis| up to max(the spread between the thesis' own
  equivalent rows, half the row's printed step) counts as equal. Under our reading eq. 3.7
  with λ_cell = λ_non-cell is eq. 3.6, so the thesis' L2 and cell rows (reference
  `equivalent`) are one model: their largest gap (0.74 pp) is what the thesis' own runs of
  one model vary by. A row printed in 1/30ths (the Transformer's) cannot tell values
  closer than 1/30 apart: half a step, 1.67 pp. Our test-set size plays no part.
- **Verdict:** reproduced when the whole interval lies within the margin of the thesis'
  value (an equivalence test); not reproduced when it lies wholly beyond it; inconclusive
  when it crosses the margin's edge. Fewer than MIN_SEEDS seeds: no verdict.
- **Seeds at >= 99 %:** k of n, with the exact (Clopper-Pearson) interval of the share.
- **Cause:** every cell not reproduced names one from CAUSES, the first that holds in their
  order; each but "unexplained" rests on runs (or on the thesis' own row). "unexplained"
  lists the candidates that no run has tested.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from psrnn.report.stats import MISSING, Summary, not_compared, summarize

DRAWS = 10_000  # Monte Carlo draws of the mean per interval
DRAW_SEED = 0
LEVEL = 0.95
SUCCESS_PCT = 99.0  # a seed "extrapolates" (passes) at this length when it scores at least this
MIN_SEEDS = 10  # fewer seeds give no verdict: a share of seeds has no resolution below that
PRINTED_STEP_PP = 0.01  # a row printed to 4 decimals of a fraction, in pp
COARSE_DENOMINATOR = 100  # a row all of whose values are multiples of 1/N, N <= this, is printed in 1/N
SENSITIVITY_PP = (0.25, 0.5, 1.0, 1.5)  # REPORT.md's tally at these margins beside the chosen ones

# Why a cell is not reproduced, in the order `cause` tries them. Each but the last rests on runs
# (or on the thesis' own row); the last names what no run has tested.
CAUSES = {
    "too few seeds": "fewer than {min_seeds} seeds: no verdict",
    "our selection": "at the thesis' settings this row is reproduced or above the thesis at this length: "
    "the points our search's tie set draws do not extrapolate as well",
    "attention mask": "the thesis' value lies between our two readings of the Transformer: {this} "
    "{this_mean:.2f} %, {other} {other_mean:.2f} % ({other_exp})",
    "thesis row non-monotone": "the thesis' row rises with length ({rise}), which one model's exact match "
    "on ever longer numbers does not do: its values are no curve of one setting",
    "unfit seeds": "{u} of {n} seeds never fit the 3-bit training numbers (loss at chance); without them "
    "ours is {mean:.2f} % and the verdict {without}",
    "seeds": "{k} of {n} seeds reach the thesis' value less the margin, the others do not; the thesis "
    "reports one number",
    "seed count": "all {n} seeds reach the thesis' value less the margin, but {n} passing seeds leave a "
    "failing share of up to {share:.0f} % possible (Jeffreys), which would move the mean past the margin",
    "unexplained": "ours {side} (mean {mean:.2f} %, {k} of {n} seeds reach the thesis' value less the "
    "margin); "
    "no run tests a cause. Untested: the effective strength behind the same nominal λ (loss "
    "normalisation, Σw² against weight decay), thesis values averaged over runs, and training settings "
    "the thesis does not give (optimizer, epochs, batch size, clipping, training-set size)",
}
# Each cause in a phrase, for REPORT.md's list (CAUSES' sentences carry the cell's numbers)
CAUSE_SUMMARY = {
    "too few seeds": f"fewer than {MIN_SEEDS} seeds, no verdict",
    "our selection": "the row at the thesis' settings is reproduced or above the thesis at this length, "
    "the search's draws are not",
    "attention mask": "the thesis' value lies between our causal and our unmasked Transformer rows",
    "thesis row non-monotone": "the thesis' row rises with length by more than the margin somewhere",
    "unfit seeds": "seeds that never fit the training numbers decide the verdict",
    "seeds": "some seeds reach the thesis' value and others do not",
    "seed count": "every seed reaches the thesis' value less the margin; more seeds would bound the "
    "failing share",
    "unexplained": "no run tests a cause; the untested candidates are named",
}


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


def mean_draws(xs: tuple[float, ...], seed: int = DRAW_SEED) -> np.ndarray:
    """DRAWS draws of the mean of the seeds' population (%), the module doc's model: (DRAWS,)."""
    x = np.asarray(xs, dtype=np.float64)
    rng = np.random.default_rng(seed)
    passed, failed = x[x >= SUCCESS_PCT], x[x < SUCCESS_PCT]
    k, n = len(failed), len(x)
    share = rng.beta(k + 0.5, n - k + 0.5, DRAWS)  # (DRAWS,) share of failing seeds
    mu_pass = (
        rng.dirichlet(np.ones(len(passed)), DRAWS) @ passed
        if len(passed)
        else np.full(DRAWS, (SUCCESS_PCT + 100.0) / 2)
    )
    support = np.concatenate([failed, [0.0, SUCCESS_PCT]])  # failures unseen may score anywhere below
    mu_fail = rng.dirichlet(np.concatenate([np.ones(k), [0.5, 0.5]]), DRAWS) @ support
    return (1.0 - share) * mu_pass + share * mu_fail


def interval(xs: list[float]) -> Summary:
    """Mean, sample std and the 95 % interval of the mean of `xs` (%, one per seed) that sees
    the failing seeds (module doc)."""
    return _interval(tuple(xs))


@functools.lru_cache(maxsize=4096)
def _interval(xs: tuple[float, ...]) -> Summary:
    base = summarize(xs)  # n, mean and sample std as everywhere; its t-interval is replaced
    if base.n < 2:
        return base
    draws = mean_draws(xs)
    q = (1 - LEVEL) / 2
    low, high = (float(v) for v in np.quantile(draws, [q, 1 - q]))
    x = np.asarray(xs)
    # Jeffreys' interval puts the share's end at 0 (1) where no seed fails (passes): the mean's
    # end is then the passing (failing) seeds' own
    if (x >= SUCCESS_PCT).all():
        high = max(high, float(x.max()))
    if (x < SUCCESS_PCT).all():
        low = min(low, float(x.min()))
    return Summary(base.n, base.mean, base.std, low, high)


def difference(a: list[float], b: list[float]) -> Summary:
    """mean(a) − mean(b) with the 95 % interval of the difference of the two rows' draws (the
    seeds of the two rows are independent: each its own generator)."""
    return _difference(tuple(a), tuple(b))


@functools.lru_cache(maxsize=1024)
def _difference(a: tuple[float, ...], b: tuple[float, ...]) -> Summary:
    if not a or not b:
        return MISSING
    diff = math.fsum(a) / len(a) - math.fsum(b) / len(b)
    if len(a) < 2 or len(b) < 2:
        return Summary(min(len(a), len(b)), diff, math.nan, math.nan, math.nan)
    d = mean_draws(a, DRAW_SEED) - mean_draws(b, DRAW_SEED + 1)
    q = (1 - LEVEL) / 2
    low, high = (float(v) for v in np.quantile(d, [q, 1 - q]))
    return Summary(min(len(a), len(b)), diff, math.nan, low, high)


def seeds_at(xs: list[float], threshold: float = SUCCESS_PCT) -> Seeds:
    n = len(xs)
    if n == 0:
        return Seeds(0, 0, math.nan, math.nan)
    k = sum(1 for x in xs if x >= threshold)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=LEVEL, method="exact")
    return Seeds(k, n, 100.0 * float(ci.low), 100.0 * float(ci.high))


# --- the margin, from the thesis' side ---------------------------------------------------------


def printed_step(row: Mapping[Any, float]) -> float:
    """The step (pp) a thesis row is printed in: 100/N where every value (a fraction) is a
    multiple of 1/N to its 4 printed decimals for some N <= COARSE_DENOMINATOR (not all 0 or
    1), else the 4 decimals' own PRINTED_STEP_PP."""
    vs = [float(v) for v in row.values()]
    if vs and any(0.0 < v < 1.0 for v in vs):
        for n in range(2, COARSE_DENOMINATOR + 1):
            if all(abs(round(v * n) / n - v) <= 0.00005 for v in vs):
                return 100.0 / n
    return PRINTED_STEP_PP


def equivalent_spread(reference: Mapping[str, Any]) -> float:
    """The largest gap (pp), at any length, between thesis rows that are one model under our
    reading (reference `equivalent`: lists of Table 4.5 row ids); 0 without such rows."""
    acc = {r["id"]: r["acc"] for r in reference.get("table45", [])}
    gaps = [0.0]
    for group in reference.get("equivalent", []):
        missing = [g for g in group if g not in acc]
        if missing:
            raise ValueError(f"equivalent: {', '.join(missing)} is not a table45 row of the reference")
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                common = set(acc[a]) & set(acc[b])
                gaps += [100.0 * abs(float(acc[a][k]) - float(acc[b][k])) for k in common]
    return max(gaps)


def thesis_margin(reference: Mapping[str, Any], row: Mapping[Any, float]) -> float:
    """The equivalence margin (pp) of one thesis row (bits -> fraction): the spread between
    the thesis' equivalent rows, or half the row's printed step where that is more."""
    return max(equivalent_spread(reference), printed_step(row) / 2)


# --- the verdict ----------------------------------------------------------------------------------


def verdict(paper: float | None, ours: Summary, m: float, paper_scale: bool) -> str:
    """The thesis' value (%) against our interval, with the margin `m` (pp; module doc)."""
    if (why := not_compared(paper, ours, paper_scale)) is not None:
        return why
    assert paper is not None  # not_compared said so
    if ours.n < MIN_SEEDS:
        return f"too few seeds (n = {ours.n} < {MIN_SEEDS})"
    if paper - m <= ours.ci_low and ours.ci_high <= paper + m:
        return f"reproduced (our 95% interval within ±{m:.2f} pp of the thesis)"
    if ours.ci_high < paper - m:
        return "not reproduced (ours lower)"
    if ours.ci_low > paper + m:
        return "not reproduced (ours higher)"
    return f"inconclusive (our 95% interval crosses the edge of ±{m:.2f} pp around the thesis)"


def reproduced(v: str) -> bool:
    return v.startswith("reproduced")


def at_or_above(v: str) -> bool:
    """Reproduced, or not reproduced with ours higher: what a twin row shows our search's
    selection could reach."""
    return reproduced(v) or v == "not reproduced (ours higher)"


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
    """A difference of two rows' means (its interval) against the margin `m`:
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


@dataclass(frozen=True)
class Evidence:
    """What runs other than the cell's own say about it (None: no such run).

    twin: the same row at the thesis' settings is reproduced or above the thesis here (a
    SEARCH row's); other_reading: (name of this reading, name of the other, its experiment,
    its mean %) for a Transformer row whose other attention reading was trained; without_unfit:
    the verdict and mean without the seeds that never fit the training numbers, and how many
    those are, where there are any."""

    twin: bool | None = None
    other_reading: tuple[str, str, str, float] | None = None
    without_unfit: tuple[str, float, int] | None = None


def cause(
    v: str, paper: float | None, xs: list[float], m: float, thesis_row: dict[int, float], ev: Evidence
) -> tuple[str, str]:
    """(CAUSES key, its sentence) of a cell whose verdict `v` is not 'reproduced' ('', '' for
    one that is, or that compares nothing). `xs`: our seeds (%); `m`: the margin (pp);
    `thesis_row`: the thesis' row (bits -> %); `ev`: the other runs' evidence."""
    if reproduced(v) or not judged(v) or paper is None:
        return "", ""
    n = len(xs)
    if n < MIN_SEEDS:
        return "too few seeds", CAUSES["too few seeds"].format(min_seeds=MIN_SEEDS)
    if ev.twin:
        return "our selection", CAUSES["our selection"]
    mean = math.fsum(xs) / n
    if ev.other_reading is not None:
        this, other, other_exp, other_mean = ev.other_reading
        if (mean - paper) * (other_mean - paper) <= 0:  # the thesis' value between the two
            return "attention mask", CAUSES["attention mask"].format(
                this=this, this_mean=mean, other=other, other_mean=other_mean, other_exp=other_exp
            )
    up = rise(thesis_row, m)
    if up is not None:
        a, b, d = up
        text = f"{thesis_row[a]:.2f} % at {a} bits, {thesis_row[b]:.2f} % at {b} bits: +{d:.2f} pp"
        return "thesis row non-monotone", CAUSES["thesis row non-monotone"].format(rise=text)
    if ev.without_unfit is not None:
        without, mean_fit, u = ev.without_unfit
        if short_head(without) != short_head(v):
            return "unfit seeds", CAUSES["unfit seeds"].format(u=u, n=n, mean=mean_fit, without=without)
    k = sum(1 for x in xs if x >= paper - m)
    if 0 < k < n:
        return "seeds", CAUSES["seeds"].format(k=k, n=n)
    if k == n and v.startswith("inconclusive"):
        share = 100.0 * float(stats.beta.ppf(1 - (1 - LEVEL) / 2, 0.5, n + 0.5))
        return "seed count", CAUSES["seed count"].format(n=n, share=share)
    side = "higher" if mean > paper else "lower"
    return "unexplained", CAUSES["unexplained"].format(side=side, mean=mean, k=k, n=n)


def short_head(v: str) -> str:
    """A verdict without its parenthesised detail but for the side: 'reproduced',
    'inconclusive', 'not reproduced (ours lower)'."""
    return v if v.startswith("not reproduced") else v.partition(" (")[0]
