#!/usr/bin/env bash
# Table 2's IMDB rows in one ten-minute command on one H100/H200 (config/quick-imdb-10min.yaml):
# `python -m psrnn gpu-run` plans how many runs share the GPU from their measured memory
# (results/bench/gpu-runs-measured.json), prints the plan, starts CUDA MPS where it can,
# prepares the reviews, trains the 8 search runs slowest first (a run that still runs out of
# memory starts again once another has ended), selects, reuses each selected search run as
# the final run and compiles. Run on one H200: 467 s (results/quick-imdb-10min/GPU-RUN.md).
#   bash results/quick-imdb/gpu-10min.sh
#   CONFIG=<file> bash results/quick-imdb/gpu-10min.sh   # a config extending it (a toy, a test)
#   GPU_GB=79.2 ...                                     # plan for that memory (no GPU: a CPU test)
#   MPS=off ...                                         # no CUDA MPS
# Carry the review archive (../shared/data/imdb/aclImdb_v1.tar.gz, 29 MB) into
# data/archives/imdb/ of the checkout: the config reads it there when ../shared is absent.
# The same command again finishes what an interrupted call left (finished runs are skipped).
set -u
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
start=$(date +%s)
${PYTHON:-python3} -m psrnn gpu-run --config "${CONFIG:-config/quick-imdb-10min.yaml}" --mps "${MPS:-auto}" \
  ${GPU_GB:+--gpu-gb "$GPU_GB"}; rc=$?
echo "gpu-10min: rc $rc after $(( $(date +%s) - start )) s"
exit $rc
