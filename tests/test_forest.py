"""The forest plots of the verdicts (psrnn.report.forest and each study's rows): the rows hold
the compiled tables' numbers, the picture draws those numbers in the colour of their verdict,
and a config that gives no verdicts (small, one seed) gets no plot."""

import csv
import math

import matplotlib
import pytest

from psrnn import config as C
from psrnn import registry
from psrnn.report import FOREST, forest_drawn
from psrnn.report import forest as F
from psrnn.report.collect import gather as gather_first
from psrnn.report.collect import load_reference
from psrnn.report.figures import STYLE
from psrnn.studies.private_shared.results import forest as first
from psrnn.studies.relreg import forest as second
from psrnn.studies.relreg import results as R


def csv_rows(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def relreg():
    """results/relreg's committed runs, gathered (about 1 s)."""
    cfg = C.load_suite(C.ROOT / "config" / "relreg.yaml")
    return R.gather(cfg, load_reference(R.REFERENCE_PATH), C.results_root(cfg))


@pytest.fixture(scope="module")
def mnist_real():
    cfg = C.load_suite(C.ROOT / "config" / "mnist-real.yaml")
    return gather_first(
        cfg, load_reference(C.ROOT / "config" / "reference.yaml"), C.results_root(cfg), C.data_root(cfg)
    )


def float_or_nan(text: str) -> float:
    return float(text) if text else math.nan


@pytest.mark.parametrize(
    ("table", "stem", "count"), [(R.FIXED, "table45_thesis", 25), (R.SEARCH, "table45", 30)]
)
def test_relreg_rows_are_table_45s_cells_with_their_verdicts(relreg, table, stem, count):
    """One row per cell of the committed Table 4.5 CSV with a thesis value and runs: the same
    thesis value, mean, interval, margin and verdict, in the same order."""
    rows = second.forest_rows(relreg, table)
    compiled = [
        r
        for r in csv_rows(C.results_root(relreg.cfg) / "tables" / f"{stem}.csv")
        if r["paper_acc"] and r["n"] != "0"
    ]
    assert len(rows) == len(compiled) == count
    for row, c in zip(rows, compiled, strict=True):
        assert row.label == f"{c['experiment']}, {c['bits']} bits"
        assert row.verdict == c["verdict"]
        got = (row.paper, row.mean, row.low, row.high, row.margin)
        want = tuple(
            float_or_nan(c[k])
            for k in ("paper_acc", "seq_acc_mean", "seq_acc_ci_low", "seq_acc_ci_high", "margin_pp")
        )
        assert got == pytest.approx(want, abs=1e-5)
    at_14 = {r.label: r for r in rows}
    if table == R.FIXED:  # the RMC at 6 bits: 85.16 [68.45, 96.30] against the thesis' 97.88
        rmc = at_14["rmc_thesis, 6 bits"]
        assert (rmc.paper, round(rmc.mean, 2), round(rmc.low, 2), round(rmc.high, 2)) == (
            97.88,
            85.16,
            68.45,
            96.3,
        )
        assert F.verdict_kind(rmc.verdict) == "not reproduced, ours lower"
        assert at_14["transformer_thesis, 14 bits"].margin == pytest.approx(50 / 30)


def test_the_plot_draws_the_rows_numbers_in_their_verdicts_colours(relreg):
    """Read back from the figure: each panel's paper markers, margin bands and our means and
    intervals are the rows' numbers, every mean in its verdict's colour, and the legend
    names each verdict drawn."""
    with matplotlib.rc_context(STYLE):
        fig = second.verdicts_forest(relreg)
    panels = [ax for ax in fig.axes if ax.get_yticklabels()]
    assert len(panels) == 2
    for ax, table in zip(panels, (R.FIXED, R.SEARCH), strict=True):
        rows = second.forest_rows(relreg, table)
        assert [t.get_text() for t in ax.get_yticklabels()] == [r.label for r in rows]
        (paper,) = [line for line in ax.lines if line.get_gid() == F.GID_PAPER]
        assert list(paper.get_xdata()) == [r.paper for r in rows]
        bands = [p for p in ax.patches if p.get_gid() == F.GID_BAND]
        ends = [e for b in bands for e in (b.get_x(), b.get_x() + b.get_width())]
        assert ends == pytest.approx([e for r in rows for e in (r.paper - r.margin, r.paper + r.margin)])
        drawn = {}
        for container in ax.containers:
            if not hasattr(container, "has_xerr"):
                continue
            line, _, (bars,) = container
            kind = line.get_gid().removeprefix(F.GID_OURS)
            assert matplotlib.colors.to_hex(line.get_color()) == F.VERDICT_COLORS[kind].lower()
            for x, y, seg in zip(line.get_xdata(), line.get_ydata(), bars.get_segments(), strict=True):
                drawn[int(y)] = (kind, x, seg[0][0], seg[1][0])
        assert [drawn[i] for i in range(len(rows))] == [
            (F.verdict_kind(r.verdict), pytest.approx(r.mean), pytest.approx(r.low), pytest.approx(r.high))
            for r in rows
        ]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [
        "the thesis' value",
        "equivalence margin around the thesis' value",
        "ours (mean, 95% interval): inconclusive",
        "ours (mean, 95% interval): not reproduced, ours lower",
        "ours (mean, 95% interval): not reproduced, ours higher",
    ]


def test_verdict_kinds_of_both_studies():
    assert [
        F.verdict_kind(v)
        for v in (
            "reproduced (our 95% interval within ±0.74 pp of the thesis)",
            "reproduced (95% CI within ±0.5 pp)",
            "not reproduced (ours lower)",
            "not reproduced (ours higher)",
            "inconclusive (about 12 seeds would decide it at this spread)",
            "too few seeds (n = 3 < 10)",
            "1 seed: no verdict",
            "not assessed (small config)",
        )
    ] == [
        "reproduced",
        "reproduced",
        "not reproduced, ours lower",
        "not reproduced, ours higher",
        "inconclusive",
        "no verdict (too few seeds)",
        "no verdict (too few seeds)",
        "not assessed",
    ]
    assert len(set(F.VERDICT_COLORS.values())) == len(F.VERDICT_COLORS)


def test_table_2_rows_of_the_reduced_scale_check_are_its_table_and_not_assessed(mnist_real):
    """config/mnist-real.yaml: its 5 MNIST rows with the CSV's means and t-intervals; at reduced
    scale no row is compared, so each reads 'not assessed' and is drawn grey."""
    rows = first.forest_rows(mnist_real)
    compiled = csv_rows(C.results_root(mnist_real.cfg) / "tables" / "table2.csv")
    compiled = [c for c in compiled if c["n"] not in ("", "0")]
    assert (
        [r.label for r in rows]
        == [c["experiment"] for c in compiled]
        == [
            "mnist_gru",
            "mnist_full_rec_a1",
            "mnist_full_rec_a20",
            "mnist_ps30_rec_a1",
            "mnist_ps30_predrec_a40",
        ]
    )
    for row, c in zip(rows, compiled, strict=True):
        got = (row.paper, row.mean, row.low, row.high)
        assert got == pytest.approx(
            tuple(float(c[k]) for k in ("paper_acc", "acc_mean", "acc_ci_low", "acc_ci_high"))
        )
        assert row.margin == 0.5
    assert (rows[0].paper, round(rows[0].mean, 2), round(rows[0].low, 2)) == (98.5, 87.46, 85.44)
    assert {r.verdict for r in rows} == {
        "not assessed (reduced-scale check on real digits (4,000 at 14 x 14, 10 epochs))"
    }
    with matplotlib.rc_context(STYLE):
        fig = first.verdicts_forest(mnist_real)
    (ours,) = [line for ax in fig.axes for line in ax.lines if (line.get_gid() or "").startswith(F.GID_OURS)]
    assert ours.get_gid() == F.GID_OURS + "not assessed"
    assert matplotlib.colors.to_hex(ours.get_color()) == F.VERDICT_COLORS["not assessed"].lower()


@pytest.mark.parametrize(
    ("config", "drawn"),
    [
        ("small.yaml", False),  # paper_scale false, no scale_label: nothing compared
        ("relreg-ci.yaml", False),
        ("quick-imdb.yaml", False),  # paper scale, one seed: no interval, no verdict
        ("mnist-real.yaml", True),  # a reduced-scale check over 3 seeds
        ("paper.yaml", True),
        ("relreg.yaml", True),
        ("relreg-full.yaml", True),
    ],
)
def test_a_forest_plot_only_where_the_config_gives_intervals_against_the_paper(config, drawn):
    cfg = C.load_suite(C.ROOT / "config" / config)
    assert forest_drawn(cfg) is drawn
    stems = {p.stem for p in registry.study_of(cfg).output_paths(cfg) if p.parent.name == "figures"}
    assert (FOREST in stems) is drawn
