"""Figures 4.1-4.4 of the relation-level regularization study, each as PDF, PNG and SVG.

    python -m psrnn compile --config config/relreg.yaml   # -> results/<name>/figures/fig4*

fig41_lstm_vs_proto    sequence accuracy against bits, one line per grid point: LSTM | proto (L2)
fig42_regularizers     the same for the proto-LSTMs with each regularization (2 x 2 panels)
fig43_loading_steps    loading probability per step and cell, two 9-bit examples (heat maps)
fig44_loading_epochs   histogram of the loading probabilities per epoch (heat map and ridges)
verdicts_forest        both Table 4.5s' verdicts as a forest plot (psrnn.studies.relreg.forest)

Which reference rows each figure shows is config/relreg-reference.yaml's `figure_panels`.
Saved with psrnn.report.figures.save under its STYLE, so the same runs give the same bytes;
missing runs give a panel note or a placeholder figure that says what is missing.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib import patheffects  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from psrnn import config as C  # noqa: E402
from psrnn.report import FOREST, fmt, forest_drawn  # noqa: E402
from psrnn.report.collect import Run, load_npz  # noqa: E402
from psrnn.report.figures import STYLE, save  # noqa: E402
from psrnn.report.figures import figure as _titled  # noqa: E402
from psrnn.report.figures import placeholder as _placeholder  # noqa: E402
from psrnn.studies.relreg.captions import FIGURE_TITLES  # noqa: E402
from psrnn.studies.relreg.collect import RelRegSuite, bit_counts, reference_rows, seq_at, sweep_points  # noqa: E402
from psrnn.studies.relreg.compare import longest  # noqa: E402
from psrnn.studies.relreg.forest import verdicts_forest  # noqa: E402

REGULARIZERS = ("l2", "l2_cell", "l2_noncell", "noise")  # the run settings Figures 4.1-4.2 sweep


def _figure(s: RelRegSuite, title: str, w: float, h: float) -> Figure:
    """The first study's figure frame (title and config line), the title wrapped to the width."""
    return _titled(s, "\n".join(textwrap.fill(line, int(13 * w)) for line in title.split("\n")), w, h)


def _ref(s: RelRegSuite, ref_id: str) -> dict[str, Any]:
    return reference_rows(s.reference).get(ref_id, {"id": ref_id, "model": ref_id})


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8, wrap=True)


# --- Figures 4.1 and 4.2: sweeps ------------------------------------------------------------------


LINE_STYLES = ("-", "--", ":", "-.")  # one per value of the second swept setting (style_key_of)
DENSE = 100  # grid points above which a sweep panel fades its lines and draws each colour's median
OUTLINE = [patheffects.withStroke(linewidth=3.6, foreground="white")]  # a median line over the faint ones


def color_key(grid: dict[str, Any] | None) -> str | None:
    """The grid setting the lines are coloured by: the first regularizer it sweeps, else its
    first swept setting (None: nothing swept)."""
    swept = [k for k, v in sorted((grid or {}).items()) if k != C.TIED and len(set(map(str, v))) > 1]
    return next((k for k in REGULARIZERS if k in swept), swept[0] if swept else None)


def sweep_panel(ax, s: RelRegSuite, ref_id: str, bits: list[int], medians: bool = False) -> None:
    """Test sequence accuracy (%) against the number of bits: one thin line per finished
    search run (the selected point red), the thesis' Table 4.5 row dashed; with `medians`, the
    median over the points of each colour thick (its value at 14 bits in the legend), and
    above DENSE points the thin lines faint."""
    ref = _ref(s, ref_id)
    ax.set_title(ref["model"], fontsize=8)
    ax.set_xticks(bits)
    ax.set_xlabel("number of bits")
    ax.set_xlim(min(bits) - 0.5, max(bits) + 0.5)
    ax.set_ylim(-3, 103)
    if ref.get("acc"):
        px = sorted(ref["acc"])
        ax.plot(
            px, [100 * ref["acc"][k] for k in px], "ks--", mfc="w", lw=0.9, ms=4, label="thesis", zorder=6
        )
    exps = s.experiments_for(ref_id)
    if not exps:
        _note(ax, f"{ref_id}: no experiment in this config")
        return
    exp = exps[0]
    grid = s.cfg["experiments"][exp].get("grid")
    lines = sweep_points(s, exp)
    total = len(s.points.get(exp, []))
    what = f"{exp}: {fmt.plural(len(lines), 'grid point')}"
    if len(lines) < total:
        what = f"{exp}: {len(lines)} of {total} grid points ({s.reference['figure_cells']} cells)"
        if _single(s, exp) not in {p for p, _ in lines} | {None}:
            what += " + the selected one"
    if not lines:  # no search: the final runs, one line per seed
        lines = [(f"seed {r.seed}", r.metrics) for r in s.runs.get(exp, [])]
        what = f"{exp}: {fmt.plural(len(lines), 'final run')} (no search runs)"
    ax.set_title(f"{ref['model']}\n{what}", fontsize=8)
    if not lines:
        _note(ax, f"{exp}: no finished run")
        return
    key = color_key(grid)
    style_key = style_key_of(grid, key)
    overrides = dict(C.grid_points(s.cfg["experiments"][exp]))
    levels = sorted({overrides[p][key] for p, _ in lines if p in overrides}) if key else []
    styles = sorted({overrides[p][style_key] for p, _ in lines if p in overrides}) if style_key else []
    cmap = matplotlib.colormaps["viridis"]

    def color(value: Any) -> Any:
        return cmap(levels.index(value) / max(len(levels) - 1, 1)) if value in levels else "C0"

    def dashes(value: Any) -> str:
        return LINE_STYLES[styles.index(value) % len(LINE_STYLES)] if value in styles else "-"

    handles = [h for h in ax.get_lines()]  # the thesis' row
    dense = medians and key is not None and len(lines) > 1
    faint = len(lines) > DENSE
    lw, alpha = (0.5, max(0.1, 0.8 * math.sqrt(DENSE / len(lines)))) if faint else (0.8, 0.8)
    by_level: dict[Any, list[dict[int, float]]] = {}
    for point, m in lines:
        xs, ys = _curve(m, bits)
        chosen = overrides.get(point, {})
        style, level = (chosen.get(k) if k else None for k in (style_key, key))
        ax.plot(xs, ys, dashes(style), color=color(level), lw=lw, alpha=alpha)
        by_level.setdefault(level, []).append(dict(zip(xs, ys)))
    for point, m in s.points.get(exp, []):  # the selected point, whatever its cells
        if _single(s, exp) == point:
            handles += ax.plot(
                *_curve(m, bits),
                "-",
                color="C3",
                lw=1.6,
                label=f"selected (seed {m['seed']}):\n" + _wrapped(point),
                zorder=5,
            )
    at_bits = longest(bits)
    # each colour's median over its points, per number of bits (drawn thick, named in the legend)
    medians_of = {
        level: {
            k: float(np.median(at)) for k in bits if (at := [c[k] for c in by_level.get(level, []) if k in c])
        }
        for level in (levels if dense else [])
    }
    if dense:
        ax.set_title(
            f"{ref['model']}\n{what}\nthick: median per {key} (legend: at {at_bits} bits)", fontsize=8
        )
        for level, med in medians_of.items():
            ax.plot(
                list(med), list(med.values()), "-", color=color(level), lw=2.6, zorder=4, path_effects=OUTLINE
            )
    handles += [
        Line2D(
            [],
            [],
            color=color(v),
            lw=1.5,
            label=f"{key} = {v:g}"
            + (f" ({medians_of[v][at_bits]:.0f} %)" if at_bits in medians_of.get(v, {}) else ""),
        )
        for v in levels
    ]
    handles += [
        Line2D([], [], color="0.35", ls=dashes(v), lw=1.0, label=f"{style_key} = {v:g}") for v in styles
    ]
    # below the panel, so that no curve is hidden
    ax.legend(
        handles=handles, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False
    )


def _single(s: RelRegSuite, exp: str) -> str | None:
    """The one point an experiment's final runs train; None under `ties: draw` (they draw
    from the tie set: no point is the selected one) or without a selection."""
    sel = s.selections.get(exp, {})
    return None if sel.get("draws") else s.selected.get(exp)


def _wrapped(point: str, width: int = 36) -> str:
    """A grid point's id on lines of at most about `width` characters, broken after '_'."""
    lines = [""]
    for part in point.split("_"):
        if lines[-1] and len(lines[-1]) + len(part) + 1 > width:
            lines[-1] += "_"
            lines.append(part)
        else:
            lines[-1] += ("_" if lines[-1] else "") + part
    return "\n".join(lines)


def _curve(m: dict[str, Any], bits: list[int]) -> tuple[list[int], list[float]]:
    """A run's test sequence accuracy (%) at each of `bits` it was tested on."""
    found = [(k, a) for k in bits if (a := seq_at(m, k)) is not None]
    return [k for k, _ in found], [a for _, a in found]


def style_key_of(grid: dict[str, Any] | None, color: str | None) -> str | None:
    """The grid setting the line styles tell apart: the learning rate if swept, else the
    first other numeric setting swept with at most len(LINE_STYLES) values."""
    swept = [
        k
        for k, v in sorted((grid or {}).items())
        if k not in (C.TIED, color)
        and 1 < len(set(map(str, v))) <= len(LINE_STYLES)
        and all(isinstance(x, (int, float)) for x in v)
    ]
    return "lr" if "lr" in swept else (swept[0] if swept else None)


def sweeps(s: RelRegSuite, stem: str, rows: int, cols: int) -> Figure:
    panels = s.reference.get("figure_panels", {}).get(stem.split("_")[0], [])
    fig = _figure(s, FIGURE_TITLES[stem], 4.4 * cols + 0.4, 4.2 * rows + 0.9)
    if not any(s.experiments_for(p) for p in panels):
        return _placeholder(fig, f"none of {', '.join(panels) or 'its rows'} is an experiment of this config")
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True).ravel()
    bits = bit_counts(s)
    counts = [len(sweep_points(s, e)) for p in panels for e in s.experiments_for(p)[:1]]
    medians = max(counts, default=0) > DENSE  # every panel alike, so that they compare
    for ax, ref_id in zip(axes, panels):
        sweep_panel(ax, s, ref_id, bits, medians)
    for ax in axes[::cols]:
        ax.set_ylabel("test sequence accuracy (%)")
    return fig


# --- Figures 4.3 and 4.4: loading probabilities ------------------------------------------------


def loading_run(s: RelRegSuite, stem: str) -> Run | None:
    """The run shown: the first seed with a loading.npz of the figure's reference rows, else
    of any other proto experiment (config order)."""
    preferred = [
        e
        for ref in s.reference.get("figure_panels", {}).get(stem.split("_")[0], [])
        for e in s.experiments_for(ref)
    ]
    protos = [e for e in s.experiments if s.settings[e].get("model") == "proto"]
    for exp in dict.fromkeys(preferred + protos):
        for run in s.runs.get(exp, []):
            if load_npz(run.dir / "loading.npz") is not None:  # present and readable
                return run
    return None


def loading(s: RelRegSuite, stem: str) -> tuple[Run, dict[str, np.ndarray]] | Figure:
    """(the run shown, its loading.npz arrays), or the placeholder figure saying none is there."""
    run = loading_run(s, stem)
    z = None if run is None else load_npz(run.dir / "loading.npz")
    if run is None or z is None:
        return _placeholder(
            _figure(s, FIGURE_TITLES[stem], 6.4, 2.5), "no finished proto run with loading.npz"
        )
    return run, z


def fig43_loading_steps(s: RelRegSuite) -> Figure:
    stem = "fig43_loading_steps"
    found = loading(s, stem)
    if isinstance(found, Figure):
        return found
    run, z = found
    steps, inputs, targets = z["steps"], z["inputs"], z["targets"]  # (S, T, K), (S, T), (S, T - 1)
    shown, (t, k) = min(2, steps.shape[0]), steps.shape[1:]
    fig = _figure(
        s,
        f"{FIGURE_TITLES[stem]}\n{run.experiment}, seed {run.seed}, {k} cells",
        2.6 * shown + 1.6,
        0.32 * t + 1.8,
    )
    axes = fig.subplots(1, shown, squeeze=False)[0]
    image = None
    for i, ax in enumerate(axes):
        p = steps[i]  # (T, K)
        image = ax.imshow(p, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        for (r, c), v in np.ndenumerate(p):
            ax.text(
                c, r, f"{v:.2f}", ha="center", va="center", fontsize=6, color="black" if v > 0.6 else "white"
            )
        ax.set_yticks(range(t), ["start"] + [f"{inputs[i, j]} → {targets[i, j - 1]}" for j in range(1, t)])
        ax.set_xticks(range(k), [f"cell {c + 1}" for c in range(k)])
        ax.grid(False)
        number = "".join(str(b) for b in inputs[i, 1:])
        ax.set_title(f"input {number} (LSB first)", fontsize=8)
        ax.set_ylabel("step: input bit → target bit" if i == 0 else "")
    assert image is not None
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="loading probability")
    return fig


def fig44_loading_epochs(s: RelRegSuite) -> Figure:
    """Left: fraction of loading probabilities per bin (log colour) for every epoch; right:
    the histograms of a few epochs stacked, epoch 0 at the bottom in both (the thesis' 3-D
    stack, flattened)."""
    stem = "fig44_loading_epochs"
    found = loading(s, stem)
    if isinstance(found, Figure):
        return found
    run, z = found
    hist, edges = z["hist"].astype(np.float64), z["bins"].astype(np.float64)  # (E + 1, B), (B + 1)
    if hist.size == 0:
        return _placeholder(
            _figure(s, FIGURE_TITLES[stem], 6.4, 2.5), f"{run.dir}: loading.npz has no histograms"
        )
    epochs = hist.shape[0] - 1
    fig = _figure(s, f"{FIGURE_TITLES[stem]}\n{run.experiment}, seed {run.seed}", 8.4, 3.8)
    ax_map, ax_ridge = fig.subplots(1, 2)
    positive = hist[hist > 0]
    norm = LogNorm(vmin=max(float(positive.min()), 1e-4), vmax=1.0) if positive.size else None
    cmap = matplotlib.colormaps["magma"].with_extremes(bad="white")
    image = ax_map.imshow(
        np.ma.masked_less_equal(hist, 0.0),
        cmap=cmap,
        norm=norm,
        aspect="auto",
        origin="lower",
        extent=(edges[0], edges[-1], -0.5, epochs + 0.5),
        interpolation="nearest",
    )
    ax_map.grid(False)
    ax_map.set_xlabel("loading probability")
    ax_map.set_ylabel("epoch (0 = initialisation)")
    ax_map.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(image, ax=ax_map, label="fraction of probabilities")
    centers = (edges[:-1] + edges[1:]) / 2
    picks = sorted({int(round(e)) for e in np.linspace(0, epochs, min(epochs + 1, 6))})
    top = float(hist.max()) or 1.0
    for j, e in enumerate(picks):  # epoch 0 at the bottom, as in the map beside it
        ax_ridge.fill_between(centers, j, j + 0.9 * hist[e] / top, step="mid", color=f"C{j % 10}", alpha=0.7)
    ax_ridge.set_yticks(range(len(picks)), [f"epoch {e}" for e in picks])
    ax_ridge.set_xlabel("loading probability")
    ax_ridge.set_title("histograms (height: fraction / max)", fontsize=8)
    return fig


def figure_builders(s: RelRegSuite) -> list[tuple[str, Any]]:
    """(stem, builder) of every figure in FIGURE_TITLES' order, then the verdicts' forest plot
    where the config draws it (psrnn.report.forest_drawn)."""
    forest = [(FOREST, lambda: verdicts_forest(s))] if forest_drawn(s.cfg) else []
    return [
        ("fig41_lstm_vs_proto", lambda: sweeps(s, "fig41_lstm_vs_proto", 1, 2)),
        ("fig42_regularizers", lambda: sweeps(s, "fig42_regularizers", 2, 2)),
        ("fig43_loading_steps", lambda: fig43_loading_steps(s)),
        ("fig44_loading_epochs", lambda: fig44_loading_epochs(s)),
        *forest,
    ]


def write_figures(s: RelRegSuite, fig_dir: Path) -> list[Path]:
    written = []
    for stem, build in figure_builders(s):
        with matplotlib.rc_context(cast(Any, STYLE)):
            written += save(build(), fig_dir / stem)
    return written
