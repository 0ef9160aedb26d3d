"""The forest plot of a study's verdicts: one row per verdict cell, the paper's value (an open
diamond) inside its equivalence margin (a grey band), ours as the mean with the 95 % interval
the verdict uses, coloured by the verdict.

    python -m psrnn compile --config config/relreg-full.yaml   # -> figures/verdicts_forest.*

Each study builds the rows from the code that computes its verdicts
(psrnn.studies.private_shared.results.forest, psrnn.studies.relreg.forest); this module only
draws them, under psrnn.report.figures' STYLE, so the same rows give the same bytes. Whether
a config gets the plot at all: psrnn.report.forest_drawn.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from psrnn.report.collect import Suite  # noqa: E402
from psrnn.report.figures import figure, placeholder  # noqa: E402


@dataclass(frozen=True)
class ForestRow:
    """One verdict cell: the paper's value, ours and the verdict, in the cell's unit (%)."""

    label: str  # the row's name on the y axis
    group: str  # rows of one group sit together, a line between groups (an experiment)
    paper: float
    mean: float  # ours: the mean over seeds
    low: float  # the 95 % interval the verdict uses (nan: none)
    high: float
    margin: float  # the equivalence margin around the paper's value
    verdict: str  # as the tables print it


# Each kind of verdict, in legend order, and its colour (Okabe-Ito: told apart in colour-blind
# vision; the two without a verdict in greys)
VERDICT_COLORS = {
    "reproduced": "#009E73",
    "inconclusive": "#E69F00",
    "not reproduced, ours lower": "#D55E00",
    "not reproduced, ours higher": "#0072B2",
    "no verdict (too few seeds)": "#555555",
    "not assessed": "#A0A0A0",
}
BAND = "0.86"  # the margin band's grey
ROW_IN = 0.2  # inches per row
WIDTH_IN = 8.0
LEFT_PAD_IN = 0.12
GID_PAPER, GID_BAND, GID_OURS = "paper", "margin", "ours:"  # artists' ids (tests read them back)


def verdict_kind(verdict: str) -> str:
    """The VERDICT_COLORS key of a verdict of either study ('not reproduced (ours lower)' ->
    'not reproduced, ours lower'; '1 seed: no verdict', 'too few seeds (n = 3 < 10)' -> 'no
    verdict (too few seeds)')."""
    if verdict.startswith("not reproduced"):
        return "not reproduced, ours lower" if "lower" in verdict else "not reproduced, ours higher"
    for kind in ("reproduced", "inconclusive", "not assessed"):
        if verdict.startswith(kind):
            return kind
    return "no verdict (too few seeds)"


def forest_panel(ax: Axes, rows: list[ForestRow], title: str, xlabel: str) -> None:
    """The rows top to bottom: each paper value's margin band and marker, our mean with its
    interval in the colour of its verdict (one errorbar per kind of verdict)."""
    ys = list(range(len(rows)))
    ax.barh(
        ys,
        [2 * r.margin for r in rows],
        left=[r.paper - r.margin for r in rows],
        height=0.8,
        color=BAND,
        zorder=1,
        gid=GID_BAND,
    )
    for kind, color in VERDICT_COLORS.items():
        mine = [(y, r) for y, r in zip(ys, rows) if verdict_kind(r.verdict) == kind]
        if not mine:
            continue
        # an interval-less row (one seed) draws its mean alone
        below = [0.0 if math.isnan(r.low) else r.mean - r.low for _, r in mine]
        above = [0.0 if math.isnan(r.high) else r.high - r.mean for _, r in mine]
        bars = ax.errorbar(
            [r.mean for _, r in mine],
            [y for y, _ in mine],
            xerr=[below, above],
            fmt="o",
            ms=3.5,
            color=color,
            elinewidth=1.4,
            capsize=0,
            zorder=5,  # over the paper's open marker: a mean equal to the paper's shows inside it
        )
        bars.lines[0].set_gid(GID_OURS + kind)
    (marker,) = ax.plot([r.paper for r in rows], ys, "D", ms=6, mfc="white", mec="black", mew=1.0, zorder=4)
    marker.set_gid(GID_PAPER)
    for y, (a, b) in enumerate(zip(rows, rows[1:])):
        if a.group != b.group:
            ax.axhline(y + 0.5, color="0.6", lw=0.5, zorder=0)
    ax.set_yticks(ys, [r.label for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first row on top
    ax.grid(False, axis="y")
    ax.set_title(title, fontsize=8)
    ax.set_xlabel(xlabel)


def x_range(rows: list[ForestRow]) -> tuple[float, float]:
    """Every interval, band and marker, with 3 % of the span to spare at each side."""
    ends = [v for r in rows for v in (r.paper - r.margin, r.paper + r.margin, r.mean, r.low, r.high)]
    lo, hi = min(v for v in ends if not math.isnan(v)), max(v for v in ends if not math.isnan(v))
    pad = 0.03 * ((hi - lo) or 1.0)
    return lo - pad, hi + pad


def forest_figure(
    s: Suite, title: str, panels: list[tuple[str, list[ForestRow]]], xlabel: str, paper: str
) -> Figure:
    """One panel per (title, rows) with rows, stacked, on one x axis; the legend below them
    names the paper's marker (`paper`: whose value, "the thesis'"), the margin band and each
    verdict that a row has."""
    panels = [(t, rows) for t, rows in panels if rows]
    every = [r for _, rows in panels for r in rows]
    wrapped = textwrap.fill(title, int(13 * WIDTH_IN))  # the title within the figure's width
    fig = figure(s, wrapped, WIDTH_IN, ROW_IN * len(every) + 1.0 * len(panels) + 1.6)
    # room beside the long row names: laid out at figure.dpi, they come out a little wider
    # at savefig.dpi (hinting), and the default pad (3 pt) then cuts their first letters
    fig.set_layout_engine("constrained", w_pad=LEFT_PAD_IN)
    if not panels:
        return placeholder(fig, "no cell to draw: none has a finished run and a value of the paper's")
    axes = fig.subplots(len(panels), 1, squeeze=False, sharex=True, height_ratios=[len(r) for _, r in panels])
    for ax, (name, rows) in zip(axes[:, 0], panels):
        forest_panel(ax, rows, name, xlabel)
        ax.xaxis.set_tick_params(labelbottom=True)
    axes[0, 0].set_xlim(*x_range(every))
    kinds = [k for k in VERDICT_COLORS if any(verdict_kind(r.verdict) == k for r in every)]
    handles = [
        Line2D([], [], marker="D", ms=6, mfc="white", mec="black", ls="", label=f"{paper} value"),
        Patch(color=BAND, label=f"equivalence margin around {paper} value"),
        *[
            Line2D(
                [],
                [],
                marker="o",
                ms=3.5,
                color=VERDICT_COLORS[k],
                lw=1.4,
                label=f"ours (mean, 95% interval): {k}",
            )
            for k in kinds
        ],
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=7, frameon=False)
    return fig
