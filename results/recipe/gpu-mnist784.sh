#!/usr/bin/env bash
# The GPU runs of results/recipe/gpu-h100-mnist784.md: config/quick.yaml's MNIST rows (and
# recipe variants) on 10K real digits at 784 steps, several runs at once on one GPU.
#   bash results/recipe/gpu-mnist784.sh <folder with t10k-*-ubyte.gz> [LIMIT seconds per run]
# Batch C (quick.yaml as committed) is the default; BATCH=A or BATCH=B gives the others.
set -u
digits=${1:?folder with the MNIST test set}; limit=${2:-440}
d=data/gpu784; R=${RUNS:-results/recipe/gpu784}
python -m psrnn digits "$digits" $d/raw/mnist --train 8000 &&
python -m psrnn prepare mnist --raw $d/raw/mnist --out $d/prepared/mnist --set valid_size=1000 || exit
run() { name=$1; shift; OMP_NUM_THREADS=2 timeout "$limit" python -m psrnn train --config config/quick.yaml \
          --set data_dir=$d/prepared/mnist --out $R/$name "$@" > $R/$name.log 2>&1; echo "$name rc=$?"; }
mkdir -p $R
case ${BATCH:-C} in
A) for e in mnist_gru mnist_full_rec_a1 mnist_full_rec_a20 mnist_ps30_rec_a1 mnist_ps30_predrec_a40; do
     run $e --experiment $e --set lr=1.0 & done
   run mnist_gru_shipped --experiment mnist_gru --set init=torch --set lr=0.03 &
   run mnist_gru_adamwr --experiment mnist_gru --set optimizer=adamwr --set lr=0.002 & ;;
B) run gru_lr0.3 --experiment mnist_gru --set lr=0.3 &
   run gru_lr0.1 --experiment mnist_gru --set lr=0.1 &
   run gru_adamwr_chrono --experiment mnist_gru --set optimizer=adamwr --set lr=0.002 &
   run full1_lr0.3 --experiment mnist_full_rec_a1 --set lr=0.3 &
   run full20_lr0.3 --experiment mnist_full_rec_a20 --set lr=0.3 &
   run ps30pr40_lr0.3 --experiment mnist_ps30_predrec_a40 --set lr=0.3 &
   run ps30pr40_lr0.1 --experiment mnist_ps30_predrec_a40 --set lr=0.1 &
   run ps30pr40_adamwr_chrono --experiment mnist_ps30_predrec_a40 --set optimizer=adamwr --set lr=0.002 & ;;
C) for e in mnist_gru mnist_full_rec_a1 mnist_full_rec_a20 mnist_ps30_rec_a1 mnist_ps30_predrec_a40; do
     run $e --experiment $e & done ;;
esac
wait
