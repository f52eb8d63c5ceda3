#!/usr/bin/env bash
# Few-shot AG News, FE, MiniLM (the offline default backbone): the agnews-fe grid (5 fusions x N in {4,8,16,32,64}
# per class x 3 trials, 20 epochs, LR 5e-4, 800 evaluation examples), split into two shards that run side by side
# (one thread each), then first-token pooling at N = 16 (agnews-pooling) to compare with the grid's mean pooling.
# Run from the repository root; then docs/results/report.sh.
set -euo pipefail
here=docs/results/agnews-fe-cpu
for i in 0 1; do
  dwatt sweep --preset agnews-fe --results "$here/results.jsonl" --shard "$i/2" --threads 1 --output-root runs/agnews --quiet &
done
wait
dwatt sweep --preset agnews-pooling --results "$here/results.pooling.jsonl" --output-root runs/agnews --quiet
