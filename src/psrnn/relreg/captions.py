"""What each output of a `study: relreg` suite shows: the figures' titles (drawn on the
figures and their captions in REPORT.md) and every compiled file's caption in Snakemake's
HTML report (`snakemake --report`, psrnn.workflow.report_item), by output stem.

    snakemake --configfile config/relreg.yaml --report results/relreg/report.html
"""

from __future__ import annotations

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
