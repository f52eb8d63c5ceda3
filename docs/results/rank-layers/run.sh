#!/usr/bin/env bash
# Every layer of each backbone of the fair tables ranked by label-free measures (dwatt rank-layers: one backbone pass
# over 256 training texts drawn with seed 0, labels ignored), on CoNLL-03 (6 backbones) and AG News (4), each
# into <backbone>.<dataset>/. Two workers side by side, one thread each (two cores). The backbones are the folders
# ../shared/models/fetch.sh writes under models/. Run from the repository root.
set -euo pipefail
HERE=docs/results/rank-layers
rank() {  # BACKBONE TASK DATASET [OPTIONS]
  dwatt rank-layers --backbone "models/$1" --task "$2" --dataset "$3" --texts 256 --seed 0 --max-memory 8GiB \
    --threads 1 --quiet --output "$HERE/$1.$3" "${@:4}" > "$HERE/$1.$3.txt"
}
(
  for BACKBONE in all-MiniLM-L6-v2 all-mpnet-base-v2 SmolLM2-135M-Instruct-q4 embeddinggemma-300m; do
    rank "$BACKBONE" ner conll2003
  done
  for BACKBONE in all-MiniLM-L6-v2 SmolLM2-135M-Instruct-q4 embeddinggemma-300m; do
    rank "$BACKBONE" cls ag_news
  done
) &
(
  rank gemma3-270m-q4 ner conll2003
  # Qwen's weights are bfloat16, which this CPU (no AVX-512 BF16) runs several times slower than float32: its
  # passes run in float32 (about 6.2 GB of weights, inside the 8 GiB budget).
  rank Qwen2.5-Coder-1.5B-Instruct-q4 ner conll2003 --backbone-dtype float32
  rank Qwen2.5-Coder-1.5B-Instruct-q4 cls ag_news --backbone-dtype float32
) &
wait
# (Qwen2.5-Coder-1.5B's two passes ran side by side, once the first worker was done.)
# How often each measure's pick agrees with the probe's dev choice in the fair tables' stores (the stores their
# reports read), the label budget from the few-shot-dev grids, and the probe pruned to top-k layers on Qwen.
dwatt rank-report docs/results/fair-cpu/fair.*.jsonl docs/results/fair-few-shot-dev/fair.Qwen2.5-Coder-1.5B-Instruct-q4*.jsonl \
  docs/results/fair-few-shot-dev/fair.embeddinggemma-300m*.jsonl docs/results/fair-few-shot-dev/fair.gemma3-270m-q4*.jsonl \
  docs/results/fair-agnews/fair.*.jsonl --prefer docs/results/fair-agnews/fair.SmolLM2-135M-Instruct-q4.probe-ensembles.jsonl \
  --rankings "$HERE" --budget docs/results/fair-few-shot-dev/fair.*.jsonl --prune Qwen2.5-Coder-1.5B-Instruct-q4 \
  --output "$HERE/report"
# Within 8 GiB: Qwen2.5-Coder-1.5B in its saved bfloat16 (the float32 passes above peak at about 12 GiB of resident
# memory, the saved file's pages included), on 64 sentences: bfloat16 runs slowly on this CPU.
dwatt rank-layers --backbone models/Qwen2.5-Coder-1.5B-Instruct-q4 --task ner --dataset conll2003 --texts 64 --seed 0 \
  --max-memory 8GiB --threads 1 --output docs/results/rank-layers-bf16/Qwen2.5-Coder-1.5B-Instruct-q4.conll2003 \
  > docs/results/rank-layers-bf16/Qwen2.5-Coder-1.5B-Instruct-q4.conll2003.txt
