#!/usr/bin/env bash
# Few-shot AG News on a frozen decoder LLM (SmolLM2-135M-Instruct, 30 layers): the agnews-fe protocol (20 epochs at LR
# 5e-4, 800 fixed evaluation examples, 3 trials) at N in {4, 16, 64} per class for the five fusions, pooled at the
# last token (the decoders' default), then mean pooling at N = 16 to compare. Run from the repository root; then
# docs/results/report.sh.
set -euo pipefail
here=docs/results/agnews-decoder-cpu
PYTHON=$(command -v python) ../shared/models/fetch.sh smollm2 models
dwatt sweep --preset agnews-depth --backbones models/SmolLM2-135M-Instruct-q4 --threads 1 \
  --results "$here/results.jsonl" --output-root runs/agnews-decoder --quiet
dwatt sweep --preset agnews-depth-pooling --backbones models/SmolLM2-135M-Instruct-q4 --threads 1 \
  --results "$here/results.pooling.jsonl" --output-root runs/agnews-decoder --quiet
