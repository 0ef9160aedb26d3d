"""The tie sets of the grid searches at the thesis' longest length: how many points the
validation data cannot tell apart, what they hold, and what the final runs drew from them.

Many grid points reach 100 % validation sequence accuracy on the 4-5-bit numbers. Under
`ties: draw` (config/relreg.yaml) no tied point wins: final run i trains the i-th tied point
in a hash order (psrnn.engine.selection), so a row's mean estimates what a point the search cannot
tell from the best, trained with a fresh seed, scores. A tie-break by the validation loss,
as this suite used before, picks the unregularised point: an L2 penalty shrinks the
margins, and with them the lowest cross-entropy. REPORT.md shows, per experiment, from the
search runs (one per grid point, search seed) and the final runs:

- the tie set's size and the share of it with every searched regulariser at 0;
- the test sequence accuracy of the tied points' search runs (min, median, max, and how
  many reach the thesis' value less the equivalence margin);
- the final runs: how many distinct points they drew, their mean and seeds at >= 99 %.

    python -m psrnn compile --config config/relreg-full.yaml    # REPORT.md, "Why"
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from psrnn.report import fmt
from psrnn.studies.relreg import verdicts as V
from psrnn.studies.relreg.collect import (
    REGULARIZERS,
    SEARCH,
    RelRegSuite,
    bit_counts,
    grid_keys,
    joined,
    margin_of,
    on_training,
    paper_value,
    reference_rows,
    rows,
    seed_values,
    seq_at,
    tied_points,
)
from psrnn.studies.relreg.compare import LENGTH


@dataclass(frozen=True)
class Ties:
    """One experiment's tie set at `bits` (accuracies in %)."""

    experiment: str
    bits: int
    thesis: float | None
    margin: float
    points: int  # grid points with a finished search run
    tied: list[float]  # test sequence accuracy of each tied point's search run (search seed)
    unregularized: int  # tied points with every searched regulariser at 0
    drawn: int  # distinct points the final runs trained
    finals: list[float]  # the final runs, one per seed

    @property
    def reaching(self) -> int:
        """Tied points whose search run reaches the thesis' value less the margin."""
        return sum(1 for v in self.tied if self.thesis is not None and v >= self.thesis - self.margin)


def ties(s: RelRegSuite, exp: str, bits: int = LENGTH) -> Ties:
    found = s.points.get(exp, [])
    accs = [float(m.get("best_valid_acc", 0.0)) for _, m in found]
    top = max(accs, default=None)
    tied = [(p, m) for p, m in found if float(m.get("best_valid_acc", 0.0)) == top]
    searched = [k for k in REGULARIZERS if k in grid_keys(s.cfg["experiments"][exp].get("grid"))]
    off = sum(
        1 for _, m in tied if searched and all(not float(m.get("config", {}).get(k, 0)) for k in searched)
    )
    runs = s.runs.get(exp, [])
    return Ties(
        experiment=exp,
        bits=bits,
        thesis=paper_value(reference_rows(s.reference).get(s.ref_of(exp) or ""), bits),
        margin=margin_of(s, reference_rows(s.reference).get(s.ref_of(exp) or "")),
        points=len(found),
        tied=[v for v in (seq_at(m, bits) for _, m in tied) if v is not None],
        unregularized=off,
        drawn=len({_point(r.metrics) for r in runs}),
        finals=seed_values(s, exp, bits),
    )


def _point(metrics: dict) -> str:
    """A final run's settings, as a key (the point it trained)."""
    cfg = dict(metrics.get("config", {}))
    cfg.pop("seed", None)
    return repr(sorted(cfg.items()))


def tie_sets(s: RelRegSuite, bits: int = LENGTH) -> list[Ties]:
    """Every experiment with a grid: Table 4.5's search rows in their order, then the rest."""
    listed = [e for _, e in rows(s, extra=True, table=SEARCH) if e]
    return [ties(s, e, bits) for e in listed if s.points.get(e)]


def selection_lines(s: RelRegSuite) -> list[str]:
    """REPORT.md's "Why" bullet on selection: the ties per experiment, then tie_lines' table."""
    tied = [(e, n) for e, n in ((e, tied_points(s, e)) for e in s.experiments) if n > 1]
    if not tied:
        return []
    counts = "; ".join(f"{e} {n} of {len(s.points.get(e, []))} (on {_bits(s.settings[e])})" for e, n in tied)
    ablated = any(on_training(s.settings[e]) for e in s.experiments)
    rule = (
        "the final runs draw from the tie set (`ties: draw`): no loss decides"
        if s.cfg.get("ties") == "draw"
        else "the lower validation loss breaks the tie (`ties: loss`), which favours the smallest regulariser"
    )
    table = tie_lines(s)
    return [
        "- **Selection.** Many grid points tie at the best validation sequence accuracy, and the "
        f"validation data cannot tell them apart: {counts}; {rule}. Their test accuracy differs widely "
        "(Figures 4.1-4.2 show every point's curve). The thesis does not say what it selected on"
        + ("; the ablations above select without any number longer than training." if ablated else "."),
        *(["", *table] if table else []),
    ]


def _bits(st: dict) -> str:
    """'4 and 5 bits': the lengths a run with settings `st` selects on."""
    ks = [str(k) for k in st.get("valid_bits", [])]
    return f"{joined(ks)} bits" if ks else fmt.DASH


def tie_lines(s: RelRegSuite, bits: int = LENGTH) -> list[str]:
    """REPORT.md's table of the tie sets ([] without a grid search)."""
    sets = tie_sets(s, bits)
    if not sets:
        return []
    lines = [
        f"**Tie sets at {bits} bits.** Per experiment with a grid: the points tied at the best validation "
        "accuracy, the share of them with every searched regulariser at 0, the test sequence accuracy (%) at "
        f"{bits} bits of the tied points' search runs (search seed), and the final runs drawn from the tie "
        "set (distinct points; mean; seeds at >= 99 %).",
        "",
        "| Experiment | Thesis % | Tied / points | Tied, regularisers all 0 | Tied: min | median | max "
        "| Tied reaching the thesis | Final runs: points drawn | Final mean | Seeds at >= 99 % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in sets:
        row = [
            t.experiment,
            fmt.num(t.thesis, 2),
            f"{len(t.tied)} / {t.points}",
            f"{t.unregularized} of {len(t.tied)}",
            fmt.num(min(t.tied), 2) if t.tied else fmt.DASH,
            fmt.num(statistics.median(t.tied), 2) if t.tied else fmt.DASH,
            fmt.num(max(t.tied), 2) if t.tied else fmt.DASH,
            f"{t.reaching} of {len(t.tied)}" if t.thesis is not None else fmt.DASH,
            f"{t.drawn} of {len(t.finals)} runs" if t.finals else fmt.DASH,
            fmt.num(statistics.fmean(t.finals), 2) if t.finals else fmt.DASH,
            V.seeds_at(t.finals).text(),
        ]
        lines.append("| " + " | ".join(fmt.md(c) for c in row) + " |")
    return lines


def surplus_lines(s: RelRegSuite) -> list[str]:
    """The final runs left out of every number so each drawn tied point counts alike
    (psrnn.studies.relreg.collect.equal_draws), and what they would have moved ([] if none)."""
    if not s.surplus:
        return []
    lines = [
        "**Drawn points count alike.** Final run i trains the tie set's (i mod T)-th point, so where the "
        "tie set has fewer points than there are seeds some points train once more than others. Every "
        "number here counts each drawn point as often as the least-drawn one, by its first seeds; the "
        "runs below train a point again and are left out (psrnn.studies.relreg.collect.equal_draws):",
        "",
    ]
    printed = {int(b) for r in s.reference.get("table45", []) for b in r.get("acc", {})}
    for exp, left in sorted(s.surplus.items()):
        tested = [b for b in bit_counts(s) if all(str(b) in r.metrics.get("test", {}) for r in left)]
        k = max([b for b in tested if b in printed] or tested, default=None)
        moved = ""
        if k is not None:
            kept = seed_values(s, exp, k)
            every = kept + [v for r in left if (v := seq_at(r.metrics, k)) is not None]
            moved = (
                f"; at {k} bits the row is {fmt.num(sum(kept) / len(kept), 2)} % over its "
                f"{len(kept)} counted runs, {fmt.num(sum(every) / len(every), 2)} % with them"
            )
        lines.append(
            f"- {exp}: {seeds_text(left)} ("
            + ", ".join(f"`{_drawn_point(s, exp, r.seed)}`" for r in left)
            + f"){moved}."
        )
    return lines


def seeds_text(runs: list[Any]) -> str:
    """ "seed 3" or "seeds 3 and 7" / "seeds 3, 5 and 7"."""
    seeds = [str(r.seed) for r in runs]
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {', '.join(seeds[:-1])} and {seeds[-1]}"


def _drawn_point(s: RelRegSuite, exp: str, seed: int) -> str:
    return next(str(d["point"]) for d in s.selections[exp]["draws"] if d["seed"] == seed)
