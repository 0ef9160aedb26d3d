#!/usr/bin/env bash
# Table 2's IMDB rows in about ten minutes of one H100/H200 (config/quick-imdb-10min.yaml):
# gpu-run.sh with that config and all 8 search runs at once on the one GPU, under CUDA MPS
# where it can be started (several processes then share the GPU's cores), then select,
# the final runs (each its selected search run, reused) and compile.
#   bash results/quick-imdb/gpu-10min.sh [LIMIT]     # LIMIT: seconds per training run (default 540)
#   CONFIG=<file> bash results/quick-imdb/gpu-10min.sh  # a config extending it (a toy, a test)
# Carry the review archive (../shared/data/imdb/aclImdb_v1.tar.gz, 29 MB) into
# data/archives/imdb/ of the checkout: the config reads it there when ../shared is absent.
set -u
here=$(dirname "$0")
export CONFIG=${CONFIG:-config/quick-imdb-10min.yaml} JOBS=${JOBS:-8}
mps=""
if [ "${MPS:-auto}" != off ] && command -v nvidia-cuda-mps-control > /dev/null && nvidia-smi > /dev/null 2>&1; then
  nvidia-cuda-mps-control -d 2> /dev/null && mps=1 && echo "CUDA MPS started"
fi
start=$(date +%s)
bash "$here/gpu-run.sh" "${1:-540}"; rc=$?
echo "gpu-10min: rc $rc after $(( $(date +%s) - start )) s"
[ -n "$mps" ] && echo quit | nvidia-cuda-mps-control
exit $rc
