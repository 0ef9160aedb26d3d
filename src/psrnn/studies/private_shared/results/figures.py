"""The paper's figures from the runs, each saved as PDF, PNG and SVG, byte-stable.

    python -m psrnn compile --config config/paper.yaml   # -> results/paper/figures/*

fig2_shared_proportion  accuracy and losses against the shared proportion, side by side (paper Fig. 2)
fig3_hidden_states      each hidden unit's T values as a square picture (paper Fig. 3)
curves_<experiment>     validation accuracy and losses per epoch, seeds overlaid
fig1_gradient_norms     beyond the paper: a measured version of its schematic Figure 1
verdicts_forest         beyond the paper: Table 2's verdicts as a forest plot (forest)

Figures use matplotlib's object API (no pyplot state) under one rc context: fixed font,
DPI, SVG hash salt and metadata without dates, so the same runs give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from psrnn.report import FOREST, forest_drawn  # noqa: E402
from psrnn.report.collect import Suite, load_history, load_npz  # noqa: E402
from psrnn.report.figures import STYLE, figure, placeholder, save  # noqa: E402,F401 (save: for compile)
from psrnn.studies.private_shared.results import FIGURE_TITLES as TITLES  # noqa: E402
from psrnn.studies.private_shared.results import paper_figures  # noqa: E402
from psrnn.studies.private_shared.results.forest import verdicts_forest  # noqa: E402
from psrnn.studies.private_shared.results.reading import kind_of, shared_percent  # noqa: E402
from psrnn.studies.private_shared.results.tables import best_experiment, metric, table2_experiments  # noqa: E402

COLORS = {"acc": "C0", "main": "C1", "aux": "C2"}


# --- Figure 2 -------------------------------------------------------------------------------


def fig2_shared_proportion(s: Suite) -> Figure:
    """Two panels against the shared proportion: test accuracy (left) and test main / aux
    loss (right); the paper's values open and dashed, ours filled with ± std over seeds.

    Panels, not a second y-axis: accuracy and loss have their own scales and legends.
    """
    fig = figure(s, TITLES["fig2_shared_proportion"], 8.0, 3.6)
    ax_acc, ax_loss = fig.subplots(1, 2, sharex=True)
    ref = s.reference["table4"]
    px = [r["shared"] for r in ref]
    ax_acc.plot(px, [r["acc"] for r in ref], "s--", color=COLORS["acc"], mfc="none", lw=0.8, label="paper")
    ax_loss.plot(
        px,
        [r["main_loss"] for r in ref],
        "o--",
        color=COLORS["main"],
        mfc="none",
        lw=0.8,
        label="main loss (paper)",
    )
    aux_ref = [(r["shared"], r["aux_loss"]) for r in ref if r["aux_loss"] is not None]
    ax_loss.plot(*zip(*aux_ref), "^--", color=COLORS["aux"], mfc="none", lw=0.8, label="aux loss (paper)")

    ours = []  # (shared %, acc, main, aux) per experiment with runs
    for r in ref:
        for exp in s.experiments_for(r["id"]):
            if s.runs.get(exp):
                aux = metric(s, exp, "test_aux_loss") if kind_of(s, exp) != "gru" else None
                ours.append(
                    (
                        shared_percent(s.settings[exp]),
                        metric(s, exp, "test_acc", 100.0),
                        metric(s, exp, "test_main_loss"),
                        aux,
                    )
                )
    ours.sort(key=lambda o: o[0])
    if ours:
        x = [o[0] for o in ours]
        _errorbar(ax_acc, x, [o[1] for o in ours], "s-", COLORS["acc"], "ours")
        _errorbar(ax_loss, x, [o[2] for o in ours], "o-", COLORS["main"], "main loss (ours)")
        aux = [(o[0], o[3]) for o in ours if o[3] is not None]
        if aux:
            _errorbar(
                ax_loss, [a[0] for a in aux], [a[1] for a in aux], "^-", COLORS["aux"], "aux loss (ours)"
            )
    else:
        ax_acc.text(
            0.5,
            0.05,
            "no finished table4 runs: paper values only",
            transform=ax_acc.transAxes,
            ha="center",
            fontsize=7,
        )
    ax_acc.set_title("test accuracy", fontsize=8)
    ax_acc.set_ylabel("test accuracy (%)")
    ax_loss.set_title("test main (cross-entropy) and auxiliary loss", fontsize=8)
    ax_loss.set_ylabel("test loss")
    for ax in (ax_acc, ax_loss):
        ax.set_xlabel("shared proportion (%)")
        ax.set_xticks([0, 10, 30, 50, 70, 100])
        ax.legend(fontsize=7)
    return fig


def _errorbar(ax, x, summaries, style, color, label) -> None:
    y = [m.mean for m in summaries]
    err = [0.0 if math.isnan(m.std) else m.std for m in summaries]
    ax.errorbar(x, y, yerr=err, fmt=style, color=color, capsize=3, label=label + " ± std")


# --- Figure 3 -------------------------------------------------------------------------------


def fig3_experiment(s: Suite) -> tuple[str | None, int | None]:
    """(experiment, seed) of the Figure 3 run: the first `figure: fig3` experiment, its
    smallest seed with hidden_states.npz."""
    for exp in s.experiments:
        if s.cfg["experiments"][exp].get("figure") == "fig3":
            for run in s.runs.get(exp, []):
                if (run.dir / "hidden_states.npz").is_file():
                    return exp, run.seed
            return exp, None
    return None, None


def square(values: np.ndarray) -> np.ndarray:
    """(T,) -> (side, side) with side = ceil(sqrt(T)); steps past T are nan (blank)."""
    t = values.shape[0]
    side = math.isqrt(t)
    side += side * side < t
    out = np.full(side * side, np.nan, dtype=np.float64)
    out[:t] = values
    return out.reshape(side, side)


def mosaic(pictures: list[np.ndarray], rows: int) -> np.ndarray:
    """Tile equal-size pictures column by column into a grid with nan gutters."""
    if not pictures:
        return np.full((1, 1), np.nan)
    h, w = pictures[0].shape
    cols = math.ceil(len(pictures) / rows)
    out = np.full((rows * (h + 1) - 1, cols * (w + 1) - 1), np.nan)
    for i, p in enumerate(pictures):
        r, c = i % rows, i // rows  # column-major, like the paper: 2 columns of 4 units
        out[r * (h + 1) : r * (h + 1) + h, c * (w + 1) : c * (w + 1) + w] = p
    return out


def fig3_hidden_states(s: Suite) -> Figure:
    exp, seed = fig3_experiment(s)
    title = TITLES["fig3_hidden_states"]
    if exp is None:
        return placeholder(figure(s, title, 6.4, 2.5), "no experiment with `figure: fig3` in this config")
    if seed is None:
        return placeholder(figure(s, title, 6.4, 2.5), f"{exp}: no finished run with hidden_states.npz")
    run = next(r for r in s.runs[exp] if r.seed == seed)
    z = load_npz(run.dir / "hidden_states.npz")
    states = z["states"]  # (E, S, T, d)
    epochs = [int(e) for e in z["epochs"]]
    r, d = int(z["shared_units"]), states.shape[-1]
    rows = min(max(r, d - r, 1), math.ceil(math.sqrt(2 * max(r, d - r, 1))))
    side = square(states[0, 0, :, 0]).shape[0]
    cols = math.ceil(max(r, d - r, 1) / rows)
    aspect = (cols * (side + 1) - 1) / (rows * (side + 1) - 1)  # mosaic width / height
    row_h = 2.0
    fig = figure(
        s,
        f"{title}\n{exp}, seed {seed}, d = {d}, shared units 1-{r}, private {r + 1}-{d}",
        max(6.4, row_h * (1 + 2 * aspect) + 2.0),
        1.2 + row_h * len(epochs),
    )
    axes = fig.subplots(len(epochs), 3, squeeze=False, width_ratios=[1, aspect, aspect])
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="white")
    x = z["x"][0]  # (T, F) the recorded test sequence
    image = None
    for i, epoch in enumerate(epochs):
        h = states[i, 0]  # (T, d) sample 0 at every epoch, so only training changes the picture
        pics = [square(h[:, u]) for u in range(d)]
        ax_in, ax_s, ax_p = axes[i]
        _input_picture(ax_in, x)
        ax_in.set_ylabel("start" if epoch == 0 else f"after {epoch} epoch" + ("s" if epoch > 1 else ""))
        for ax, group, name in (
            (ax_s, pics[:r], f"shared units 1-{r}"),
            (ax_p, pics[r:], f"private units {r + 1}-{d}"),
        ):
            image = ax.imshow(mosaic(group, rows), cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            if i == 0:
                ax.set_title(name if group else f"{name.split()[0]} units: none", fontsize=8)
        if i == 0:
            ax_in.set_title(f"input (label {int(z['y'][0])})", fontsize=8)
    fig.colorbar(image, ax=axes[:, 1:].ravel().tolist(), shrink=0.6, label="hidden state value")
    return fig


def _input_picture(ax, x: np.ndarray) -> None:
    """The model input as a picture: grey for 1 feature, RGB for 3, symbol index otherwise."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    if x.shape[1] == 3:
        rgb = np.stack([square(x[:, c]) for c in range(3)], axis=-1)
        top = np.nanmax(rgb) or 1.0
        ax.imshow(np.nan_to_num(rgb / top, nan=1.0), interpolation="nearest")
    else:
        ax.imshow(square(x[:, 0]), cmap="gray_r", interpolation="nearest")


# --- training curves ------------------------------------------------------------------------


def curves(s: Suite, exp: str) -> Figure:
    """Validation accuracy, main and aux loss per epoch for every finished seed."""
    fig = figure(s, f"Training curves: {exp} ({s.cfg['experiments'][exp]['dataset']})", 9.0, 3.2)
    runs = [(r.seed, load_history(r)) for r in s.runs.get(exp, [])]
    runs = [(seed, h) for seed, h in runs if h is not None and len(h) and "epoch" in h]
    if not runs:
        return placeholder(fig, f"{exp}: no finished run")
    ax_acc, ax_main, ax_aux = fig.subplots(1, 3)
    has_aux = kind_of(s, exp) != "gru"
    for i, (seed, h) in enumerate(runs):
        c = f"C{i % 10}"

        def line(ax, col, style="-", lw=1.2, scale=1.0, h=h, c=c, **kw):
            if col in h:  # a column a future history.csv drops is left out, not fatal
                ax.plot(h["epoch"], scale * h[col], style, color=c, lw=lw, **kw)

        line(ax_acc, "valid_acc", scale=100.0, label=f"seed {seed}")
        line(ax_main, "train_main_loss", "--", 0.8)
        line(ax_main, "valid_main_loss")
        if has_aux:
            line(ax_aux, "train_aux_loss", "--", 0.8)
            line(ax_aux, "valid_aux_loss")
        best = run_best_epoch(s, exp, seed)
        if best is not None:
            ax_acc.axvline(best, color=c, ls=":", lw=0.8)
    ax_acc.set_title("validation accuracy (%), dotted: best epoch", fontsize=8)
    ax_main.set_title("main loss (train dashed, valid solid)", fontsize=8)
    ax_aux.set_title("aux loss (train dashed, valid solid)", fontsize=8)
    if not has_aux:
        ax_aux.text(0.5, 0.5, "no auxiliary task", transform=ax_aux.transAxes, ha="center")
    for ax in (ax_acc, ax_main, ax_aux):
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_acc.legend(fontsize=7)
    return fig


def run_best_epoch(s: Suite, exp: str, seed: int) -> int | None:
    run = next((r for r in s.runs.get(exp, []) if r.seed == seed), None)
    v = run.metrics.get("best_epoch") if run else None
    return None if v is None else int(v)


# --- Figure 1, measured ---------------------------------------------------------------------


def fig1_models(s: Suite) -> list[tuple[str, str, int]]:
    """[(kind, experiment, seed)] for the gradient-norm figure.

    The private/shared model is the best (mean validation accuracy) table2 ps experiment
    with a grad_norms.npz, falling back to the Figure 3 experiment; the GRU and full-share
    panels are the best of their kind on the same dataset. Seed = the smallest with the file.
    """

    def with_norms(exp: str) -> int | None:
        return next((r.seed for r in s.runs.get(exp, []) if (r.dir / "grad_norms.npz").is_file()), None)

    datasets = list(dict.fromkeys(s.cfg["experiments"][e]["dataset"] for e in s.experiments))
    for ds in datasets:
        ps = best_experiment(s, [e for e in table2_experiments(s, ds, "ps") if with_norms(e) is not None])
        if ps is None:
            continue
        out = []
        for kind in ("gru", "full"):
            e = best_experiment(s, [e for e in table2_experiments(s, ds, kind) if with_norms(e) is not None])
            if e is not None:
                out.append((kind, e, with_norms(e)))
        return out + [("ps", ps, with_norms(ps))]
    exp, _ = fig3_experiment(s)
    if exp is not None and with_norms(exp) is not None:
        return [(kind_of(s, exp), exp, with_norms(exp))]
    return []


GRAD_LINES = (
    ("ce_shared", "C0", "-", "supervised, shared units"),
    ("ce_private", "C1", "-", "supervised, private units"),
    ("aux_shared", "C2", "--", "auxiliary, shared units"),
    ("aux_private", "C3", "--", "auxiliary, private units"),
)
KIND_TITLE = {"gru": "(a) GRU", "full": "(b) full share (RNN-AE)", "ps": "(c) private/shared"}


def fig1_gradient_norms(s: Suite) -> Figure:
    """Per time step norm of d(loss)/d(h_t), shared vs private units (paper Fig. 1, measured)."""
    title = TITLES["fig1_gradient_norms"]
    models = fig1_models(s)
    if not models:
        return placeholder(
            figure(s, title, 6.4, 2.5), "it needs a finished private/shared run with grad_norms.npz"
        )
    fig = figure(s, title, max(3.3 * len(models) + 0.6, 6.4), 3.8)
    axes = fig.subplots(1, len(models), squeeze=False, sharey=True)[0]
    for ax, (kind, exp, seed) in zip(axes, models):
        run = next(r for r in s.runs[exp] if r.seed == seed)
        z = load_npz(run.dir / "grad_norms.npz")
        for key, color, style, label in GRAD_LINES:
            y = np.asarray(z[key], dtype=np.float64)
            y = np.where(y > 0, y, np.nan)  # a unit group that does not exist, or no aux task
            if np.isfinite(y).any():
                ax.plot(np.arange(1, y.shape[0] + 1), y, style, color=color, lw=0.7, label=label)
        ax.set_yscale("log")
        ax.set_title(
            f"{KIND_TITLE[kind]}\n{exp}, seed {seed}, {int(z['shared_units'])}/{int(z['hidden'])} shared",
            fontsize=8,
        )
        ax.set_xlabel("time step t")
    axes[0].set_ylabel("mean ||dL/dh_t|| over test sequences")
    # one legend for every panel, below them: every line kind, drawn in any panel or not
    handles = [
        Line2D([], [], ls=style, color=color, lw=1.0, label=label) for _, color, style, label in GRAD_LINES
    ]
    columns = 2 * min(len(models), 2)
    fig.legend(handles=handles, loc="outside lower center", ncol=columns, fontsize=7, frameon=False)
    return fig


def figure_builders(s: Suite) -> list[tuple[str, Callable[[], Figure]]]:
    """(stem, builder) of every figure the config can draw
    (psrnn.studies.private_shared.results.paper_figures, then the verdicts' forest plot where
    psrnn.report.forest_drawn says), in a fixed order (builders run under STYLE)."""
    paper = {
        "fig1_gradient_norms": lambda: fig1_gradient_norms(s),
        "fig2_shared_proportion": lambda: fig2_shared_proportion(s),
        "fig3_hidden_states": lambda: fig3_hidden_states(s),
    }
    out = [(stem, paper[stem]) for stem in paper_figures(s.cfg)]
    if forest_drawn(s.cfg):
        out.append((FOREST, lambda: verdicts_forest(s)))
    for exp in s.experiments:
        out.append((f"curves_{exp}", lambda exp=exp: curves(s, exp)))
    return out


def write_figures(s: Suite, fig_dir: Path) -> list[Path]:
    """Build and save every figure; returns the written paths."""
    written = []
    for stem, build in figure_builders(s):
        with matplotlib.rc_context(STYLE):
            fig = build()
            written += save(fig, fig_dir / stem)
    return written
