#!/usr/bin/env bash
# CoNLL-03, FE, every fusion, N in {8, 32, 128}, 25 epochs, 3 trials, MiniLM-L6 (6 x 384) on the 2-core CPU:
# the part of the paper's Figure 2/3 grid that fits one CPU session (the full grid: 5 N x 4 budgets x 5 trials).
# Full dev split (3250 sentences) scored after every epoch. Run from the repository root.
set -euo pipefail
../shared/models/fetch.sh minilm models
dwatt sweep --preset conll-fe --backbones models/all-MiniLM-L6-v2 --n-shots 8,32,128 --epochs 25 --trials 3 --threads 1 \
  --results docs/results/conll-fe-cpu/results.jsonl --output-root runs/conll
# first-launch-n16.jsonl: the two runs (Base and Base+n, N=16, trial 0) that a first launch with all five N values
# finished before it was stopped and relaunched with the three N above; kept aside so that results.jsonl is exactly
# what this script produces.
