"""The forest plot of Table 2's verdicts: one row per Table 2 row the config runs, the paper's
accuracy in its margin and ours with its interval (psrnn.report.forest draws it).

    python -m psrnn compile --config config/mnist-real.yaml   # -> figures/verdicts_forest.*

The numbers are REPORT.md's Table 2 lines' own (psrnn.studies.private_shared.results.numbers):
our mean with the 95 % t-interval cut to [0, 100] (tables.accuracy), the margin MARGIN_PP and
the verdict of row_verdict, so the picture and the report cannot disagree. A config drawn
at reduced scale reads "not assessed" in every row; a small config or one seed draws none
(psrnn.report.forest_drawn).
"""

from __future__ import annotations

from matplotlib.figure import Figure

from psrnn.report.collect import Suite
from psrnn.report.forest import ForestRow, forest_figure
from psrnn.report.stats import MARGIN_PP
from psrnn.studies.private_shared.results import FIGURE_TITLES
from psrnn.studies.private_shared.results.numbers import row_verdict, rows_run, scale_of
from psrnn.studies.private_shared.results.tables import DATASET_LABEL, accuracy


def forest_rows(s: Suite) -> list[ForestRow]:
    """One row per (Table 2 row, experiment) with finished runs, in Table 2's order."""
    out = []
    for ref, exp in rows_run(s, "table2"):
        acc = accuracy(s, exp)
        if acc.n == 0:
            continue
        out.append(
            ForestRow(
                label=exp,
                group=ref["dataset"],
                paper=float(ref["acc"]),
                mean=acc.mean,
                low=acc.ci_low,
                high=acc.ci_high,
                margin=MARGIN_PP,
                verdict=row_verdict(ref["acc"], acc, scale_of(s)),
            )
        )
    return out


def verdicts_forest(s: Suite) -> Figure:
    rows = forest_rows(s)
    datasets = ", ".join(dict.fromkeys(DATASET_LABEL[s.cfg["experiments"][r.label]["dataset"]] for r in rows))
    title = f"Table 2: {len(rows)} of {len(s.reference['table2'])} rows ({datasets or 'none run'})"
    return forest_figure(
        s, FIGURE_TITLES["verdicts_forest"], [(title, rows)], "test accuracy (%)", "the paper's"
    )
