"""What each output of a `study: relreg` suite shows: the figures' titles (drawn on the
figures and their captions in REPORT.md) and every compiled file's caption in Snakemake's
HTML report (`snakemake --report`, psrnn.workflow.report_items), by output stem.

    snakemake --configfile config/relreg.yaml --report results/relreg/report.html
"""

from __future__ import annotations

from typing import Any

FIGURE_TITLES = {  # also their captions in REPORT.md
    "fig41_lstm_vs_proto": "Figure 4.1: test sequence accuracy against the number of bits, every grid "
    "point of the LSTM and the 4 proto-LSTMs (both with L2)",
    "fig42_regularizers": "Figure 4.2: test sequence accuracy against the number of bits, every grid "
    "point of the 4 proto-LSTMs with each regularization",
    "fig43_loading_steps": "Figure 4.3: loading probability of each proto-LSTM cell at each step "
    "(inference, two 9-bit examples)",
    "fig44_loading_epochs": "Figure 4.4: histogram of the loading probabilities on the validation "
    "data after each epoch",
}
FOREST_TITLE = (  # psrnn.studies.relreg.forest; drawn for a paper-scale config (psrnn.report.forest_drawn)
    "Table 4.5's verdicts: per experiment and number of bits, the thesis' value in its margin and our "
    "mean with its 95% interval, coloured by verdict"
)
FOREST_SENTENCE = (
    "The forest plot [`figures/verdicts_forest.png`](figures/verdicts_forest.png) shows every cell of "
    "both Table 4.5s with a thesis value and runs: the thesis' value (open diamond) in its equivalence "
    "margin (grey band) and our mean with the 95 % interval the verdict uses, coloured by the verdict."
)
REPORT_CAPTIONS = {
    "table45": "Table 4.5 of the thesis as our grid search selects its rows: test sequence accuracy "
    "(%, exact match) per number of bits of the Binary Counter, the thesis' beside ours (mean [95% "
    "interval] over seeds, seeds at >= 99 %, bit accuracy as a diagnostic), with a verdict "
    "and, where not reproduced, its cause per row and length",
    "table45_thesis": "Table 4.5 of the thesis with each row trained at the settings its Tables 4.1-4.4 "
    "bold: test sequence accuracy (%, exact match) per number of bits, the thesis' beside ours (mean "
    "[95% interval] over seeds, seeds at >= 99 %), with a verdict and its cause",
    "ablations": "Table 4.5a (ours): each Table 4.5 experiment beside the same one with one run setting "
    "changed (the Transformer's causal mask, the numbers selected on), with the difference of their "
    "means per number of bits (95% interval)",
    **FIGURE_TITLES,
    "verdicts_forest": FOREST_TITLE,
    "REPORT": "the reproduction report: the study's choices, grids against Tables 4.1-4.4, verdicts of "
    "Table 4.5, the ablations, provenance",
    "metrics": "summary metrics: mean test sequence and bit accuracy per experiment and number of bits",
}


def report_captions(cfg: dict[str, Any]) -> dict[str, str]:
    """Output stem -> caption of every file `compile` writes."""
    from psrnn import config as C
    from psrnn.report.curves import captions

    data = captions(C.enabled_experiments(cfg), "validation sequence accuracy and train/validation loss")
    return {**REPORT_CAPTIONS, **data}
