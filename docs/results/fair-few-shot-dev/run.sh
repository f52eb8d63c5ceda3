#!/usr/bin/env bash
# The fair comparison's CoNLL-03 grid at N = 32 run again with --few-shot-dev: every run also chooses its epoch on a
# dev sample as large as its training sample (N x C = 128 sentences, drawn uniformly from the 1000 fixed dev
# sentences, another draw each trial), and that choice is scored on test too. The report then makes every choice
# (epoch, learning rate, layer) both on the 1000 sentences and on the trial's 128, with each method's selection
# regret. Same grid as ../fair-cpu/run.sh (its rates, the probe's 3e-2 on MiniLM), its own stores: the runs' own
# numbers are those of the fair grid's runs, which are left as they are.
# SmolLM2's grid ran on an H100 (its rows say device cuda), one shard per trial, with
#   STORES=docs/results/fair-few-shot-dev GRID="--n-shots 32 --epochs 25 --trials 3 --dev-sentences 1000" SHARDS=3 \
#   EXTRA=--few-shot-dev bash benchmarks/device_fair.sh ...
# (the same sweep as below with --shard i/3); run here, it resumes that store.
set -euo pipefail
# Run from the repository root.
for BACKBONE in models/all-MiniLM-L6-v2; do
  NAME=$(basename "$BACKBONE")
  for SHARD in 0 1; do
    (dwatt sweep --fusions base,scalar_mix,concat,base_plus_n,dwatt --probe-layers all \
       --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --n-shots 32 --epochs 25 --trials 3 --dev-sentences 1000 \
       --backbones "$BACKBONE" --test --few-shot-dev --engine budgets \
       --results "docs/results/fair-few-shot-dev/fair.$NAME.jsonl" --shard "$SHARD/2" --threads 1 \
       --output-root runs/fair-few-shot-dev --quiet
     dwatt sweep --fusions base --probe-layers all --learning-rates 3e-2 --n-shots 32 --epochs 25 --trials 3 \
       --dev-sentences 1000 --backbones "$BACKBONE" --test --few-shot-dev --engine budgets \
       --results "docs/results/fair-few-shot-dev/fair.$NAME.jsonl" --shard "$SHARD/2" --threads 1 \
       --output-root runs/fair-few-shot-dev --quiet) &
  done
  wait
done
NAME=SmolLM2-135M-Instruct-q4
for SHARD in 0 1 2; do
  dwatt sweep --fusions base,scalar_mix,concat,base_plus_n,dwatt --probe-layers all \
    --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --n-shots 32 --epochs 25 --trials 3 --dev-sentences 1000 \
    --backbones "models/$NAME" --test --few-shot-dev --engine budgets \
    --results "docs/results/fair-few-shot-dev/fair.$NAME.jsonl" --shard "$SHARD/3" --threads 1 \
    --output-root runs/fair-few-shot-dev --quiet &
done
wait
# Probe ensembles (the top-3 and top-5 layers' heads averaged, added after the grid ran): MiniLM's probe trained again,
# every rate in one group, into its own store; its runs equal the grid's (the report keeps each once, with the ensembles).
dwatt sweep --fusions base --probe-layers all --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2,3e-2 --n-shots 32 --epochs 25 \
  --trials 3 --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets \
  --results docs/results/fair-few-shot-dev/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl --threads 1 --output-root runs/ens-fsd --quiet
# SmolLM2's probe (it ran on an H100) the same way, on this CPU; where a run differs from the H100's by float noise, the
# report keeps this one, whose heads the ensembles average, and the H100's row is kept in superseded/ (its README).
dwatt sweep --fusions base --probe-layers all --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --n-shots 32 --epochs 25 \
  --trials 3 --dev-sentences 1000 --backbones models/SmolLM2-135M-Instruct-q4 --test --few-shot-dev --engine budgets \
  --results docs/results/fair-few-shot-dev/fair.SmolLM2-135M-Instruct-q4.probe-ensembles.jsonl --threads 1 \
  --output-root runs/ens-fsd --quiet
# Window fusions (issue 41): ScalarMix and DWAtt on the layers within ±2 of the layer each trial's probe chose (and
# z_L, which every fusion reads), around the choice on the 1000 dev sentences and around the one on the few-shot dev
# sample: the grid's second stage, each trial's centres read from SmolLM2's probe above (as trained again on the CPU;
# MiniLM has 6 layers: a window of 5 around its layer 3 is every layer). Run on the CPU. (The H100's probe had chosen
# other layers on two trials' samples: the windows around those stay in the stores, unused.)
# The window alone (--window-alone: no last layer, the backbone run no deeper than the window) too, each its own store.
for STEP in scalar_mix:window: scalar_mix:window-alone:--window-alone dwatt:window: dwatt:window-alone-dwatt:--window-alone; do
  IFS=: read -r FUSION STORE ALONE <<< "$STEP"
  dwatt sweep --fusions "$FUSION" --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --n-shots 32 --epochs 25 --trials 3 \
    --dev-sentences 1000 --backbones models/SmolLM2-135M-Instruct-q4 --test --few-shot-dev --engine budgets $ALONE \
    --window-around-probe docs/results/fair-few-shot-dev/fair.SmolLM2-135M-Instruct-q4.probe-ensembles.jsonl \
    --results "docs/results/fair-few-shot-dev/fair.SmolLM2-135M-Instruct-q4.$STORE.jsonl" --threads 1 \
    --output-root "runs/${STORE%-dwatt}" --quiet
done
# SmolLM2's ScalarMix one rate up at a time (3e-2, then 1e-1): its few-shot dev sample chose 1e-2, the largest rate
# tried, in every trial, then the 1000 dev sentences chose 3e-2 in every trial (run on the CPU, its own store).
dwatt sweep --fusions scalar_mix --learning-rates 3e-2,1e-1 --n-shots 32 --epochs 25 --trials 3 --dev-sentences 1000 \
  --backbones models/SmolLM2-135M-Instruct-q4 --test --few-shot-dev --engine budgets \
  --results docs/results/fair-few-shot-dev/fair.SmolLM2-135M-Instruct-q4.scalar-mix-larger-rates.jsonl --threads 1 \
  --output-root runs/fair-few-shot-dev --quiet
# The no-dev protocol (the last epoch at dwatt train's rate) for MiniLM's fusions: the grid above ran before runs scored
# their last epoch, so its fusions train again, into a report of their own beside the probe that scored it (trained
# again by today's stacked engine, they equal the grid's runs only to float noise: a dev F1 differs in its 5th digit
# at some epoch, which the fair report would refuse as two versions of one run).
dwatt sweep --fusions scalar_mix,concat,base_plus_n,dwatt --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --n-shots 32 \
  --epochs 25 --trials 3 --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets \
  --results docs/results/fair-few-shot-dev/no-dev/fair.all-MiniLM-L6-v2.jsonl --threads 1 --output-root runs/no-dev --quiet
# MPNet (added later), one trial per shard: the probe at every rate MPNet's fair grid reached (to 1e-1) in one group
# (its ensembles need every rate of a trial together), ScalarMix to 3e-2, the other fusions at the grid's five rates.
NAME=all-mpnet-base-v2
for SHARD in 0 1 2; do
  (dwatt sweep --fusions base --probe-layers all --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1 --n-shots 32 \
     --epochs 25 --trials 3 --dev-sentences 1000 --backbones "models/$NAME" --test --few-shot-dev --engine budgets \
     --results "docs/results/fair-few-shot-dev/fair.$NAME.jsonl" --shard "$SHARD/3" --threads 1 \
     --output-root runs/fair-few-shot-dev --quiet
   dwatt sweep --fusions scalar_mix --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2,3e-2 --n-shots 32 --epochs 25 --trials 3 \
     --dev-sentences 1000 --backbones "models/$NAME" --test --few-shot-dev --engine budgets \
     --results "docs/results/fair-few-shot-dev/fair.$NAME.jsonl" --shard "$SHARD/3" --threads 1 \
     --output-root runs/fair-few-shot-dev --quiet
   dwatt sweep --fusions concat,dwatt,base_plus_n --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --n-shots 32 --epochs 25 \
     --trials 3 --dev-sentences 1000 --backbones "models/$NAME" --test --few-shot-dev --engine budgets \
     --results "docs/results/fair-few-shot-dev/fair.$NAME.jsonl" --shard "$SHARD/3" --threads 1 \
     --output-root runs/fair-few-shot-dev --quiet) &
  [ "$SHARD" = 1 ] && wait  # two at a time on two cores
done
wait
# ScalarMix with layer dropout (scalar_mix_dropout) on every backbone, each at the rates its ScalarMix reached here, its
# own store per backbone; MiniLM's window alone around each trial's probe choice (layers within ±2, no last layer).
for STEP in all-MiniLM-L6-v2:5e-5,3e-4,1e-3,3e-3,1e-2 SmolLM2-135M-Instruct-q4:5e-5,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1 \
    all-mpnet-base-v2:5e-5,3e-4,1e-3,3e-3,1e-2,3e-2; do
  IFS=: read -r NAME RATES <<< "$STEP"
  dwatt sweep --fusions scalar_mix_dropout --learning-rates "$RATES" --n-shots 32 --epochs 25 --trials 3 \
    --dev-sentences 1000 --backbones "models/$NAME" --test --few-shot-dev --engine budgets \
    --results "docs/results/fair-few-shot-dev/fair.$NAME.layer-dropout.jsonl" --threads 1 \
    --output-root runs/fair-few-shot-dev-ld --quiet
done
for STEP in scalar_mix:window-alone dwatt:window-alone-dwatt; do
  IFS=: read -r FUSION STORE <<< "$STEP"
  dwatt sweep --fusions "$FUSION" --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --n-shots 32 --epochs 25 --trials 3 \
    --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets \
    --window-around-probe docs/results/fair-few-shot-dev/fair.all-MiniLM-L6-v2.shard-*.jsonl \
    docs/results/fair-few-shot-dev/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl --window-alone \
    --results "docs/results/fair-few-shot-dev/fair.all-MiniLM-L6-v2.$STORE.jsonl" --threads 1 \
    --output-root runs/window-alone --quiet
done
# MPNet's windows (after its three trials' probes): ScalarMix (to 3e-2, as MPNet's ScalarMix reached) and DWAtt on the
# layers within ±2 of each trial's two probe choices, with the last layer and alone.
for STEP in scalar_mix:window: scalar_mix:window-alone:--window-alone dwatt:window-dwatt: dwatt:window-alone-dwatt:--window-alone; do
  IFS=: read -r FUSION STORE ALONE <<< "$STEP"
  RATES=5e-5,3e-4,1e-3,3e-3,1e-2
  [ "$FUSION" = scalar_mix ] && RATES=$RATES,3e-2
  dwatt sweep --fusions "$FUSION" --learning-rates "$RATES" --n-shots 32 --epochs 25 --trials 3 --dev-sentences 1000 \
    --backbones models/all-mpnet-base-v2 --test --few-shot-dev --engine budgets $ALONE \
    --window-around-probe docs/results/fair-few-shot-dev/fair.all-mpnet-base-v2.shard-*.jsonl \
    --results "docs/results/fair-few-shot-dev/fair.all-mpnet-base-v2.$STORE.jsonl" --threads 1 \
    --output-root "runs/${STORE%-dwatt}" --quiet
done
# The models people use (issue 57, added later): Qwen2.5-Coder-1.5B-Instruct (28 layers x 1536, its bf16 backbone as
# saved; float16 caches: its hidden states stay below 3808 on CoNLL-03) and EmbeddingGemma-300M (24 x 768, fp32 as saved;
# bfloat16 caches: its layer 23 reaches 1.09e5, beyond float16), the folders ../shared/models/fetch.sh writes
# (qwen2.5-coder-1.5b, embeddinggemma). Each backbone's lines run one after another on one core (the two backbones side
# by side), within an 8 GiB budget: the caches that do not fit go to disk, shared by every method and trial of the
# backbone (RunConfig.feature_cache_dir), so the backbone runs over dev and test once; --cache-on-disk sends them all
# there, so a stopped backbone pass resumes and each worker holds little more than its backbone. The probe trains its
# heads 30 at a time and Concat and DWAtt one rate at a time (--train-in-parts), so that a stopped session loses one
# part at most; Base+n is left out (not among the methods this comparison asks of these backbones). Resumes where it
# stopped.
for STEP in Qwen2.5-Coder-1.5B-Instruct-q4:float16 embeddinggemma-300m:bfloat16; do
  IFS=: read -r NAME CACHE <<< "$STEP"
  GRID=(--n-shots 32 --epochs 25 --trials 3 --dev-sentences 1000 --backbones "models/$NAME" --test --few-shot-dev
        --engine budgets --cache-dtype "$CACHE" --max-memory 8GiB --cache-on-disk --threads 1 --quiet
        --results "docs/results/fair-few-shot-dev/fair.$NAME.jsonl" --output-root runs/fsd)
  (dwatt sweep --fusions base --probe-layers all --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --train-in-parts 30 "${GRID[@]}"
   dwatt sweep --fusions scalar_mix --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 "${GRID[@]}"
   dwatt sweep --fusions concat,dwatt --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --train-in-parts 1 "${GRID[@]}") &
done
wait
# EmbeddingGemma's ScalarMix one rate up (3e-2): it was chosen at 1e-2, the grid's largest, in every trial; its own store.
dwatt sweep --fusions scalar_mix --learning-rates 3e-2 --n-shots 32 --epochs 25 --trials 3 --dev-sentences 1000 \
  --backbones models/embeddinggemma-300m --test --few-shot-dev --engine budgets --cache-dtype bfloat16 --max-memory 8GiB \
  --cache-on-disk --threads 1 --quiet --results docs/results/fair-few-shot-dev/fair.embeddinggemma-300m.scalar-mix-larger-rates.jsonl \
  --output-root runs/fsd
# Gemma 3 270M (18 x 640, the base decoder; ../shared/models/fetch.sh gemma3-270m, float32 as converted), added for the
# depth question: its probe only, every layer at the grid's five rates; float32 caches (its layer 8 reaches 6.84e4 on
# CoNLL-03, beyond float16).
dwatt sweep --fusions base --probe-layers all --learning-rates 5e-5,3e-4,1e-3,3e-3,1e-2 --n-shots 32 --epochs 25 \
  --trials 3 --dev-sentences 1000 --backbones models/gemma3-270m-q4 --test --few-shot-dev --engine budgets \
  --cache-dtype float32 --max-memory 8GiB --cache-on-disk --threads 1 --quiet \
  --results docs/results/fair-few-shot-dev/fair.gemma3-270m-q4.jsonl --output-root runs/fsd
# ScalarMix with per-layer normalisation (scalar_mix_layer_norm: AllenNLP's do_layer_norm, masked; issue 71, added
# later), each backbone's own store, its grid the five rates and two above them from the start (ScalarMix was chosen
# at the grid's top on EmbeddingGemma and MiniLM): MiniLM, and EmbeddingGemma, whose ScalarMix and Concat fall far
# behind its best layer (its deeper layers' norms reach 4e4: the question this fusion answers).
# SmolLM2's and MPNet's are in ../fair-cpu (their fair grid's); Gemma 3's and Qwen's follow below.
LN_RATES=5e-5,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1
dwatt sweep --fusions scalar_mix_layer_norm --learning-rates "$LN_RATES" --n-shots 32 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --few-shot-dev --engine budgets --threads 1 --quiet \
  --results docs/results/fair-few-shot-dev/fair.all-MiniLM-L6-v2.layer-norm.jsonl --output-root runs/fsd-ln
dwatt sweep --fusions scalar_mix_layer_norm --learning-rates "$LN_RATES" --n-shots 32 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/embeddinggemma-300m --test --few-shot-dev --engine budgets \
  --cache-dtype bfloat16 --max-memory 8GiB --cache-on-disk --threads 1 --quiet \
  --results docs/results/fair-few-shot-dev/fair.embeddinggemma-300m.layer-norm.jsonl --output-root runs/fsd
# EmbeddingGemma's ScalarMix+LN chose 1e-1, the top of those rates, in 2 of 3 trials: one rate up (3e-1), its own store
# (it then chose 1e-1, 3e-1, 1e-1: inside the widened grid in most trials).
dwatt sweep --fusions scalar_mix_layer_norm --learning-rates 3e-1 --n-shots 32 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/embeddinggemma-300m --test --few-shot-dev --engine budgets \
  --cache-dtype bfloat16 --max-memory 8GiB --cache-on-disk --threads 1 --quiet \
  --results docs/results/fair-few-shot-dev/fair.embeddinggemma-300m.layer-norm-larger-rates.jsonl --output-root runs/fsd
# Gemma 3's ScalarMix+LN (added later), the same rates, widened where dev chose an edge (--widen 3 added nothing: each
# trial chose 1e-2); float32 caches on disk as its probe's. 33 min of one core, two other jobs beside it.
dwatt sweep --fusions scalar_mix_layer_norm --learning-rates "$LN_RATES" --n-shots 32 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/gemma3-270m-q4 --test --few-shot-dev --engine budgets --widen 3 \
  --cache-dtype float32 --max-memory 8GiB --cache-on-disk --threads 1 --quiet \
  --results docs/results/fair-few-shot-dev/fair.gemma3-270m-q4.layer-norm.jsonl --output-root runs/fsd
# Qwen's ScalarMix+LN, the same way (float16 caches on disk, as its grid's): trial 0 in one session, trials 1 and 2 in
# 38 min of one core in the next (its caches built again: the sample, dev and test passes at 110-190 tokens/s, another
# job beside it); --widen added nothing (dev chose 3e-2, 1e-2 and 1e-3). Rerunning it resumes from the runs its store
# holds.
dwatt sweep --fusions scalar_mix_layer_norm --learning-rates "$LN_RATES" --n-shots 32 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/Qwen2.5-Coder-1.5B-Instruct-q4 --test --few-shot-dev --engine budgets \
  --widen 3 --cache-dtype float16 --max-memory 8GiB --cache-on-disk --threads 1 --quiet \
  --results docs/results/fair-few-shot-dev/fair.Qwen2.5-Coder-1.5B-Instruct-q4.layer-norm.jsonl --output-root runs/fsd
# Grids that contain their optimum (issue 71, added later): EmbeddingGemma's grid as it ran, widened where the choice on
# the 1000 dev sentences sat at an edge (dwatt sweep --widen 3: per method, setting, trial and probe layer, the next
# rate past the edge, at most three rates past the grid), the added runs in a store of their own; every run a store
# holds is read, not trained again (ScalarMix's 3e-2 and ScalarMix+LN's 3e-1 among them). Its caches on disk, as above.
GEMMA=docs/results/fair-few-shot-dev/fair.embeddinggemma-300m
for STEP in base:5e-5,3e-4,1e-3,3e-3,1e-2 scalar_mix:5e-5,3e-4,1e-3,3e-3,1e-2 concat,dwatt:5e-5,3e-4,1e-3,3e-3,1e-2 \
    scalar_mix_layer_norm:"$LN_RATES"; do
  IFS=: read -r FUSIONS STEP_RATES <<< "$STEP"
  PROBE=(--train-in-parts 1); [[ $FUSIONS == base ]] && PROBE=(--probe-layers all --train-in-parts 30)
  dwatt sweep --fusions "$FUSIONS" "${PROBE[@]}" --learning-rates "$STEP_RATES" --n-shots 32 --epochs 25 --trials 3 \
    --dev-sentences 1000 --backbones models/embeddinggemma-300m --test --few-shot-dev --engine budgets --widen 3 \
    --cache-dtype bfloat16 --max-memory 8GiB --cache-on-disk --threads 1 --quiet \
    --results "$GEMMA.widened.jsonl" --output-root runs/fsd \
    --done-in "$GEMMA".jsonl "$GEMMA".{scalar-mix-larger-rates,layer-norm,layer-norm-larger-rates}.jsonl
done
# So far (one core, 34 min, ScalarMix's step first): ScalarMix widened to 1e-1 and 3e-1 (chosen 1e-1 in every trial,
# inside); the probe's step whole (stopped partway once, then resumed: 34 runs at 3e-2, 14 at 1e-1 and 1 at 3e-1;
# about 20 min of one core beside the test suite; no layer's choice left at an edge or a limit); Concat, DWAtt and
# ScalarMix+LN not yet.
dwatt report docs/results/fair-few-shot-dev/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl \
  docs/results/fair-few-shot-dev/no-dev/fair.all-MiniLM-L6-v2.jsonl --output docs/results/fair-few-shot-dev/no-dev/report \
  --title "With no dev set: the last epoch at dwatt train's learning rate (MiniLM, CoNLL-03 N = 32, trained again)"
dwatt report docs/results/fair-few-shot-dev/fair.*.jsonl --output docs/results/fair-few-shot-dev/report \
  --floor docs/results/floor/floor_samples.json \
  --title "Fair comparison, chosen on 1000 dev sentences and on a few-shot dev sample"
