"""What each compiled output of a first-study suite shows, by output stem: its caption in
Snakemake's HTML report (`snakemake --report`, psrnn.workflow.report_items). The figures'
captions are their titles (psrnn.studies.private_shared.results.FIGURE_TITLES); each
table names the paper's table it reproduces; each learning-curve figure names its experiment.

    snakemake --configfile config/small.yaml --report results/small/report.html
"""

from __future__ import annotations

from typing import Any

from psrnn import config as C
from psrnn.report.curves import captions as curve_captions
from psrnn.studies.private_shared.results import FIGURE_TITLES

REPORT_CAPTIONS = {
    "table1": "Table 1 of the paper (dataset statistics): mean sequence length and split sizes, the "
    "paper's beside ours measured from the prepared data",
    "table2": "Table 2 of the paper (main results): test accuracy (%) of every model row, ours as mean "
    "± std over seeds beside the paper's, with the difference",
    "table3": "Table 3 of the paper: test accuracy (%) on sequential MNIST and CIFAR-10, published "
    "results beside our best model of each kind",
    "table4": "Table 4 of the paper (shared-proportion sweep, CIFAR-10): test accuracy, main and "
    "auxiliary loss and parameters, ours beside the paper's",
    "psrnn-config": "the config's settings and run counts as LaTeX macros for paper/main.tex",
    **FIGURE_TITLES,
    "REPORT": "the reproduction report: verdicts against the paper, deviations, provenance",
    "metrics": "summary metrics per experiment (`dvc metrics show`)",
}


def report_captions(cfg: dict[str, Any]) -> dict[str, str]:
    """Output stem -> caption of every file `compile` writes for a validated suite config:
    REPORT_CAPTIONS, and one per experiment's learning curves."""
    curves = {}
    for exp in C.enabled_experiments(cfg):
        spec = cfg["experiments"][exp]
        row = f"; the paper's row {spec['ref']}" if spec.get("ref") else ""
        curves[f"curves_{exp}"] = (
            f"Learning curves of {exp} ({spec['dataset']}{row}): validation accuracy, train and "
            "validation main and auxiliary loss per epoch, every seed, its best epoch dotted"
        )
    data = curve_captions(C.enabled_experiments(cfg), "validation accuracy and train/validation main loss")
    return {**REPORT_CAPTIONS, **curves, **data}
