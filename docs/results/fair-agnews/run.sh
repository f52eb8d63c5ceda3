#!/usr/bin/env bash
# The fair comparison on text classification (beyond the paper): AG News (the vendored offline split), FE, N in
# {16, 64} examples per class, the agnews-fe protocol (20 epochs, 800 fixed dev examples, 3 trials), every method at
# each of five peak learning rates: a Base head on every single layer (a probe), ScalarMix, Concat, Base+n and DWAtt,
# each pooled the model's way (mean on an encoder, the last token on a decoder). The report chooses each method's
# learning rate (and the best single layer) on dev per trial, on the 800 texts and on a few-shot dev sample as large
# as the training sample (--few-shot-dev: 4 x N texts drawn from the 800, another draw each trial), and reports the
# test accuracy of each choice (test: the 1200 vendored validation texts outside the 800).
# The runs of one sample train together on the budgets engine. Each work unit (an N and a trial) is its own shard;
# two run side by side, one thread each; a stopped grid resumes where it stopped. SmolLM2's probe of one sample (150
# heads) takes hours on one core: it trains 30 heads at a time (--train-in-parts; a head ends as it does alone, and the
# probe's ensembles are the whole probe's), so a stopped session loses one part at most.
# SmolLM2's shards 0 and 1 (N = 16 trial 0, N = 64 trial 0's fusions) ran on an H100 with
#   STORES=docs/results/fair-agnews GRID="--preset agnews-fe --n-shots 16,64" SHARDS=6 EXTRA=--few-shot-dev \
#   bash benchmarks/device_fair.sh ...
# (their rows say device cuda); this script resumes the rest. An earlier start of the MiniLM grid on the Trainer
# engine, without the few-shot dev choice, is kept in trainer-engine/.
# The backbones are the folders ../shared/models/fetch.sh writes (minilm, smollm2) under models/.
set -euo pipefail
# Run from the repository root.
RATES=5e-5,3e-4,1e-3,3e-3,1e-2
for BACKBONE in models/all-MiniLM-L6-v2 models/SmolLM2-135M-Instruct-q4; do
  NAME=$(basename "$BACKBONE")
  for WORKER in 0 1; do
    for SHARD in $((WORKER)) $((WORKER + 2)) $((WORKER + 4)); do
      dwatt sweep --preset agnews-fe --fusions base,scalar_mix,concat,base_plus_n,dwatt --probe-layers all \
        --learning-rates "$RATES" --n-shots 16,64 --backbones "$BACKBONE" --test --few-shot-dev --engine budgets \
        --results "docs/results/fair-agnews/fair.$NAME.jsonl" --shard "$SHARD/6" --threads 1 --train-in-parts 30 \
        --output-root runs/fair-agnews --quiet
    done &
  done
  wait
done
# ScalarMix with layer dropout (scalar_mix_dropout, added after the grid began): MiniLM, its own store.
dwatt sweep --preset agnews-fe --fusions scalar_mix_dropout --learning-rates "$RATES" --n-shots 16,64 \
  --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets \
  --results docs/results/fair-agnews/fair.all-MiniLM-L6-v2.layer-dropout.jsonl --threads 1 --output-root runs/fair-agnews-ld --quiet
# SmolLM2's ScalarMix with layer dropout (added later), out to 1e-1 at once: SmolLM2's ScalarMix reached 1e-1 on CoNLL-03.
dwatt sweep --preset agnews-fe --fusions scalar_mix_dropout --learning-rates "$RATES",3e-2,1e-1 --n-shots 16,64 \
  --backbones models/SmolLM2-135M-Instruct-q4 --test --few-shot-dev --engine budgets \
  --results docs/results/fair-agnews/fair.SmolLM2-135M-Instruct-q4.layer-dropout.jsonl --threads 1 --output-root runs/fair-agnews-ld --quiet
# Probe ensembles (the top-3 and top-5 layers' heads averaged, added after MiniLM's grid ran): its probe trained again
# into its own store; its runs equal the grid's (the report keeps each once, with the ensembles).
dwatt sweep --preset agnews-fe --fusions base --probe-layers all --learning-rates "$RATES" --n-shots 16,64 \
  --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets \
  --results docs/results/fair-agnews/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl --threads 1 --output-root runs/ens-agnews --quiet
# SmolLM2's N = 16 trial 0 probe ran on an H100 before the probe ensembles existed: trained again on this CPU, its
# heads 30 at a time, into a store of its own; where its runs differ from the H100's by float noise, the report takes
# these (--prefer).
dwatt sweep --preset agnews-fe --fusions base --probe-layers all --learning-rates "$RATES" --n-shots 16 --trials 1 \
  --backbones models/SmolLM2-135M-Instruct-q4 --test --few-shot-dev --engine budgets --train-in-parts 30 \
  --results docs/results/fair-agnews/fair.SmolLM2-135M-Instruct-q4.probe-ensembles.jsonl --threads 1 --output-root runs/ens-agnews --quiet
# Ten trials where they are cheap (MiniLM, added later): the probe (its ensembles, best and last layers) to trials
# 3-9 in its store, then ScalarMix, Concat and DWAtt to 10 trials in a store of their own (trials 0-2 are the grid's);
# Base+n and ScalarMix+LD stay at 3 trials.
dwatt sweep --preset agnews-fe --fusions base --probe-layers all --learning-rates "$RATES" --n-shots 16,64 --trials 10 \
  --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets \
  --results docs/results/fair-agnews/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl --threads 1 --output-root runs/ens-agnews --quiet
for N in 16 64; do
  dwatt sweep --preset agnews-fe --fusions scalar_mix,concat,dwatt --learning-rates "$RATES" --n-shots $N --trials 10 \
    --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets --train-in-parts 30 \
    --results docs/results/fair-agnews/fair.all-MiniLM-L6-v2.ten-trials.jsonl \
    --done-in docs/results/fair-agnews/fair.all-MiniLM-L6-v2.shard-{0,1,2,3,4,5}-of-6.jsonl \
    --threads 1 --output-root runs/fair-agnews --quiet
done
# The models people use (issue 57, added later): Qwen2.5-Coder-1.5B-Instruct (its last token pooled, a decoder) and
# EmbeddingGemma-300M (the mean, an encoder; bfloat16 caches: its layer 23 reaches 1.09e5, beyond float16), N = 16, the
# probe, ScalarMix, Concat and DWAtt (Base+n left out), each backbone on one core within an 8 GiB budget; the caches
# on disk (Qwen's pass over the 2064 texts takes about two hours on one core: a stopped one resumes). The probe trains
# 30 heads at a time; Concat's and DWAtt's rates as many at a time as the budget leaves room for (two on Qwen, whose
# five copies of either would take 5 GiB; all five on EmbeddingGemma).
for STEP in Qwen2.5-Coder-1.5B-Instruct-q4:float16 embeddinggemma-300m:bfloat16; do
  IFS=: read -r NAME CACHE <<< "$STEP"
  GRID=(--preset agnews-fe --learning-rates "$RATES" --n-shots 16 --backbones "models/$NAME" --test --few-shot-dev
        --engine budgets --cache-dtype "$CACHE" --max-memory 8GiB --cache-on-disk --threads 1 --quiet
        --results "docs/results/fair-agnews/fair.$NAME.jsonl" --output-root runs/agnews)
  (dwatt sweep --fusions base,scalar_mix --probe-layers all --train-in-parts 30 "${GRID[@]}"
   dwatt sweep --fusions concat,dwatt "${GRID[@]}") &
done
wait
# ScalarMix with per-layer normalisation (scalar_mix_layer_norm; issue 71, added later), its own store per backbone,
# the five rates and two above them, 3 trials: MiniLM at N = 16 and 64, EmbeddingGemma at N = 16, SmolLM2 at N = 16
# and 64, and Qwen at N = 16 (added last, widened as it ran: --widen 3, which added nothing; its float16 caches on disk,
# as its grid's; trial 0 in one session, trials 1 and 2 in 22 min of one core in the next, its caches built again).
LN_RATES=5e-5,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1
dwatt sweep --preset agnews-fe --fusions scalar_mix_layer_norm --learning-rates "$LN_RATES" --n-shots 16,64 --trials 3 \
  --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets --threads 1 --quiet \
  --results docs/results/fair-agnews/fair.all-MiniLM-L6-v2.layer-norm.jsonl --output-root runs/agnews-ln
dwatt sweep --preset agnews-fe --fusions scalar_mix_layer_norm --learning-rates "$LN_RATES" --n-shots 16 \
  --backbones models/embeddinggemma-300m --test --few-shot-dev --engine budgets --cache-dtype bfloat16 \
  --max-memory 8GiB --cache-on-disk --threads 1 --quiet \
  --results docs/results/fair-agnews/fair.embeddinggemma-300m.layer-norm.jsonl --output-root runs/agnews
dwatt sweep --preset agnews-fe --fusions scalar_mix_layer_norm --learning-rates "$LN_RATES" --n-shots 16,64 --trials 3 \
  --backbones models/SmolLM2-135M-Instruct-q4 --test --few-shot-dev --engine budgets --threads 1 --quiet \
  --results docs/results/fair-agnews/fair.SmolLM2-135M-Instruct-q4.layer-norm.jsonl --output-root runs/agnews-ln
dwatt sweep --preset agnews-fe --fusions scalar_mix_layer_norm --learning-rates "$LN_RATES" --n-shots 16 \
  --backbones models/Qwen2.5-Coder-1.5B-Instruct-q4 --test --few-shot-dev --engine budgets --widen 3 \
  --cache-dtype float16 --max-memory 8GiB --cache-on-disk --threads 1 --quiet \
  --results docs/results/fair-agnews/fair.Qwen2.5-Coder-1.5B-Instruct-q4.layer-norm.jsonl --output-root runs/agnews
# Grids that contain their optimum (issue 71, added later): each method's grid as it ran, widened where dev chose an
# edge (dwatt sweep --widen 3: per method, setting, trial and probe layer, the next rate past the edge on the 800 dev
# texts, at most three rates past the grid), the added runs in a store of their own per backbone (*.widened.jsonl);
# every run a store holds is read, not trained again. Each step names its methods, the rates their grid ran at, the
# trials and the store beside the grid's shards that holds them.
WIDEN=(--preset agnews-fe --test --few-shot-dev --engine budgets --widen 3 --threads 1 --quiet --output-root runs/widen-agnews)
MINILM=docs/results/fair-agnews/fair.all-MiniLM-L6-v2
for STEP in base:"$RATES":10:probe-ensembles scalar_mix,concat,dwatt:"$RATES":10:ten-trials \
    base_plus_n:"$RATES":3: scalar_mix_dropout:"$RATES":3:layer-dropout scalar_mix_layer_norm:"$LN_RATES":3:layer-norm; do
  IFS=: read -r FUSIONS STEP_RATES TRIALS STORE <<< "$STEP"
  PROBE=(); [[ $FUSIONS == base ]] && PROBE=(--probe-layers all)
  dwatt sweep --fusions "$FUSIONS" "${PROBE[@]}" --learning-rates "$STEP_RATES" --n-shots 16,64 --trials "$TRIALS" \
    --backbones models/all-MiniLM-L6-v2 "${WIDEN[@]}" --results "$MINILM.widened.jsonl" \
    --done-in "$MINILM".shard-{0,1,2,3,4,5}-of-6.jsonl ${STORE:+"$MINILM.$STORE.jsonl"}
done
SMOLLM2=docs/results/fair-agnews/fair.SmolLM2-135M-Instruct-q4
for STEP in base:"$RATES":probe-ensembles scalar_mix,concat,base_plus_n,dwatt:"$RATES": \
    scalar_mix_dropout:"$RATES",3e-2,1e-1:layer-dropout scalar_mix_layer_norm:"$LN_RATES":layer-norm; do
  IFS=: read -r FUSIONS STEP_RATES STORE <<< "$STEP"
  PROBE=(); [[ $FUSIONS == base ]] && PROBE=(--probe-layers all --train-in-parts 30)
  dwatt sweep --fusions "$FUSIONS" "${PROBE[@]}" --learning-rates "$STEP_RATES" --n-shots 16,64 --trials 3 \
    --backbones models/SmolLM2-135M-Instruct-q4 "${WIDEN[@]}" --max-memory 8GiB --cache-on-disk \
    --results "$SMOLLM2.widened.jsonl" --done-in "$SMOLLM2".shard-{0,1,2,3,4,5}-of-6.jsonl \
    ${STORE:+"$SMOLLM2.$STORE.jsonl"}
done
GEMMA=docs/results/fair-agnews/fair.embeddinggemma-300m
for STEP in base,scalar_mix:"$RATES" concat,dwatt:"$RATES" scalar_mix_layer_norm:"$LN_RATES"; do
  IFS=: read -r FUSIONS STEP_RATES <<< "$STEP"
  PROBE=(); [[ $FUSIONS == base* ]] && PROBE=(--probe-layers all --train-in-parts 30)
  dwatt sweep --fusions "$FUSIONS" "${PROBE[@]}" --learning-rates "$STEP_RATES" --n-shots 16 \
    --backbones models/embeddinggemma-300m "${WIDEN[@]}" --output-root runs/agnews --cache-dtype bfloat16 \
    --max-memory 8GiB --cache-on-disk --results "$GEMMA.widened.jsonl" --done-in "$GEMMA".jsonl "$GEMMA".layer-norm.jsonl
done
# So far (one core each, beside one other worker): MiniLM's steps whole (50 min; 25 runs added: 10 probe heads at 3e-2,
# DWAtt 7, Base+n 3 and Concat 2 at 1.5e-5, ScalarMix, Concat and ScalarMix+LD one each at 3e-2); SmolLM2's probe
# step whole (one head at 3e-2) and its fusions step stopped partway (6 of its 9 runs, 41 min: Concat and DWAtt at N = 64
# to 1.5e-5 in trials 0 and 1, Base+n in trial 0, ScalarMix to 3e-2 in trial 0), its other steps and EmbeddingGemma's
# not yet run: rerunning these lines resumes.
dwatt report docs/results/fair-agnews/fair.*.jsonl --output docs/results/fair-agnews/report \
  --floor docs/results/floor/floor_samples.json \
  --prefer docs/results/fair-agnews/fair.SmolLM2-135M-Instruct-q4.probe-ensembles.jsonl \
  --title "Fair comparison on AG News: each method at its own learning rate, chosen on dev, scored on test"
