#!/usr/bin/env bash
# CoNLL-03, FE, every fusion, N = 128, epoch budgets 50/75/100, MiniLM-L6 (6 x 384) on the 2-core CPU: the paper's
# headline cell (N = 128, 100 epochs) and the N = 128 column of Figure 3, next to the 25-epoch runs of conll-fe-cpu.
# Full dev split (3250 sentences), scored after every epoch, as in conll-fe-cpu, so that the two share one grid.
# The three budgets of a run train together (dwatt.budgets: one AdamW and one linear schedule per budget, on the
# same cached features and sample); trials come one after another, so an interrupted run keeps whole trials.
# Run from the repository root.
set -euo pipefail
../shared/models/fetch.sh minilm models
dwatt sweep --preset conll-fe --backbones models/all-MiniLM-L6-v2 --n-shots 128 --epochs 50,75,100 --trials 3 \
  --threads 2 --engine budgets \
  --results docs/results/conll-fe-budgets-cpu/results.jsonl --output-root runs/conll-budgets
