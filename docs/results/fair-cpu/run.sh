#!/usr/bin/env bash
# A fair comparison (beyond the paper): on CoNLL-03, FE, N in {32, 128}, 25 epochs, 3 trials, 1000 fixed dev
# sentences, every method gets each of four peak learning rates: a Base head on every layer (a probe), ScalarMix,
# Concat, Base+n and DWAtt. The report chooses each method's learning rate (and the best single layer) on dev per
# trial and reports the test F1 of that choice. Each backbone's grid runs as two shards side by side, one thread
# each (two cores); a stopped grid resumes where it stopped when run again.
# The backbones are the folders ../shared/models/fetch.sh writes (minilm, mpnet, smollm2) under models/.
set -euo pipefail
# Run from the repository root.
RATES=5e-5,3e-4,1e-3,3e-3
for BACKBONE in models/all-MiniLM-L6-v2 models/SmolLM2-135M-Instruct-q4 models/all-mpnet-base-v2; do
  NAME=$(basename "$BACKBONE")
  for SHARD in 0 1; do
    dwatt sweep --fusions base,scalar_mix,concat,base_plus_n,dwatt --probe-layers all --learning-rates "$RATES" \
      --n-shots 32,128 --epochs 25 --trials 3 --dev-sentences 1000 --backbones "$BACKBONE" --test \
      --engine budgets --results "docs/results/fair-cpu/fair.$NAME.jsonl" --shard "$SHARD/2" --threads 1 \
      --output-root runs/fair --quiet &
  done
  wait
done
dwatt report docs/results/fair-cpu/fair.*.jsonl --output docs/results/fair-cpu/report \
  --title "Fair comparison: each method at its own learning rate, chosen on dev, scored on test"
