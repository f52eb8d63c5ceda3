#!/usr/bin/env bash
# Prepare what the GPU machine (the `device` tool) lacks for the benchmarks, in folders that travel with `carry`:
#   .whl/  wheels of datasets, dill, multiprocess and seqeval (the device image has torch, transformers, pandas,
#          pyarrow, scikit-learn, but not these; seqeval ships no wheel, so it is built here)
#   .tok/  MiniLM's tokenizer, for the RoBERTa-large-shaped random backbone of grid_speed.py
# Run from the repository root; both folders are git-ignored.
set -euo pipefail
mkdir -p .whl .tok
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
python3 -m pip wheel -q --no-deps -w .whl seqeval==1.2.2
../shared/models/fetch.sh minilm models >/dev/null
cp models/all-MiniLM-L6-v2/{config.json,tokenizer.json,tokenizer_config.json,special_tokens_map.json,vocab.txt} .tok/
du -sh .whl .tok
