#!/usr/bin/env bash
# The fair comparison on text classification (beyond the paper): AG News (the vendored offline split), FE, N in
# {16, 64} examples per class, the agnews-fe protocol (20 epochs, 800 fixed dev examples, 3 trials), every method at
# each of five peak learning rates: a Base head on every single layer (a probe), ScalarMix, Concat, Base+n and DWAtt,
# each pooled the model's way (mean on an encoder, the last token on a decoder). The report chooses each method's
# learning rate (and the best single layer) on dev per trial and reports the test accuracy of that choice. Each
# backbone's grid runs as two shards side by side, one thread each; a stopped grid resumes where it stopped.
# The backbones are the folders ../shared/models/fetch.sh writes (minilm, smollm2) under models/.
set -euo pipefail
# Run from the repository root.
RATES=5e-5,3e-4,1e-3,3e-3,1e-2
for BACKBONE in models/all-MiniLM-L6-v2 models/SmolLM2-135M-Instruct-q4; do
  NAME=$(basename "$BACKBONE")
  for SHARD in 0 1; do
    dwatt sweep --preset agnews-fe --fusions base,scalar_mix,concat,base_plus_n,dwatt --probe-layers all \
      --learning-rates "$RATES" --n-shots 16,64 --backbones "$BACKBONE" --test \
      --results "docs/results/fair-agnews/fair.$NAME.jsonl" --shard "$SHARD/2" --threads 1 \
      --output-root runs/fair-agnews --quiet &
  done
  wait
done
dwatt report docs/results/fair-agnews/fair.*.jsonl --output docs/results/fair-agnews/report \
  --title "Fair comparison on AG News: each method at its own learning rate, chosen on dev, scored on test"
