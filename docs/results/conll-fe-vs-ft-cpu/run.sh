#!/usr/bin/env bash
# Figure 6 on the 2-core CPU: FE against FT on CoNLL-03, the four paper models, N in {8, 128}, 50 epochs, one trial
# (seed 0), MiniLM-L6 (6 x 384). Dev: a fixed random 500 sentences of the dev split, scored after every epoch (an FT
# epoch re-runs the whole backbone on them). FT at N=128 takes 15-30 minutes a run on this machine, so one session
# held one trial; more trials: raise --trials (finished runs are skipped). results.jsonl also holds 12 of trial 1's
# 16 runs (all but FT at N=128), from --trials 2 launches stopped for lack of session time.
# Run from the repository root.
set -euo pipefail
../shared/models/fetch.sh minilm models
dwatt sweep --preset conll-fe-vs-ft --backbones models/all-MiniLM-L6-v2 --dev-sentences 500 --threads 2 --trials 1 \
  --results docs/results/conll-fe-vs-ft-cpu/results.jsonl --output-root runs/fe-vs-ft
