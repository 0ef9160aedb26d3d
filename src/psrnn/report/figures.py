"""Figures of any study: saved as PDF, PNG and SVG, byte-stable.

Figures use matplotlib's object API (no pyplot state) under one rc context (STYLE): fixed
font, DPI, SVG hash salt and metadata without dates, so the same runs give the same bytes.
The first study's figures: psrnn.studies.private_shared.results.figures; the second's:
psrnn.studies.relreg.figures.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from psrnn.files import atomic_path  # noqa: E402
from psrnn.report import FIGURE_FORMATS as FORMATS  # noqa: E402
from psrnn.report import fmt  # noqa: E402
from psrnn.report.collect import Suite  # noqa: E402

STYLE = {
    "font.family": "DejaVu Sans",  # ships with matplotlib: same glyphs on every machine
    "font.size": 9,
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "svg.hashsalt": "psrnn",  # SVG element ids from a fixed salt instead of random ones
    "svg.fonttype": "path",
    "pdf.fonttype": 3,  # matplotlib's default; 42 is ~2x slower to write and looks the same
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.2,
}
METADATA = {
    "pdf": {"Creator": "psrnn", "Producer": "psrnn", "CreationDate": None, "ModDate": None},
    "png": {"Software": "psrnn"},
    "svg": {"Creator": "psrnn", "Date": None},
}


def save(fig: Figure, stem: Path) -> list[Path]:
    """Write stem.pdf/.png/.svg atomically; returns the paths."""
    out = []
    with matplotlib.rc_context(STYLE):
        # lay out once and freeze: constrained layout would otherwise rerun for every format
        fig.draw_without_rendering()
        fig.set_layout_engine("none")
        for ext in FORMATS:
            target = stem.with_suffix(f".{ext}")
            with atomic_path(target) as tmp:
                fig.savefig(tmp, format=ext, metadata=METADATA[ext])
            out.append(target)
    return out


def figure(s: Suite, title: str, w: float, h: float) -> Figure:
    """A figure titled `title`, over the config's scale label (one for every study)."""
    fig = Figure(figsize=(w, h), layout="constrained")
    fig.suptitle(f"{title}\n{fmt.scale_label(s.name, s.scale_label)}", fontsize=9)
    return fig


def placeholder(fig: Figure, text: str) -> Figure:
    """`fig` saying `text` instead of a plot (what it needs and lacks)."""
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return fig
