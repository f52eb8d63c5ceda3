#!/usr/bin/env bash
# How each word readout of a tagger fares (dwatt probe --word-readout): a Base head on every layer, CoNLL-03, FE,
# N = 32, 25 epochs, 3 trials (seeds 0-2: the same samples for every readout, so the comparison is paired), 1000
# fixed dev sentences, the probe's rates (widened past an edge), the layer and rate chosen on dev, test scored. The
# decoders with every readout, the encoders with the first sub-token's and the mean. Each probe keeps its store
# under <backbone>.<readout>/questions/; a stopped probe resumes from it when this script runs again. Two workers
# side by side, one thread each (two cores). The backbones are the folders ../shared/models/fetch.sh writes under
# models/. Run from the repository root. The Gemmas' states pass float16's range in their deeper layers: their caches
# keep bfloat16.
set -euo pipefail
HERE=docs/results/word-readouts
probe() {  # BACKBONE READOUT [OPTIONS]
  dwatt probe --backbone "models/$1" --word-readout "$2" --n-shot 32 --epochs 25 --trials 3 --dev-sentences 1000 \
    --test --no-baselines --no-save --threads 1 --quiet --output "$HERE/$1.$2" "${@:3}" > "$HERE/$1.$2.txt"
}
(
  for READOUT in first last mean; do probe SmolLM2-135M-Instruct-q4 "$READOUT"; done
  for READOUT in first last; do probe gemma3-270m-q4 "$READOUT" --cache-dtype bfloat16; done
  for BACKBONE in all-MiniLM-L6-v2 all-mpnet-base-v2; do
    for READOUT in first mean; do probe "$BACKBONE" "$READOUT"; done
  done
) &
(
  for READOUT in echo-last echo-mean; do probe SmolLM2-135M-Instruct-q4 "$READOUT"; done
  for READOUT in mean echo-last echo-mean; do probe gemma3-270m-q4 "$READOUT" --cache-dtype bfloat16; done
  for READOUT in first mean; do probe embeddinggemma-300m "$READOUT" --cache-dtype bfloat16; done
) &
wait
# Qwen2.5-Coder-1.5B (28 layers of 1536): every readout, in float32 (this CPU has no bfloat16 arithmetic).
for READOUT in first last mean echo-last echo-mean; do
  probe Qwen2.5-Coder-1.5B-Instruct-q4 "$READOUT" --backbone-dtype float32 --max-memory 10GiB &
  if [ "$READOUT" = last ] || [ "$READOUT" = echo-last ]; then wait; fi
done
wait
# The table (docs/results.md, "Reading a word on a decoder"): each readout's dev choice against the first sub-token's.
dwatt readout-report docs/results/word-readouts/*/questions/*/results.jsonl --output docs/results/word-readouts/report/tables
