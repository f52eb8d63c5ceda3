#!/usr/bin/env bash
# Base, Base+n, Concat and DWAtt (and ScalarMix) in the FE setting, N=16 (64 sentences), 25 epochs, seed 0,
# MiniLM backbone, vendored CoNLL-2003, full dev split scored every epoch. Writes one folder per fusion here.
# Run from the repository root.
set -euo pipefail
here=docs/results/fusions-n16
for fusion in base base_plus_n concat dwatt scalar_mix; do
  dwatt train --fusion "$fusion" --mode fe --n-shot 16 --epochs 25 --seed 0 --no-save --quiet \
    --output-dir "$here/$fusion"
done
dwatt report "$here"/*/results.json --output "$here" --title "FE fusions at N=16 (MiniLM, CoNLL-2003 dev)"
