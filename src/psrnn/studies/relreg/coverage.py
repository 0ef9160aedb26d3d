"""How often the verdict rule's interval (psrnn.studies.relreg.verdicts.interval) covers the true
mean of a row whose seeds pile at 100 %: the simulation behind docs/results.md's table and
tests/test_relreg_verdicts.py.

    uv run --frozen python -m psrnn.studies.relreg.coverage    # the table, 1,000 rows per cell (~3 min)

A simulated row has `n` seeds; each fails with probability `rate` and then scores a value
drawn from FAILURES[kind], else 100 %. Its true mean is (1 − rate)·100 + rate·(the failures'
mean).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from psrnn.studies.relreg import verdicts as V

# How a failing seed scores (%), and the mean of that distribution
FAILURES = {
    "uniform": (lambda rng, m: rng.uniform(0.0, V.SUCCESS_PCT, m), V.SUCCESS_PCT / 2),  # anywhere below 99
    "near": (lambda rng, m: V.SUCCESS_PCT * (1.0 - rng.uniform(0.0, 1.0, m) ** 2), V.SUCCESS_PCT * 2 / 3),
    "zero": (lambda rng, m: np.zeros(m), 0.0),  # the worst case: every failure at 0
}
RATES = (0.0, 0.02, 0.05, 0.10, 0.20, 0.50)


def percentile(xs: list[float]) -> tuple[float, float]:
    """The rule this replaced: the 95 % percentile bootstrap of the mean over seeds (2,000
    resamples), zero width when every seed scores the same."""
    if min(xs) == max(xs):
        return xs[0], xs[0]
    ci = stats.bootstrap(
        (np.asarray(xs),), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(0)
    ).confidence_interval
    return float(ci.low), float(ci.high)


def seed_share(xs: list[float]) -> tuple[float, float]:
    x = V.interval(xs)
    return x.ci_low, x.ci_high


METHODS = {"seed share": seed_share, "percentile bootstrap": percentile}


def coverage(
    rate: float, kind: str, reps: int = 1000, n: int = 20, seed: int = 2024, method: str = "seed share"
) -> float:
    """The share of `reps` simulated rows whose 95 % interval (METHODS[method]) holds the true mean."""
    draw, fail_mean = FAILURES[kind]
    rng = np.random.default_rng(seed)
    true = (1.0 - rate) * 100.0 + rate * fail_mean
    hit = 0
    for _ in range(reps):
        failed = rng.random(n) < rate  # (n,)
        xs = np.full(n, 100.0)
        xs[failed] = draw(rng, int(failed.sum()))
        low, high = METHODS[method]([float(v) for v in xs])
        hit += low <= true <= high
    return hit / reps


def main() -> None:
    print("| interval | failures score | " + " | ".join(f"{r:.0%} failing" for r in RATES) + " |")
    print("|---|---|" + "---:|" * len(RATES))
    for method in METHODS:
        for kind in FAILURES:
            cells = " | ".join(f"{coverage(r, kind, method=method):.3f}" for r in RATES)
            print(f"| {method} | {kind} | {cells} |")


if __name__ == "__main__":
    main()
