"""The results of a suite config: the paper's tables and figures, a reproduction report and
the paper build, from finished runs (`python -m psrnn compile` runs
psrnn.studies.private_shared.results.compile).

    python -m psrnn compile --config config/small.yaml            # tables, figures, REPORT.md
    python -m psrnn paper --config config/paper.yaml      # then the paper PDF (latexmk;
    psrnn.studies.private_shared.results.paper)

Reads `results/<name>/runs/<experiment>/seed<k>/` (metrics.json, history.csv,
hidden_states.npz, grad_norms.npz), `data/<name>/prepared/<dataset>/manifest.json` and
`config/reference.yaml`; writes under `results/<name>/`:

    tables/table{1,2,3,4}.{csv,md,tex}, tables/psrnn-config.tex (config macros for paper/main.tex)
    figures/{fig1_gradient_norms,fig2_shared_proportion,fig3_hidden_states,curves_<exp>}.{pdf,png,svg}
    figures/verdicts_forest.{pdf,png,svg}   Table 2's verdicts as a forest plot (forest)
    REPORT.md, metrics.json (summary for `dvc metrics show`)
    (paper/paper.pdf and paper/build.json come from `python -m psrnn paper`,
    psrnn.studies.private_shared.results.paper)

Same inputs give byte-identical outputs; unfinished runs are shown as missing ("—").
Every study's config is compiled by its results module (psrnn.registry): the first
study's is psrnn.studies.private_shared.results.compile, the second's
psrnn.studies.relreg.results (Table 4.5 and Figures 4.1-4.4); both build on psrnn.report.
Modules: compile (the command), reading (what it reads beyond psrnn.report.collect: model
kinds, Table 1's manifest numbers, the rows a `ref:` names), tables, figures, forest, report,
paper.
This file holds what the workflow needs without them: the output names and figure titles.
"""

from __future__ import annotations

from typing import Any

TABLES = ("table1", "table2", "table3", "table4")
FIGURE_TITLES = {  # the figures' titles, also their captions in REPORT.md and --report
    "fig1_gradient_norms": "Figure 1, measured: gradient norm per time step w.r.t. the hidden state "
    "(best checkpoint)",
    "fig2_shared_proportion": "Figure 2: accuracy and losses against the shared proportion (CIFAR-10)",
    "fig3_hidden_states": "Figure 3: hidden-state pictures "
    "(each unit's values over time, one square per unit)",
    # not the paper's: Table 2's verdicts (psrnn.studies.private_shared.results.forest), drawn
    # where psrnn.report.forest_drawn says
    "verdicts_forest": "Table 2's verdicts: per row, the paper's accuracy in its margin and our mean "
    "with its 95% interval, coloured by verdict",
}
FOREST_SENTENCE = (
    "The forest plot [`figures/verdicts_forest.png`](figures/verdicts_forest.png) shows every Table 2 "
    "row this config runs: the paper's accuracy (open diamond) in its equivalence margin (grey band) "
    "and our mean with the 95 % interval the verdict uses, coloured by the verdict."
)


def paper_figures(cfg: dict[str, Any]) -> list[str]:
    """The paper's figures this config can draw (no placeholder for a switched-off dataset):
    Figure 1 needs a private/shared experiment or the Figure 3 one, Figure 2 a Table 4
    (CIFAR-10 sweep) experiment, Figure 3 an experiment with `figure: fig3`."""
    from psrnn import config as C

    names = C.enabled_experiments(cfg)
    exps = [cfg["experiments"][e] for e in names]
    fig3 = any(e.get("figure") == "fig3" for e in exps)
    table4 = any(str(e.get("ref", "")).startswith("table4/") for e in exps)
    aux = any(C.resolve_run(cfg, e, C.search_seed(cfg)).has_aux for e in names)
    wanted = {
        "fig1_gradient_norms": aux or fig3,
        "fig2_shared_proportion": table4,
        "fig3_hidden_states": fig3,
    }
    return [stem for stem, ok in wanted.items() if ok]
