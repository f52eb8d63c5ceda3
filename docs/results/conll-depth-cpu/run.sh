#!/usr/bin/env bash
# Depth: the same CoNLL-03 FE grid (every fusion, N in {8, 32, 128}, 25 epochs, 3 trials, scored on one fixed 1000 dev
# sentences) on a 30-layer decoder LLM (SmolLM2-135M-Instruct, Llama architecture, dequantised from a 4-bit GGUF),
# MiniLM-L6 (6 layers) and MPNet-base (12 layers), on the 2-core CPU, one thread per sweep. MPNet ran Base, Concat and
# DWAtt first (what the depth question compares), as two shards side by side, then ScalarMix and Base+n. Run from
# the repository root (the SmolLM2 conversion needs `pip install gguf`); then docs/results/report.sh.
set -euo pipefail
here=docs/results/conll-depth-cpu
PYTHON=$(command -v python) ../shared/models/fetch.sh smollm2 models
../shared/models/fetch.sh minilm models
../shared/models/fetch.sh mpnet models
dwatt sweep --preset conll-depth --backbones models/SmolLM2-135M-Instruct-q4 --threads 1 \
  --results "$here/results.smollm2.jsonl" --output-root runs/depth --quiet
dwatt sweep --preset conll-depth --backbones models/all-MiniLM-L6-v2 --threads 1 \
  --results "$here/results.minilm.jsonl" --output-root runs/depth --quiet
pids=()
for shard in 0/2 1/2; do  # into results.mpnet.shard-0-of-2.jsonl and results.mpnet.shard-1-of-2.jsonl
  dwatt sweep --preset conll-depth --backbones models/all-mpnet-base-v2 --fusions base,concat,dwatt --threads 1 \
    --results "$here/results.mpnet.jsonl" --shard "$shard" --output-root runs/depth --quiet &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done  # a failed shard fails the script
dwatt sweep --preset conll-depth --backbones models/all-mpnet-base-v2 --fusions scalar_mix,base_plus_n --threads 1 \
  --results "$here/results.mpnet.jsonl" --output-root runs/depth --quiet
