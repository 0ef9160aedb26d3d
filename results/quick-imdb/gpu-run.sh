#!/usr/bin/env bash
# config/quick-imdb.yaml without Snakemake, for a GPU host that has torch but not the
# workflow tools (a lent GPU machine): the jobs the Snakefile runs, in the same order.
#   bash results/quick-imdb/gpu-run.sh [LIMIT]          # again until it prints "compiled"
#   JOBS=8 bash results/quick-imdb/gpu-run.sh           # 8 search runs at once
# LIMIT (seconds, default none) stops every training run after that long. A run resumes
# from its last checkpoint and a finished one is skipped, so the work can be done in
# pieces; a run another process is training is refused (its folder is held), so a second
# call while the first goes on only starts what is not running.
# The 16 search runs (4 rates x 4 rows) share the one GPU, JOBS at a time (default 4).
# Measured on one H100 80GB with the earlier 3-rate grid (results/quick-imdb/GPU-RUN.md):
# 12 at once ran out of GPU memory (5 runs failed
# in their first epoch: under PyTorch's caching allocator a process held 7-18 GB); 7-9 at
# once fit, under CUDA MPS (`nvidia-cuda-mps-control -d`, as root, before this script),
# with expandable segments (set below) holding 6-12 GB each.
# Then select, the final runs (each the search run at the selected rate, `train --reuse`)
# and compile. Where Snakemake is installed, use it instead (README).
# CONFIG=<file> runs another config that extends quick-imdb.yaml (a cut, a test).
set -u
cfg=${CONFIG:-config/quick-imdb.yaml}; limit=${1:-0}; jobs=${JOBS:-4}
py=${PYTHON:-python3}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
read -r R D < <($py -c "from psrnn import config as C; c = C.load_suite('$cfg'); print(C.results_root(c), C.data_root(c))") || exit
points=$($py -c "
from psrnn import config as C
c = C.load_suite('$cfg')
for e in C.enabled_experiments(c):
    print(*[f'{e}/{p}' for p, _ in C.grid_points(c['experiments'][e])])") || exit

if [ ! -f "$D/prepared/imdb/manifest.json" ]; then
  $py -m psrnn download imdb --config "$cfg" && $py -m psrnn prepare imdb --config "$cfg" || exit
fi
train() {  # train <log> <out> <args>: one run, cut at LIMIT seconds
  local log=$1 out=$2; shift 2
  mkdir -p "$(dirname "$log")"
  echo "--- $(date -u +%FT%TZ) $py -m psrnn train --out $out $*" >> "$log"  # appended: a second
  OMP_NUM_THREADS=1 timeout "$limit" $py -m psrnn train --config "$cfg" --seed 0 --out "$out" \
    --restart-on-change --threads 1 "$@" >> "$log" 2>&1                      # call keeps the first's log
  echo "$out rc=$? ($(tail -n 1 "$log" | tr -d '\000'))"
}
running=0
for ep in $points; do
  train "$R/logs/search/$ep.log" "$R/search/$ep" --experiment "${ep%%/*}" --point "${ep#*/}" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
for ep in $points; do
  [ -f "$R/search/$ep/metrics.json" ] || { echo "search not finished: run again"; exit 3; }
done
for e in $(printf '%s\n' $points | cut -d/ -f1 | uniq); do
  $py -m psrnn select --config "$cfg" --experiment "$e" || exit
  train "$R/logs/train/$e/seed0.log" "$R/runs/$e/seed0" --experiment "$e" --selected "$R/search/$e/selected.json"
done
$py -m psrnn compile --config "$cfg" && echo "compiled: $R/tables/table2.md, $R/REPORT.md"
