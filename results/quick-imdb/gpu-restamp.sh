#!/usr/bin/env bash
# The proof of results/quick-imdb-10min/ under today's training code, in one GPU command:
# its 12 runs record training digest 414cd57a; `python -m psrnn restamp` trains the 8 search
# runs again (the 4 final runs reused theirs), 8 at a time under CUDA MPS, and re-stamps them
# only if every one gives its recorded numbers bit for bit. A GPU run is re-trained only on
# the GPU model and torch it recorded (NVIDIA H200, torch 2.11.0+cu130): anywhere else the
# command stops in one line before it trains. Expect about 8 min on one H200 (the runs took
# 6.9 min at most under gpu-10min.sh, plus preparing the reviews).
#   bash results/quick-imdb/gpu-restamp.sh
#   CONFIG=<file> JOBS=<n> bash results/quick-imdb/gpu-restamp.sh
# Carry the review archive into data/archives/imdb/ of the checkout (as for gpu-10min.sh).
# If CUDA does not give the same bits again, restamp stops at the first run that differs
# and writes nothing: then re-run the results with gpu-10min.sh under today's code.
set -u
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
config=${CONFIG:-config/quick-imdb-10min.yaml}
py=${PYTHON:-python3}
start=$(date +%s)
$py -m psrnn download imdb --config "$config" && $py -m psrnn prepare imdb --config "$config" || exit $?
mps=0
if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d 2>/dev/null; then mps=1; fi
$py -m psrnn restamp --config "$config" --jobs "${JOBS:-8}"; rc=$?
if [ "$mps" = 1 ]; then echo quit | nvidia-cuda-mps-control; fi
echo "gpu-restamp: rc $rc after $(( $(date +%s) - start )) s (CUDA MPS: $mps)"
exit $rc
