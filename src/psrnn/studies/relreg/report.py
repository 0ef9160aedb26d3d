"""REPORT.md of a `study: relreg` suite: provenance, the study's choices, our grids against
the thesis' Tables 4.1-4.4, Table 4.5 with a verdict per row and number of bits, the
ablations, where we match and where not, the figures and the readings of unclear points
(psrnn.studies.relreg.results compiles it last, from the same gathered runs as the tables and
figures). Every sentence that compares numbers is computed from them, here and in
psrnn.studies.relreg.ablations.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.report import FOREST, fmt
from psrnn.report.provenance import machine_text, notes_lines, run_time_line, search_points, tally_lines
from psrnn.report.tables import Table, to_markdown
from psrnn.studies.relreg import verdicts as V
from psrnn.studies.relreg.ablations import ablation_lines
from psrnn.studies.relreg.captions import FIGURE_TITLES, FOREST_SENTENCE, FOREST_TITLE
from psrnn.studies.relreg.collect import (
    FIXED,
    REFERENCE_PATH,
    SEARCH,
    RelRegSuite,
    cells,
    cut_grids,
    grid_keys,
    rows,
    selection_data,
)
from psrnn.studies.relreg.compare import compare_lines
from psrnn.studies.relreg.evidence import evidence_lines
from psrnn.studies.relreg.robust import robust_lines
from psrnn.studies.relreg.ties import seeds_text, surplus_lines
from psrnn.studies.relreg.verdict_lines import (  # noqa: F401 (why_lines: REPORT.md's "Why", tests call it here)
    TABLE_TITLES,
    cause_lines,
    detail_lines,
    match_section,
    summary_lines,
    table_section,
    why_lines,
)

# Settings the thesis does not give; ours are listed in the report.
UNSTATED = ("optimizer", "epochs", "batch_size", "clip", "train_size", "valid_bits", "test_count", "slots")


def report_markdown(s: RelRegSuite, t: Table, tt: Table, ab: Table, outputs: list[str]) -> str:
    head = [f"# Reproduction report: relation-level regularization (Binary Counter), config `{s.name}`", ""]
    if not s.paper_scale:
        head += [
            f"> **{fmt.sentence(str(s.scale_label))}.** Data, models and budgets are shrunk for a quick run; "
            "its numbers say nothing about the thesis' claims, and no verdict is given.",
            "",
        ]
    if s.paper_scale and (cut := cut_grids(s)):
        head += [
            f"> **Cut grids.** The searches of {', '.join(cut)} train part of the thesis' grids "
            "(Tables 4.1-4.4; the grid table below says which part): their selections, and so their "
            "verdicts, are about these grids. `config/relreg-full.yaml` searches them in full.",
            "",
        ]
    parts = [
        *head,
        "## Verdicts",
        "",
        *summary_lines(s),
        "",
        *([FOREST_SENTENCE, ""] if f"figures/{FOREST}.png" in outputs else []),
        "## Provenance",
        "",
        *provenance(s),
        "",
        "## The study's choices",
        "",
        *choices(s),
        "",
        "### Grid searches: ours against the thesis' Tables 4.1-4.4",
        "",
        *grid_lines(s),
        "",
        *([*surplus, ""] if (surplus := surplus_lines(s)) else []),
        *compare_lines(s),
        *table_section(s, FIXED, tt),
        *table_section(s, SEARCH, t),
        "## Thesis against ours, per row and number of bits",
        "",
        "Ours = mean ± sample std over seeds; 95% interval: of the mean, from the share of failing seeds "
        f"(below {V.SUCCESS_PCT:g} %, Jeffreys' Beta) and the passing and failing seeds' values (Bayesian "
        "bootstrap, failures unseen anywhere below the threshold); "
        f"seeds at >= {V.SUCCESS_PCT:g} %: k/n with the exact 95% interval of the share; Δ = ours − thesis "
        "(sequence accuracy, pp); margin: the spread between the thesis' own equivalent rows, or half the "
        "row's printed step where more. Verdict: reproduced when our whole "
        "interval lies within the margin of the thesis' value, not reproduced when wholly beyond it, else "
        "inconclusive (psrnn.studies.relreg.verdicts). Cause: the first of the fixed list "
        "below that the runs "
        "show. Our bit accuracy is a diagnostic, never compared with the thesis' values.",
        "",
        *detail_lines(s),
        "",
        *cause_lines(s),
        "",
        *(["## Causes tested by runs", "", *tested] if (tested := evidence_lines(s)) else []),
        "## Ablations",
        "",
        to_markdown(ab, s),
        *ablation_lines(s),
        "",
        *(
            ["## Figures 4.1-4.2: robustness over the sweep", "", *robust, ""]
            if (robust := robust_lines(s))
            else []
        ),
        "## Where we match and where not",
        "",
        *[line for table in (FIXED, SEARCH) for line in match_section(s, table)],
        "### Why",
        "",
        *why_lines(s),
        "",
        "## Figures",
        "",
        *figure_lines(outputs),
        "## Readings of unclear points",
        "",
        *readings(s),
        "",
        "## Outputs",
        "",
        *[f"- `{o}`" for o in outputs],
        "",
    ]
    return "\n".join(parts)


def figure_lines(outputs: list[str]) -> list[str]:
    """Each compiled figure's PNG, embedded, with its title as the caption."""
    titles = {**FIGURE_TITLES, FOREST: FOREST_TITLE}
    out = []
    for o in outputs:
        if o.endswith(".png") and Path(o).stem in titles:
            out += [f"![{titles[Path(o).stem]}]({o})", "", f"*{titles[Path(o).stem]}.*", ""]
    return out


def provenance(s: RelRegSuite) -> list[str]:
    final = [r.metrics for rs in (*s.runs.values(), *s.surplus.values()) for r in rs]
    ms = final + s.search
    commits = Counter(m.get("git_commit") or "unknown" for m in ms)
    machines = Counter(machine_text(m) for m in ms)
    return [
        f"- Thesis: {' '.join(s.reference.get('paper', '').split())}",
        f"- Its numbers: {' '.join(s.reference.get('source', '').split())}; config/{REFERENCE_PATH.name}",
        f"- Config: `{s.name}` (paper_scale: {str(s.paper_scale).lower()}), seeds {sorted(s.cfg['seeds'])}, "
        f"experiments: {', '.join(s.experiments) or 'none'}",
        f"- Final runs: {len(final)} of {len(s.experiments) * len(s.cfg['seeds'])} finished"
        + (
            f" ({sum(map(len, s.surplus.values()))} not counted: drawn points count alike)"
            if s.surplus
            else ""
        )
        + f"; search runs: {len(s.search)} of {search_points(s)} grid points",
        *tally_lines(commits, machines),
        run_time_line(final, s.search),
        *notes_lines(s),
    ]


def _values(vs: list[Any]) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vs)


def split_sizes(st: dict[str, Any], key: str = "test_bits") -> str:
    """'6 bits: all 64; ...; 12 bits: 1,024 distinct random' from the run settings."""
    count = int(st.get("test_count", 0))
    return "; ".join(
        f"{k} bits: all {2**k:,}" if 2**k <= count else f"{k} bits: {count:,} distinct random (seeded)"
        for k in st.get(key, [])
    )


def choices(s: RelRegSuite) -> list[str]:
    if not s.settings:
        return ["No experiment is enabled in this config."]
    st = next(iter(s.settings.values()))
    tb = int(st.get("train_bits", 0))
    unstated = []
    for key in UNSTATED:
        seen = list(dict.fromkeys(str(v.get(key)) for v in s.settings.values()))
        unstated.append(f"{key} {' / '.join(seen)}")
    return [
        "- Data: the Binary Counter (thesis Algorithm 1), generated in each run: a k-bit number n, least "
        "significant bit first after a start token (2), in; the k bits of (n + 1) mod 2^k out, one per step "
        "(the carry out of the top bit is dropped).",
        f"- Training: {st.get('train_size')} sequences per epoch drawn with replacement from the {2**tb} "
        f"numbers of {tb} bits. Validation (model selection): {split_sizes(st, 'valid_bits')}. "
        f"Test: {split_sizes(st)}.",
        "- Metric: sequence accuracy (exact match), the fraction of test numbers whose k output bits are "
        'all right: the thesis\' Table 4.5 metric (its "sequence-level", "best sentence" accuracy), ours '
        "in Table 4.5, Figures 4.1-4.2 and every verdict. Bit accuracy, the fraction of output bits right, "
        "is a diagnostic beside it. A run's test_acc is the mean of its per-length sequence accuracies.",
        "- Protocol: " + protocol(s) + " Each run keeps its best epoch on validation; the test set chooses "
        "nothing. Validation data: "
        + "; ".join(f"{rule} ({', '.join(es)})" for rule, es in _by_selection(s))
        + ".",
        "- Settings the thesis does not give (ours, first experiment's value first where they differ): "
        + "; ".join(unstated)
        + ".",
    ]


def protocol(s: RelRegSuite) -> str:
    """How the config turns grids into final runs, from its settings."""
    seed, seeds = C.search_seed(s.cfg), sorted(s.cfg["seeds"])
    apart = seed not in seeds
    search = f"each experiment with a grid trains one search run per grid point (seed {seed}); "
    if s.cfg.get("ties") == "draw":
        search += (
            "the points tied at the best validation sequence accuracy form the tie set, and final run i "
            "trains the tie set's i-th point in a hash order (`ties: draw`, "
            "psrnn.engine.selection: no loss decides; where a point trains again, only as many runs of each "
            "as the least-drawn point has count)"
        )
    else:
        search += (
            "the point with the best validation sequence accuracy (ties: lower validation loss) is trained"
        )
    search += f" with each of the {len(seeds)} final seeds" + (
        ", none of them the search seed." if apart else f"; seed {seed}'s final run is the search run itself."
    )
    fixed = [e for e in s.experiments if not C.has_grid(s.cfg, e)]
    if fixed:
        search += (
            f" Experiments without a grid ({', '.join(fixed)}) train their fixed settings with every seed."
        )
    numeric = (
        " Search and final runs train as batched groups (`fused_search`, `fused_finals`: "
        "psrnn.engine.group), one "
        "numeric path for all."
        if s.cfg.get("fused_search") and s.cfg.get("fused_finals")
        else ""
    )
    return search + numeric


def _by_selection(s: RelRegSuite) -> list[tuple[str, list[str]]]:
    """(what the runs select on, the experiments that do), in config order."""
    groups: dict[str, list[str]] = defaultdict(list)
    for e in s.experiments:
        groups[selection_data(s.settings[e])].append(e)
    return list(groups.items())


def _grid_text(grid: dict[str, Any] | None) -> str:
    if not grid:
        return "no grid (1 setting)"
    parts = [f"{k} {{{_values(v)}}}" for k, v in sorted(grid.items()) if k != C.TIED]
    if grid.get(C.TIED):
        keys = list(dict.fromkeys(k for item in grid[C.TIED] for k in item))
        parts.append(f"({', '.join(keys)}): {len(grid[C.TIED])} tied choices")
    return "; ".join(parts)


def grid_lines(s: RelRegSuite) -> list[str]:
    """Our grid of each experiment beside the full grid of the thesis' table for its model."""
    by_model = {g["model"]: g for g in s.reference.get("grids", [])}
    lines = [
        "| Experiment | Thesis table | Thesis points | Our grid | Our points | Keys not in the thesis' table "
        "| Search runs finished | Final runs train |",
        "|---|---|---:|---|---:|---|---:|---|",
    ]
    for exp in s.experiments:
        grid = s.cfg["experiments"][exp].get("grid")
        g = by_model.get(s.settings[exp].get("model"))
        extra = grid_keys(grid) - grid_keys(g["grid"] if g else None)
        cells = [
            exp,
            f"Table {g['table']} ({g['model']})" if g else fmt.DASH,
            f"{len(C.grid_points({'grid': g['grid']})):,}" if g else fmt.DASH,
            _grid_text(grid),
            str(len(C.grid_points(s.cfg["experiments"][exp]))),
            ", ".join(sorted(extra)) or fmt.DASH,
            str(len(s.points.get(exp, []))) if grid else fmt.DASH,
            _chosen(s, exp),
        ]
        lines.append("| " + " | ".join(fmt.md(c) for c in cells) + " |")
    return lines + [
        "",
        "Thesis points = the full product of its table (all tied choices x every value list). The thesis "
        "bolds its chosen values; the bold is lost in the extracted text, but every one of its 16 value rows "
        "keeps one stray space beside one value, the lost mark (config/relreg-reference.yaml `bold`, "
        "re-derived from the text by tests/test_relreg_bold.py). Table 4.5's rows at those settings: "
        + (", ".join(e for _, e in rows(s, table=FIXED) if e) or "none in this config")
        + ". Table 4.4 bolds one set for all its rows, with ε = 1.0: the both row's; the thesis gives "
        + (
            ", ".join(
                r["model"] for r in s.reference["table45"] if r["id"] in s.reference.get("no_settings", [])
            )
            or "no row"
        )
        + " no settings, and at λ_cell = λ_non-cell they would be one model under two names: neither is "
        "trained at fixed settings.",
    ]


def _chosen(s: RelRegSuite, exp: str) -> str:
    """What the selection gave the final runs: the point, or the tie set they draw from."""
    sel = s.selections.get(exp)
    if not C.has_grid(s.cfg, exp):
        return "no search: fixed settings"
    if sel is None:
        return fmt.DASH
    if sel.get("draws"):
        drawn = len({d["point"] for d in sel["draws"]})
        left = s.surplus.get(exp, [])
        out = f"tie set of {len(sel.get('tied', []))}; {drawn} drawn"
        return out + (f"; {seeds_text(left)} not counted" if left else "")
    return f"`{sel.get('point')}`"


def off_grid(reference: dict[str, Any], denominator: Any) -> list[str]:
    """Table 4.5 values that are no multiple of 1/n, n = denominator(bits), to the printed 4
    decimals: no fraction of n counts can print as them. Tested where n < 10^4 (finer
    fractions hit every 4-decimal value)."""
    out = []
    for r in reference["table45"]:
        for k, v in sorted(r["acc"].items()):
            n = denominator(int(k))
            j = round(float(v) * n)
            if n < 10**4 and abs(j / n - float(v)) > 0.00005:
                out.append(f"{r['model']} {v:g} at {k} bits (nearest {j}/{n:,} = {j / n:.4f})")
    return out


def thirtieths(reference: dict[str, Any]) -> list[str]:
    """Rows whose every value is a multiple of 1/30 to the printed decimals (not all 0 or 1)."""
    out = []
    for r in reference["table45"]:
        vs = [float(v) for v in r["acc"].values()]
        if all(abs(round(v * 30) / 30 - v) <= 0.00005 for v in vs) and any(0 < v < 1 for v in vs):
            out.append(f"{r['model']}: " + ", ".join(f"{v:g} = {round(v * 30)}/30" for v in vs))
    return out


def between_counts(s: RelRegSuite) -> Counter[str]:
    """Where the thesis' value lies against our mean sequence accuracy and mean bit accuracy,
    over the Table 4.5 cells with both: 'equal to both' (all three equal, e.g. 100 %),
    'between' (inclusive), 'above both', 'below both'. Bit accuracy is never below
    sequence accuracy, so these four cover every cell."""
    out: Counter[str] = Counter()
    for r in cells(s, table=None):
        paper, seq, bit = r["paper"], r["seq"].mean, r["bit"].mean
        if paper is None or not r["experiment"] or math.isnan(seq) or math.isnan(bit):
            continue
        lo, hi = min(seq, bit), max(seq, bit)
        if math.isclose(lo, hi, abs_tol=1e-9) and math.isclose(paper, lo, abs_tol=1e-9):
            out["equal to both"] += 1
        elif paper > hi:
            out["above both"] += 1
        elif paper < lo:
            out["below both"] += 1
        else:
            out["between"] += 1
    return out


def copy_bit_accuracy(bits: int) -> float:
    """Bit accuracy (%) of copying the input, over all numbers of `bits` bits. The increment
    flips the trailing ones and the first zero (not the carry out of the top bit): a number
    ends in at least j ones with probability 2^-j, so it flips sum_{j<k} 2^-j = 2 - 2^(1-k)
    bits on average. Copying is exact on no number."""
    return 100.0 * (1.0 - (2.0 - 2.0 ** (1 - bits)) / bits)


def below_copying(reference: dict[str, Any]) -> list[str]:
    """Table 4.5 values below the bit accuracy of copying the input at their length."""
    return [
        f"{r['model']} {100 * float(v):.2f} at {k} bits (copying: {copy_bit_accuracy(int(k)):.2f})"
        for r in reference["table45"]
        for k, v in sorted(r["acc"].items())
        if 100 * float(v) < copy_bit_accuracy(int(k))
    ]


def metric_reading(s: RelRegSuite) -> str:
    """The thesis' metric, and where its values lie against our two accuracies (computed)."""
    c = between_counts(s)
    n = sum(c.values())
    against = (
        "Against our bit accuracy (a diagnostic only), the thesis' value lies between our exact match and "
        f"our bit accuracy in {c['between']} of {n} cells, above both in {c['above both']}, below both in "
        f"{c['below both']} and equals both in {c['equal to both']} (means of our seeds)."
        if n
        else "No cell has both a thesis value and a finished run."
    )
    copying = below_copying(s.reference)
    printed = sorted({int(k) for r in s.reference["table45"] for k in r["acc"]})
    return (
        "- **The thesis' metric.** Table 4.5's caption names its numbers the \"best sentence accuracy\" and "
        'the text "sequence-level accuracies": exact match over the k output bits, the metric of our '
        "Table 4.5 and of every verdict here. "
        + against
        + f" Copying the input, exact on no number, scores {copy_bit_accuracy(printed[0]):.2f} % bit "
        f"accuracy at {printed[0]} bits to {copy_bit_accuracy(printed[-1]):.2f} % at {printed[-1]} bits; "
        "thesis values below what copying scores at their length: "
        + ("; ".join(copying) or "none")
        + ". The thesis' values are no exact-match fraction of all 2^k numbers of their length (no multiple "
        "of 1/2^k to the printed 4 decimals): "
        + ("; ".join(off_grid(s.reference, lambda k: 2**k)) or "none")
        + ". Nor multiples of 1/(k·2^k), as a bit accuracy over all of them would be: "
        + ("; ".join(off_grid(s.reference, lambda k: k * 2**k)) or "none")
        + ". The thesis gives neither its test-set sizes nor how many runs a value averages, so neither "
        "reading is tested further; " + _enumerated(s)
    )


def _enumerated(s: RelRegSuite) -> str:
    """Which of our test lengths hold every number (first experiment's settings)."""
    st = next(iter(s.settings.values()), {})
    whole = [k for k in st.get("test_bits", []) if 2 ** int(k) <= int(st.get("test_count", 0))]
    return f"ours hold every number at {', '.join(map(str, whole))} bits." if whole else "ours are samples."


def readings(s: RelRegSuite) -> list[str]:
    st = next(iter(s.settings.values()), {})
    unplaced = "; ".join(
        f"{u['value']:g} (probably {u.get('bits')} bits): {u['note']}"
        for u in s.reference.get("unplaced", [])
    )
    return [
        metric_reading(s),
        "- **The Transformer row.** "
        + ("; ".join(thirtieths(s.reference)) or "No row")
        + ": multiples of 1/30, as from 30 test numbers per length or an average over 30 numbers, not from "
        "a full enumeration.",
        "- **Test-set sizes.** The thesis does not give them. Ours: "
        + (split_sizes(st) or fmt.DASH)
        + ". Validation (not in the thesis): "
        + (split_sizes(st, "valid_bits") or fmt.DASH)
        + ".",
        "- **16 bits.** Section 4.1 names a 16-bit test set but Table 4.5 stops at 14 bits; the extraction "
        f"shows a lone value after the last row: {unplaced or 'none'}. We report 16 bits without a thesis "
        "value.",
        "- **Training settings.** The thesis gives no epochs, batch size, optimizer, training-set size, "
        "validation data, gradient clipping or RMC memory slots; ours are listed under the study's choices.",
        "- **Grids.** Table 4.4 (proto-LSTMs) has no λ_whole: the proto L2 row sweeps our L2 values (see "
        "the grid table). The bold marks of Tables 4.1-4.4 survive as stray spaces (the grid table's note): "
        "Table 4.4's one bold set is the both row's (it holds ε = 1.0); Figures 4.1-4.2 name 4 "
        "proto-LSTM cells, the bold set 3.",
        "- **Figure 4.3.** The thesis prints two loading probabilities per step (a model with 2 cells, "
        "not the 4 of Figures 4.1-4.2) and its output column starts with the start token; ours shows the "
        "cells of the run drawn and the target bit of each step.",
    ]
