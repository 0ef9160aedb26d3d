"""What decides a Table 4.5 row at the thesis' longest length: the tie-break or the seeds.

Many grid points reach 100 % validation sequence accuracy, and the selection breaks the tie by
the lower validation loss, a rule of ours (the thesis does not say what it selected on). The
final runs then train the chosen point with every seed. A row can fall short of the thesis'
value for either reason, and REPORT.md says which, per experiment, from the search runs (one
per grid point, first seed) and the final runs:

- "seeds": the chosen point's first-seed run reaches the thesis' value and another seed of the
  same point does not; another tie-break could not have helped the mean;
- "tie-break": the chosen point's first-seed run falls short while a tied point's reached it;
- "—" with the reason otherwise: every seed reaches the value, no tied point reaches it, no
  thesis value, no finished runs.

    python -m psrnn compile --config config/relreg-full.yaml    # REPORT.md, "Why"
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from psrnn.relreg.collect import (
    RelRegSuite,
    joined,
    on_training,
    paper_value,
    reference_rows,
    rows,
    seq_at,
    tied_points,
)
from psrnn.relreg.compare import LENGTH
from psrnn.results import fmt


@dataclass(frozen=True)
class Ties:
    """One experiment's tie set at `bits` (accuracies in %)."""

    experiment: str
    bits: int
    thesis: float | None
    points: int  # grid points with a finished search run
    tied: list[float]  # test sequence accuracy of each tied point's search run (first seed)
    selected: float | None  # the selected point's search run
    finals: list[float]  # the final runs, one per seed

    @property
    def reaching(self) -> int:
        """Tied points whose first-seed run reaches the thesis' value."""
        return 0 if self.thesis is None else sum(a >= self.thesis for a in self.tied)

    @property
    def first_reaches(self) -> bool | None:
        """Whether the selected point's first-seed run reaches the thesis' value."""
        return None if self.thesis is None or self.selected is None else self.selected >= self.thesis

    @property
    def decided_by(self) -> str:
        p = self.thesis
        if p is None:
            return "— (no thesis value)"
        if not self.finals or self.selected is None:
            return "— (no finished runs)"
        if all(a >= p for a in self.finals):
            return "— (every seed reaches it)"
        if self.first_reaches:
            return "seeds"
        return "tie-break" if self.reaching else "— (no tied point reaches it)"


def ties(s: RelRegSuite, exp: str, bits: int = LENGTH) -> Ties:
    points = s.points.get(exp, [])
    found = dict(points)
    tied = [seq_at(m, bits) for _, m in points if m.get("best_valid_acc") == 1.0]
    chosen = found.get(s.selected.get(exp) or "")
    finals = [seq_at(r.metrics, bits) for r in s.runs.get(exp, [])]
    return Ties(
        experiment=exp,
        bits=bits,
        thesis=paper_value(reference_rows(s.reference).get(s.ref_of(exp) or ""), bits),
        points=len(points),
        tied=[a for a in tied if a is not None],
        selected=None if chosen is None else seq_at(chosen, bits),
        finals=[a for a in finals if a is not None],
    )


def tie_sets(s: RelRegSuite, bits: int = LENGTH) -> list[Ties]:
    """Every experiment with two or more tied points: Table 4.5's in its order, then the rest."""
    listed = [e for _, e in rows(s, extra=True) if e]
    return [ties(s, e, bits) for e in listed if tied_points(s, e) > 1]


def selection_lines(s: RelRegSuite) -> list[str]:
    """REPORT.md's "Why" bullet on selection: the ties per experiment, then tie_lines' table."""
    tied = [(e, n) for e, n in ((e, tied_points(s, e)) for e in s.experiments) if n > 1]
    if not tied:
        return []
    counts = "; ".join(f"{e} {n} of {len(s.points.get(e, []))} (on {_bits(s.settings[e])})" for e, n in tied)
    ablated = any(on_training(s.settings[e]) for e in s.experiments)
    table = tie_lines(s)
    return [
        "- **Selection.** Many grid points tie at 100 % validation sequence accuracy, and the lower "
        "validation loss that breaks the tie need not pick the point that extrapolates best (Figures "
        f"4.1-4.2 show every point's test curve): {counts}. The thesis does not say what it selected on"
        + ("; the ablations above select without any number longer than training." if ablated else "."),
        *(["", *table] if table else []),
    ]


def _bits(st: dict) -> str:
    """'4 and 5 bits': the lengths a run with settings `st` selects on."""
    ks = [str(k) for k in st.get("valid_bits", [])]
    return f"{joined(ks)} bits" if ks else fmt.DASH


def tie_lines(s: RelRegSuite, bits: int = LENGTH) -> list[str]:
    """REPORT.md's table of the tie sets and a sentence on what decided each row ([] without ties,
    and for a small config, whose numbers are set beside no thesis value)."""
    sets = tie_sets(s, bits) if s.paper_scale else []
    if not sets:
        return []
    lines = [
        f"**Selection and seeds at {bits} bits.** Per experiment with tied grid points: the test sequence "
        f"accuracy (%) at {bits} bits of every point tied at 100 % validation (its search run, first seed), "
        "of the selected point's search run, and of the final runs of that point, one per seed. Decided by: "
        "*seeds* when the selected point's first seed reaches the thesis' value and another seed does not; "
        "*tie-break* when it falls short while a tied point reached it.",
        "",
        "| Experiment | Thesis % | Tied / points | Tied: min | median | max | Tied reaching the thesis "
        "| Selected, first seed | Final runs, per seed | Final mean | Decided by |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for t in sets:
        cells = [
            t.experiment,
            fmt.num(t.thesis, 2),
            f"{len(t.tied)} / {t.points}",
            fmt.num(min(t.tied), 2),
            fmt.num(statistics.median(t.tied), 2),
            fmt.num(max(t.tied), 2),
            fmt.DASH if t.thesis is None else f"{t.reaching} of {len(t.tied)}",
            fmt.num(t.selected, 2),
            ", ".join(fmt.num(a, 1) for a in t.finals) or fmt.DASH,
            fmt.num(statistics.fmean(t.finals), 2) if t.finals else fmt.DASH,
            t.decided_by,
        ]
        lines.append("| " + " | ".join(fmt.md(str(c)) for c in cells) + " |")
    by: dict[str, list[str]] = {}
    for t in sets:
        by.setdefault(t.decided_by, []).append(t.experiment)
    decided = [
        f"the {what} {len(by[key])} ({', '.join(by[key])})"
        for key, what in (("seeds", "seeds decide"), ("tie-break", "tie-break decides"))
        if by.get(key)
    ]
    said = []
    if decided:
        short = sum(map(len, (by.get("seeds", []), by.get("tie-break", []))))
        fall = "falls" if short == 1 else "fall"
        said.append(
            f"Of the {fmt.plural(short, 'row')} that {fall} short of the thesis' value, "
            f"{' and '.join(decided)}."
        )
    valued = [t.first_reaches for t in sets if t.first_reaches is not None]
    if valued:
        first = sum(valued)
        said.append(
            "The selected point's first-seed run, what a study of one run per cell would report, reaches "
            f"the thesis' value in {first} of {fmt.plural(len(valued), 'row')} with one."
        )
    return lines + (["", " ".join(said)] if said else [])
