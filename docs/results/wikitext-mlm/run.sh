#!/usr/bin/env bash
# WikiText-2 masked LM (Table 3), FT, batch 8, 128-token blocks, best-dev checkpoint, 1 epoch, MiniLM-L6 on the
# 2-core CPU. No train split is available offline: the first 90% of valid.txt trains, its last 10% is the dev split,
# test.txt gives the perplexity. MiniLM ships no masked-LM head: the head starts fresh (its vocabulary projection a
# copy of the input embeddings). Run from the repository root.
set -euo pipefail
../shared/models/fetch.sh minilm models
dwatt sweep --preset wikitext-mlm --backbones models/all-MiniLM-L6-v2 --data-dir ../shared/data/wikitext-2 --epochs 1 \
  --threads 1 --results docs/results/wikitext-mlm/results.jsonl --output-root runs/mlm
