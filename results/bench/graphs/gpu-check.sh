#!/usr/bin/env bash
# The GPU check of RunConfig.cuda_graphs (results/bench/graphs/README.md): three of
# quick.yaml's MNIST models trained 3 epochs on 7,000 real digits at 784 steps, graphed and
# eager, compared (metrics.json and history.csv); then `bench --only graphs` and the
# budgets of quick.yaml and paper.yaml with the graphed step. Everything lands in one
# archive, $OUT/out42.tgz, after each part.
#   PYTHONPATH=src OUT=/tmp/out bash results/bench/graphs/gpu-check.sh ../shared/data/mnist-test
set -u
digits=${1:?folder with t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz}
DEST=${OUT:-/tmp/dest42}; OUT=/tmp/o42; mkdir -p $OUT/b $DEST
save() { tar czf $DEST/out42.tgz --exclude="*.pt" -C $OUT . ; }
EPOCHS=${EPOCHS:-3}; EXPS=${EXPS:-mnist_gru mnist_ps30_predrec_a40 mnist_full_rec_a20}
note="$(nvidia-smi -L | head -1), code $(git rev-parse --short HEAD 2>/dev/null)"
d=/tmp/digits42
t0=$(date +%s)
python3 -m psrnn digits "$digits" $d/raw --train 8000 && \
python3 -m psrnn prepare mnist --raw $d/raw --out $d/prepared --set valid_size=1000 > $OUT/prepare.log 2>&1 || { echo prepare failed; cat $OUT/prepare.log; }
for e in $EXPS; do
  for g in true false; do
    /usr/bin/time -f "$e graphs=$g wall %e s user %U s sys %S s" timeout 150 python3 -m psrnn train --config config/quick.yaml \
      --experiment $e --set data_dir=$d/prepared --set max_epochs=$EPOCHS --set lr=0.3 --set cuda_graphs=$g \
      --set progress=plain --out $OUT/runs/$e-graphs-$g > $OUT/runs-$e-$g.log 2>&1
    tail -1 $OUT/runs-$e-$g.log
  done
done
python3 results/bench/graphs/compare.py $OUT/runs | tee $OUT/compare.txt
echo "real-digit runs done at $(( $(date +%s) - t0 )) s"; save
[ -n "${NOBENCH:-}" ] && exit 0
timeout 150 python3 -m psrnn bench --device cuda --only graphs --threads 4 --out $OUT/b --name graphs-h200 --note "$note"
echo "graphs bench done at $(( $(date +%s) - t0 )) s"; save
timeout 90 python3 -m psrnn bench --config config/quick.yaml --device cuda --only budget --threads 4 --out $OUT/b --name quick-budget-h200 --note "$note; cuda_graphs on (default)"
echo "quick budgets done at $(( $(date +%s) - t0 )) s"; save
timeout 170 python3 -m psrnn bench --config config/paper.yaml --device cuda --only budget --threads 4 --out $OUT/b --name paper-budget-h200 --note "$note; cuda_graphs on (default)"
echo "all done at $(( $(date +%s) - t0 )) s"; save
