#!/usr/bin/env bash
# Tables and figures of every committed results store into docs/results/report/. Run from the repository root.
set -euo pipefail
dwatt report docs/results/*/results*.jsonl --output docs/results/report --title "dwatt results (CPU, offline backbones)"
