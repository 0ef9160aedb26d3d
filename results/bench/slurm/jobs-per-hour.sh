#!/usr/bin/env bash
# Jobs per hour of the small config on a real one-node SLURM cluster, each training job
# submitted alone (profiles/slurm) against batched (profiles/slurm + profiles/batch).
# Needs root (it starts munged, slurmctld and slurmd through tests/slurm/cluster.sh and
# stops them at the end). From the repository root, nothing else running:
#
#   bash results/bench/slurm/jobs-per-hour.sh                # the whole small config, ~15 min on 2 cores
#   ONLY=mnist bash results/bench/slurm/jobs-per-hour.sh     # its MNIST rows only, ~8 min
#
# Each variant runs the small config (every dataset: 30 final + 2 search runs and compile;
# ONLY=mnist: 8 final + 2 search runs) in a fresh folder under $WORK (default
# /tmp/psrnn-slurm-bench), then `psrnn check` against tests/expected/small.json: batching
# must not change a number. Writes
# results/bench/slurm/jobs-per-hour.md (wall time, the CPU time of the whole machine from
# /proc/stat, Snakemake jobs and SLURM jobs per variant).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
WORK=${WORK:-/tmp/psrnn-slurm-bench}
OUT=$ROOT/results/bench/slurm/jobs-per-hour${ONLY:+-$ONLY}.md
PY=$ROOT/.venv/bin/python
export PATH=$ROOT/.venv/bin:$PATH
rm -rf "$WORK" && mkdir -p "$WORK"
bash "$ROOT/tests/slurm/cluster.sh" install
bash "$ROOT/tests/slurm/cluster.sh" start "$WORK/cluster"
trap 'bash "$ROOT/tests/slurm/cluster.sh" stop "$WORK/cluster"' EXIT

busy() { awk '/^cpu / {print ($2 + $3 + $4 + $7 + $8) / 100}' /proc/stat; }  # CPU-seconds not idle

rows=()
for variant in single batch; do
  dir=$WORK/$variant && mkdir -p "$dir"
  printf 'extends: %s\nname: small\n' "$ROOT/config/small.yaml" > "$dir/small.yaml"
  if [ -n "${ONLY:-}" ]; then  # the other datasets off, and with them their experiments
    printf 'datasets:\n' >> "$dir/small.yaml"
    for ds in mnist fmnist cifar10 imdb dbpedia; do
      [ "$ds" = "$ONLY" ] || printf '  %s: {enabled: false}\n' "$ds" >> "$dir/small.yaml"
    done
  fi
  extra=()
  [ "$variant" = batch ] && extra=(--profile "$ROOT/profiles/batch")
  cpu0=$(busy); t0=$(date +%s.%N)
  (cd "$dir" && "$PY" -m snakemake -s "$ROOT/Snakefile" --configfile=small.yaml \
    --workflow-profile "$ROOT/profiles/slurm" "${extra[@]}" > snakemake.log 2>&1)
  t1=$(date +%s.%N); cpu1=$(busy)
  steps=$(grep -oE '^[0-9]+ of [0-9]+ steps' "$dir/snakemake.log" | tail -1 | cut -d' ' -f1)
  slurm=$(grep -c 'has been submitted with SLURM jobid' "$dir/snakemake.log")
  # tests/expected/small.json's runs of the experiments this config runs (run ids: name/experiment/...)
  PYTHONPATH=$ROOT/src "$PY" -c "
import json, sys
from psrnn import config as C
cfg = C.load_suite('$dir/small.yaml')
exp = json.load(open('$ROOT/tests/expected/small.json'))
exp['runs'] = {k: v for k, v in exp['runs'].items() if k.split('/')[1] in C.enabled_experiments(cfg)}
json.dump(exp, open('$dir/expected.json', 'w'), indent=2)"
  check=$(cd "$dir" && PYTHONPATH=$ROOT/src "$PY" -m psrnn check --config small.yaml \
    --expected expected.json 2>&1 | tail -1)
  rows+=("$(awk -v v="$variant" -v s="$steps" -v j="$slurm" -v w="$(echo "$t1 - $t0" | bc)" \
    -v c="$(echo "$cpu1 - $cpu0" | bc)" -v k="$check" \
    'BEGIN {printf "| %s | %d | %d | %.1f | %.1f | %.0f | %s |", v, s, j, w / 60, c / 60, s / (w / 3600), k}')")
done

{
  echo "# Jobs per hour on a real one-node SLURM cluster"
  echo
  echo "\`bash results/bench/slurm/jobs-per-hour.sh\` at commit $(git -C "$ROOT" rev-parse --short HEAD)," \
    "$(date -u +%Y-%m-%d). Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
    "Slurm $(sinfo -V | cut -d' ' -f2), snakemake-executor-plugin-slurm" \
    "$("$PY" -c 'import importlib.metadata as m; print(m.version("snakemake-executor-plugin-slurm"))');" \
    "load average at the end: $(cut -d" " -f1-3 /proc/loadavg) (1, 5, 15 min)."
  echo
  echo "The small config (${ONLY:-every dataset}) each time, in a fresh folder. single:" \
    "\`--workflow-profile profiles/slurm\` (every job a SLURM job). batch: the same plus" \
    "\`--profile profiles/batch\` (up to 8 pieces of the DAG per SLURM job: an experiment's search, selection and final runs are one piece, any other final run one; 2 CPUs a batch)." \
    "CPU: the whole machine's busy time (/proc/stat) over the run. Check: \`psrnn check\`" \
    "against tests/expected/small.json."
  echo
  echo "| variant | Snakemake jobs | SLURM jobs | wall min | CPU min | jobs per hour | check |"
  echo "|---|---:|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
} > "$OUT"
cat "$OUT"
