"""The forest plot of both Table 4.5s' verdicts: one row per cell (experiment x number of
bits) with a thesis value and finished runs, at the thesis' settings above, as our search
selects it below (psrnn.report.forest draws it).

    python -m psrnn compile --config config/relreg-full.yaml   # -> figures/verdicts_forest.*

The numbers are the cells' own (psrnn.studies.relreg.collect.cells): the thesis' value, its
margin, our mean and the 95 % interval that sees the failing seeds, and the verdict they give
(psrnn.studies.relreg.verdicts), so the picture and Table 4.5 cannot disagree.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from psrnn.report.forest import ForestRow, forest_figure
from psrnn.studies.relreg.captions import FOREST_TITLE
from psrnn.studies.relreg.collect import FIXED, SEARCH, RelRegSuite, cells
from psrnn.studies.relreg.verdict_lines import TABLE_TITLES


def forest_rows(s: RelRegSuite, table: str) -> list[ForestRow]:
    """One row per cell of one Table 4.5 (FIXED, SEARCH) that has a thesis value and finished
    runs, in the table's order."""
    return [
        ForestRow(
            label=f"{r['experiment']}, {r['bits']} bits",
            group=r["experiment"],
            paper=r["paper"],
            mean=r["seq"].mean,
            low=r["seq"].ci_low,
            high=r["seq"].ci_high,
            margin=r["margin"],
            verdict=r["verdict"],
        )
        for r in cells(s, table=table)
        if r["paper"] is not None and r["seq"].n > 0
    ]


def verdicts_forest(s: RelRegSuite) -> Figure:
    panels = []
    for table in (FIXED, SEARCH):
        rows = forest_rows(s, table)
        panels.append((f"{TABLE_TITLES[table]} ({len(rows)} cells)", rows))
    return forest_figure(s, FOREST_TITLE, panels, "test sequence accuracy (%)", "the thesis'")
