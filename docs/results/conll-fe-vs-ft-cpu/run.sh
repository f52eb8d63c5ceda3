#!/usr/bin/env bash
# Figure 6 on the 2-core CPU: FE, LoRA and FT on CoNLL-03 at N in {8, 32, 128}, 50 epochs, MiniLM-L6 (6 x 384). Dev: a
# fixed random 500 sentences of the dev split, scored after every epoch (an FT or LoRA epoch re-runs the whole
# backbone on them). results.jsonl: FE and FT (the four paper models at N = 8 and 128 in trials 0 and 1, as first
# run; then Base, Concat and DWAtt by the second command, as far as session time allowed: N = 32 in trials 0 and 1,
# FT at N = 128 in trial 1, N = 8 in trial 2; FT at N = 128 takes 15-30 minutes a run here). results.lora.jsonl: LoRA (rank 8, alpha 16, dropout 0.05 on query and value; the
# same LR 5e-5, samples and dev subset). Finished runs are skipped when a command is run again.
# Run from the repository root.
set -euo pipefail
../shared/models/fetch.sh minilm models
here=docs/results/conll-fe-vs-ft-cpu
dwatt sweep --preset conll-fe-vs-ft --backbones models/all-MiniLM-L6-v2 --dev-sentences 500 --threads 2 --trials 1 \
  --results "$here/results.jsonl" --output-root runs/fe-vs-ft
dwatt sweep --preset conll-fe-vs-ft --fusions base,concat,dwatt --n-shots 8,32,128 --trials 3 \
  --backbones models/all-MiniLM-L6-v2 --dev-sentences 500 --threads 1 --results "$here/results.jsonl" --output-root runs/fe-vs-ft
dwatt sweep --preset conll-fe-vs-ft --modes lora --fusions base,concat,dwatt --n-shots 8,32,128 --trials 3 \
  --backbones models/all-MiniLM-L6-v2 --dev-sentences 500 --threads 1 --results "$here/results.lora.jsonl" \
  --output-root runs/fe-vs-ft
