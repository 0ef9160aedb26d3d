#!/usr/bin/env bash
# The decoder-input A/B on real reviews (results/recipe/imdb-decoder/README.md): 3,000
# training reviews cut to 300 characters, quick-imdb.yaml's imdb_ps60_predrec_a1 at lr 0.3
# for 3 epochs, one thread each, teacher-forced against estimate-fed decoders.
#   bash results/recipe/imdb-decoder/ab.sh ../shared/data/imdb [OUT]      # ~1 min on 2 cores
set -eu
src=${1:?folder with aclImdb_v1.tar.gz}; out=${2:-data/imdb-decoder}
python -m psrnn prepare imdb --raw "$src" --out "$out/prepared" \
  --set max_length=300 --set train=3000 --set valid=1000 --set test=1000
for d in teacher estimate; do
  python -m psrnn train --config config/quick-imdb.yaml --experiment imdb_ps60_predrec_a1 \
    --set data_dir="$out/prepared" --set lr=0.3 --set max_epochs=3 --set decoder_input=$d \
    --set progress=plain --threads 1 --out "$out/runs/$d" &
done
wait
