#!/usr/bin/env bash
# Figure 6 on the 2-core CPU: FE against FT on CoNLL-03, the four paper models, N in {8, 128}, 50 epochs,
# MiniLM-L6 (6 x 384). Dev: a fixed random 500 sentences of the dev split, scored after every epoch (an FT epoch
# re-runs the whole backbone on them, 7 s per 1000 sentences here). FT at N=128 costs about 20 minutes a run on
# this machine, so trial 0 covers both N and trials 1-2 only N=8. Run from the repository root.
set -euo pipefail
../shared/models/fetch.sh minilm models
common=(--preset conll-fe-vs-ft --backbones models/all-MiniLM-L6-v2 --dev-sentences 500 --threads 2
        --results docs/results/conll-fe-vs-ft-cpu/results.jsonl --output-root runs/fe-vs-ft)
dwatt sweep "${common[@]}" --trials 1
dwatt sweep "${common[@]}" --n-shots 8 --trials 3
