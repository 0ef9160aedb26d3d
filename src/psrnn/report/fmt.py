"""Number formatting and escaping shared by tables, figures and the report.

    python -m psrnn compile --config config/small.yaml

Every printed number goes through here, so "missing" looks the same everywhere ("—",
never 0) and the text is byte-stable.
"""

from __future__ import annotations

import math
import re

from psrnn.report import stats
from psrnn.report.stats import Summary

DASH = "—"  # a missing value: no experiment, no finished run, or no paper value
SMALL = stats.SMALL  # what a config with paper_scale false is, unless its scale_label says
NOT_PAPER = " — not a reproduction of the paper"
SMALL_LABEL = SMALL + NOT_PAPER


def scale_name(cfg: dict) -> str:
    """What a config that is not paper-scale is: its `scale_label` ("reduced-scale check on
    real digits"), else "small config"."""
    return str(cfg.get("scale_label", SMALL))


def not_paper_label(cfg: dict) -> str | None:
    """What every output of a config that is not paper-scale says it is: scale_name +
    NOT_PAPER; None for a paper-scale config."""
    return None if cfg.get("paper_scale", False) else scale_name(cfg) + NOT_PAPER


def sentence(text: str) -> str:
    """The text with its first letter upper-case (str.capitalize lowers all the others)."""
    return text[:1].upper() + text[1:]


def scale_label(name: str, label: str | None) -> str:
    """The line every figure carries about the config; label: Suite.scale_label (None for a
    paper-scale config)."""
    return f"config {name}" + ("" if label is None else f": {label}")


def is_missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def num(x: float | None, digits: int = 1) -> str:
    return DASH if is_missing(x) else f"{x:.{digits}f}"


def sig(x: float | None, digits: int = 4) -> str:
    """`digits` significant digits, for numbers of any size (a diverged loss: 3.2e+04)."""
    return DASH if is_missing(x) else f"{x:.{digits}g}"


def signed(x: float | None, digits: int = 2) -> str:
    return DASH if is_missing(x) else f"{x:+.{digits}f}"


def count(n: float | None) -> str:
    """Parameter counts the paper's way: 90K, 1M, 3.1M (3 significant digits)."""
    if is_missing(n):
        return DASH
    n = float(n)
    if n >= 1e6:
        return f"{n / 1e6:.3g}M"
    if n >= 1e3:
        return f"{n / 1e3:.3g}K"
    return f"{n:.0f}"


def plural(n: int, noun: str) -> str:
    """'1 run', '2 runs', '0 runs' (nouns that take an s)."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def integer(n: float | None) -> str:
    return DASH if is_missing(n) else f"{int(round(n)):,}"


def mean_std(s: Summary, digits: int = 2) -> str:
    """ "98.52 ± 0.11"; a single seed shows its value alone; no runs show the dash."""
    if s.n == 0:
        return DASH
    if s.n == 1:
        return f"{s.mean:.{digits}f}"
    return f"{s.mean:.{digits}f} ± {s.std:.{digits}f}"


WIDE_MARK = "†"  # an interval wider than its metric's limit (stats.bounded)
CLIPPED_MARK = "‡"  # an interval cut to its metric's range (stats.bounded)


def ci(s: Summary, digits: int = 2) -> str:
    """ "[96.57, 100.00]‡": the interval, then a mark for each reason it is uninformative."""
    if s.n < 2:
        return DASH
    marks = (WIDE_MARK if s.wide else "") + (CLIPPED_MARK if s.clipped else "")
    return f"[{s.ci_low:.{digits}f}, {s.ci_high:.{digits}f}]{marks}"


def tasks(ts: list[str] | tuple[str, ...] | None) -> str:
    """["rec", "pred"] -> "pred+rec" (sorted, so the paper's and ours compare as text)."""
    return "+".join(sorted(ts)) if ts else DASH


def csv_cell(x: object) -> str:
    """A CSV cell: missing is empty, integral floats print as integers, others round-trip."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float):
        if x.is_integer() and abs(x) < 1e15:
            return str(int(x))
        return repr(round(x, 6))
    return str(x)


_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "---",
    "–": "--",
    "±": r"$\pm$",
    "−": "$-$",
    "Δ": r"$\Delta$",
    "×": r"$\times$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    ">=": r"$\geq$",
    "<=": r"$\leq$",
    ">": "$>$",
    "<": "$<$",
    "|": r"$|$",
    "`": "",
}
_TEX_RE = re.compile("|".join(re.escape(k) for k in sorted(_TEX, key=len, reverse=True)))  # ">=" before ">"


def tex(text: str) -> str:
    """Escape plain text for LaTeX (pdflatex with the default fonts)."""
    return _TEX_RE.sub(lambda m: _TEX[m.group(0)], str(text))


def md(text: str) -> str:
    """A Markdown table cell: pipes escaped, no line breaks."""
    return str(text).replace("|", r"\|").replace("\n", " ")
