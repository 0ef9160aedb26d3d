#!/usr/bin/env bash
# The reduced-scale real-digit check of Table 2's MNIST rows (config/mnist-real.yaml), on
# a CPU. From the repository root, with ../shared/data/mnist-test present:
#
#   bash results/mnist-real/run.sh            # ~3 CPU-hours (1.5 h on 2 idle cores); re-run to resume
#
# Writes results/mnist-real/ (REPORT.md, tables, figures; runs/ and search/ hold each
# run's metrics.json and history.csv). DIGITS= names another folder holding the MNIST
# test set's IDX pair; CORES= the cores Snakemake may use (default 2).
set -euo pipefail
DIGITS=${DIGITS:-../shared/data/mnist-test}
CORES=${CORES:-2}
uv run --frozen python -m psrnn digits "$DIGITS" data/mnist-real/digits --train 5000
uv run --frozen snakemake --cores "$CORES" --configfile config/mnist-real.yaml
