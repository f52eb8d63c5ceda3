#!/usr/bin/env bash
# A fair comparison (beyond the paper): on CoNLL-03, FE, N in {32, 128}, 25 epochs, 3 trials, 1000 fixed dev
# sentences, every method gets each of five peak learning rates: a Base head on every layer (a probe), ScalarMix,
# Concat, Base+n and DWAtt. The report chooses each method's learning rate (and the best single layer) on dev per
# trial and reports the test F1 of that choice. The grid began with 5e-5..3e-3; 1e-2 joined it when heads chose 3e-3,
# its largest rate, in every trial (MiniLM: every method has it; SmolLM2 and MPNet so far: the probe and ScalarMix,
# the methods chosen at 3e-3 there; the report names the rates each table holds), and past 1e-2 where a method was
# still chosen at the largest rate tried in every trial (below). Each backbone's grid runs as two
# shards side by side, one thread each (two cores); a stopped grid resumes where it stopped when run again. Runs that
# were trained again into a store of their own (the probes, for their ensembles: below) count as done (--done-in).
# The backbones are the folders ../shared/models/fetch.sh writes (minilm, mpnet, smollm2) under models/.
# SmolLM2's N = 32 runs at 1e-2 and its N = 128 runs (but four ScalarMix runs of trial 0) ran on an H100 with
# benchmarks/device_fair.sh, the same sweep in the same stores (their rows say device cuda); this script resumes the rest.
set -euo pipefail
# Run from the repository root.
RATES=5e-5,3e-4,1e-3,3e-3,1e-2
for BACKBONE in models/all-MiniLM-L6-v2 models/SmolLM2-135M-Instruct-q4 models/all-mpnet-base-v2; do
  NAME=$(basename "$BACKBONE")
  for SHARD in 0 1; do
    dwatt sweep --fusions base,scalar_mix,concat,base_plus_n,dwatt --probe-layers all --learning-rates "$RATES" \
      --n-shots 32,128 --epochs 25 --trials 3 --dev-sentences 1000 --backbones "$BACKBONE" --test \
      --engine budgets --results "docs/results/fair-cpu/fair.$NAME.jsonl" --shard "$SHARD/2" --threads 1 \
      --done-in "docs/results/fair-cpu/fair.$NAME.probe-ensembles.jsonl" --output-root runs/fair --quiet &
  done
  wait
done
# MPNet's shard 1 holds every MPNet fusion at N = 128, the grid's costliest groups: from N = 128 trial 1's ScalarMix on,
# its line ran as two workers on the one shard-1 store (the same line started twice: each takes the groups of runs no
# other holds), their copies trained one at a time (--train-in-parts 1: each kept as it ends; the same results) and,
# for the per-token fusions, under vmap (the CPU default from then on; float noise against one copy after another).
# Past the grid's edge, one rate up at a time, for the methods chosen at the largest rate tried in every trial:
# MiniLM's last layer (3e-2), MPNet's single layers and ScalarMix (3e-2), then MPNet's last layer again (1e-1).
for STEP in base:all-MiniLM-L6-v2:3e-2 base,scalar_mix:all-mpnet-base-v2:3e-2 base:all-mpnet-base-v2:1e-1; do
  IFS=: read -r FUSIONS NAME RATE <<< "$STEP"
  for SHARD in 0 1; do
    dwatt sweep --fusions "$FUSIONS" --probe-layers all --learning-rates "$RATE" --backbones "models/$NAME" \
      --n-shots 32,128 --epochs 25 --trials 3 --dev-sentences 1000 --test --engine budgets \
      --results "docs/results/fair-cpu/fair.$NAME.jsonl" --shard "$SHARD/2" --threads 1 --output-root runs/fair \
      --done-in "docs/results/fair-cpu/fair.$NAME.probe-ensembles.jsonl" --quiet &
  done
  wait
done
# ScalarMix with layer dropout (scalar_mix_dropout, added after the grid ran): MiniLM, its own store.
dwatt sweep --fusions scalar_mix_dropout --learning-rates "$RATES" --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --engine budgets \
  --results docs/results/fair-cpu/fair.all-MiniLM-L6-v2.layer-dropout.jsonl --threads 1 --output-root runs/fair-ld --quiet
# Probe ensembles (the top-3 and top-5 layers' heads averaged, added after the grid ran): MiniLM's probe trained again,
# every rate in one group, into its own store; its runs equal the grid's (the report keeps each once, with the ensembles).
dwatt sweep --fusions base --probe-layers all --learning-rates "$RATES",3e-2 --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --engine budgets \
  --results docs/results/fair-cpu/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl --threads 1 --output-root runs/ens-cpu --quiet
# MPNet's probe (every rate it was tried at, trial 2 too: the grid plans it; N = 128 added later) the same way.
dwatt sweep --fusions base --probe-layers all --learning-rates "$RATES",3e-2,1e-1 --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/all-mpnet-base-v2 --test --engine budgets \
  --results docs/results/fair-cpu/fair.all-mpnet-base-v2.probe-ensembles.jsonl --threads 1 --output-root runs/ens-cpu --quiet
# SmolLM2's ScalarMix with layer dropout (added later; at N = 32, 3e-2 because 1e-2 was chosen in every trial, then
# 1e-1 because 3e-2 was; N = 128 ran at every rate at once).
dwatt sweep --fusions scalar_mix_dropout --learning-rates "$RATES",3e-2,1e-1 --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/SmolLM2-135M-Instruct-q4 --test --engine budgets \
  --results docs/results/fair-cpu/fair.SmolLM2-135M-Instruct-q4.layer-dropout.jsonl --threads 1 --output-root runs/fair-ld --quiet
# SmolLM2's probe (N = 32 ran on this CPU, N = 128 on an H100) the same way, on this CPU, for its ensembles. Where a
# probe's run trained again differs from the grid's by float noise, the report keeps the one trained again and the
# grid's row is kept in superseded/ (its README): resuming the grid's lines above would train those runs again.
dwatt sweep --fusions base --probe-layers all --learning-rates "$RATES" --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/SmolLM2-135M-Instruct-q4 --test --engine budgets \
  --results docs/results/fair-cpu/fair.SmolLM2-135M-Instruct-q4.probe-ensembles.jsonl --threads 1 --output-root runs/ens-cpu --quiet
# Beyond MiniLM (added later): MPNet's ScalarMix with layer dropout, at the rates MPNet's ScalarMix reached.
dwatt sweep --fusions scalar_mix_dropout --learning-rates "$RATES",3e-2 --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/all-mpnet-base-v2 --test --engine budgets \
  --results docs/results/fair-cpu/fair.all-mpnet-base-v2.layer-dropout.jsonl --threads 1 --output-root runs/fair-ld --quiet
# The grid's second stage: ScalarMix on the window of layers within ±2 of the layer each trial's probe chose on dev and
# the last layer, the same alone (--window-alone: no last layer, the backbone run no deeper than the window), and
# DWAtt on the window with the last layer; ScalarMix at the rates ScalarMix reached on the backbone, DWAtt at DWAtt's.
# (MPNet's N = 32 ran first; a window that would be every layer is not run.)
for STEP in all-MiniLM-L6-v2:"$RATES" SmolLM2-135M-Instruct-q4:"$RATES" all-mpnet-base-v2:"$RATES",3e-2; do
  IFS=: read -r NAME MIX_RATES <<< "$STEP"
  PROBES="docs/results/fair-cpu/fair.$NAME.shard-0-of-2.jsonl docs/results/fair-cpu/fair.$NAME.shard-1-of-2.jsonl docs/results/fair-cpu/fair.$NAME.probe-ensembles.jsonl"
  for WINDOW in scalar_mix:"$MIX_RATES":window: scalar_mix:"$MIX_RATES":window-alone:--window-alone dwatt:"$RATES":window-dwatt:; do
    IFS=: read -r FUSION FUSION_RATES STORE ALONE <<< "$WINDOW"
    # shellcheck disable=SC2086  # PROBES is a list of files, ALONE an option or nothing
    dwatt sweep --fusions "$FUSION" --learning-rates "$FUSION_RATES" --n-shots 32,128 --epochs 25 --trials 3 \
      --dev-sentences 1000 --backbones "models/$NAME" --test --engine budgets $ALONE --window-around-probe $PROBES \
      --results "docs/results/fair-cpu/fair.$NAME.$STORE.jsonl" --threads 1 --output-root runs/window-cpu --quiet
  done
done
# Past the edge again: MiniLM's ScalarMix on the window and the last layer was chosen at 1e-2, its largest rate, in both
# trials at N = 128 where the window is not every layer: 3e-2 too.
dwatt sweep --fusions scalar_mix --learning-rates 3e-2 --n-shots 32,128 --epochs 25 --trials 3 --dev-sentences 1000 \
  --backbones models/all-MiniLM-L6-v2 --test --engine budgets --window-around-probe \
  docs/results/fair-cpu/fair.all-MiniLM-L6-v2.shard-0-of-2.jsonl docs/results/fair-cpu/fair.all-MiniLM-L6-v2.shard-1-of-2.jsonl \
  docs/results/fair-cpu/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl \
  --results docs/results/fair-cpu/fair.all-MiniLM-L6-v2.window.jsonl --threads 1 --output-root runs/window-cpu --quiet
# Ten trials where they are cheap (MiniLM, added later): the probe (its ensembles, best and last layers) to trials
# 3-9 in its store, then ScalarMix, Concat and DWAtt to 10 trials in a store of their own (trials 0-2 are the grid's).
# Base+n, ScalarMix+LD and the windows stay at 3 trials; the coverage table counts each backbone's own trials.
dwatt sweep --fusions base --probe-layers all --learning-rates "$RATES",3e-2 --n-shots 32,128 --epochs 25 --trials 10 \
  --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --engine budgets \
  --results docs/results/fair-cpu/fair.all-MiniLM-L6-v2.probe-ensembles.jsonl --threads 1 --output-root runs/ens-cpu --quiet
dwatt sweep --fusions scalar_mix,concat,dwatt --learning-rates "$RATES" --n-shots 32,128 --epochs 25 --trials 10 \
  --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --engine budgets \
  --results docs/results/fair-cpu/fair.all-MiniLM-L6-v2.ten-trials.jsonl \
  --done-in docs/results/fair-cpu/fair.all-MiniLM-L6-v2.shard-0-of-2.jsonl docs/results/fair-cpu/fair.all-MiniLM-L6-v2.shard-1-of-2.jsonl \
  --threads 1 --output-root runs/fair --quiet
# ScalarMix with per-layer normalisation (scalar_mix_layer_norm; issue 71, added later): MiniLM over 3 trials, the
# five rates and two above them, its own store (EmbeddingGemma's is the few-shot-dev grid's, joined below).
# SmolLM2 at N = 32 followed, then its N = 128 (26 min of one core) and MPNet's (with --widen 3, which added nothing:
# every trial chose inside the seven rates; under 50 min of one core, the test suite beside it); Gemma 3's is the
# few-shot-dev grid's (joined below). Qwen's was started last (../fair-few-shot-dev/run.sh), its store empty so far: the
# CPU hours went to the smaller backbones first, EmbeddingGemma being the one whose fusions fall behind its best
# layer.
dwatt sweep --fusions scalar_mix_layer_norm --learning-rates "$RATES",3e-2,1e-1 --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/all-MiniLM-L6-v2 --test --engine budgets --threads 1 --quiet \
  --results docs/results/fair-cpu/fair.all-MiniLM-L6-v2.layer-norm.jsonl --output-root runs/fair-ln
dwatt sweep --fusions scalar_mix_layer_norm --learning-rates "$RATES",3e-2,1e-1 --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/SmolLM2-135M-Instruct-q4 --test --engine budgets --threads 1 --quiet \
  --results docs/results/fair-cpu/fair.SmolLM2-135M-Instruct-q4.layer-norm.jsonl --output-root runs/fair-ln
dwatt sweep --fusions scalar_mix_layer_norm --learning-rates "$RATES",3e-2,1e-1 --n-shots 32,128 --epochs 25 --trials 3 \
  --dev-sentences 1000 --backbones models/all-mpnet-base-v2 --test --engine budgets --widen 3 --threads 1 --quiet \
  --results docs/results/fair-cpu/fair.all-mpnet-base-v2.layer-norm.jsonl --output-root runs/fair-ln
# Grids that contain their optimum (issue 71, added later): each method's grid as it ran, widened where dev chose an
# edge (dwatt sweep --widen 3: per method, setting, trial and probe layer, the next rate past the edge on the 1000 dev
# sentences, at most three rates past the grid), the added runs in a store of their own per backbone (*.widened.jsonl);
# every run a store holds is read, not trained again. Each step names its methods, the rates their grid ran at, the
# trials and the store beside the grid's shards that holds them.
WIDEN=(--epochs 25 --dev-sentences 1000 --test --engine budgets --widen 3 --threads 1 --quiet --output-root runs/widen)
MINILM=docs/results/fair-cpu/fair.all-MiniLM-L6-v2
for STEP in base:"$RATES",3e-2:10:probe-ensembles scalar_mix,concat,dwatt:"$RATES":10:ten-trials \
    base_plus_n:"$RATES":3: scalar_mix_dropout:"$RATES":3:layer-dropout \
    scalar_mix_layer_norm:"$RATES",3e-2,1e-1:3:layer-norm; do
  IFS=: read -r FUSIONS STEP_RATES TRIALS STORE <<< "$STEP"
  PROBE=(); [[ $FUSIONS == base ]] && PROBE=(--probe-layers all)
  dwatt sweep --fusions "$FUSIONS" "${PROBE[@]}" --learning-rates "$STEP_RATES" --n-shots 32,128 --trials "$TRIALS" \
    --backbones models/all-MiniLM-L6-v2 "${WIDEN[@]}" --results "$MINILM.widened.jsonl" \
    --done-in "$MINILM".shard-{0,1}-of-2.jsonl ${STORE:+"$MINILM.$STORE.jsonl"}
done
SMOLLM2=docs/results/fair-cpu/fair.SmolLM2-135M-Instruct-q4
for STEP in base:"$RATES":32,128:probe-ensembles scalar_mix,concat,base_plus_n,dwatt:"$RATES":32,128: \
    scalar_mix_dropout:"$RATES",3e-2,1e-1:32,128:layer-dropout scalar_mix_layer_norm:"$RATES",3e-2,1e-1:32,128:layer-norm; do
  IFS=: read -r FUSIONS STEP_RATES N_SHOTS STORE <<< "$STEP"
  PROBE=(); [[ $FUSIONS == base ]] && PROBE=(--probe-layers all)
  dwatt sweep --fusions "$FUSIONS" "${PROBE[@]}" --learning-rates "$STEP_RATES" --n-shots "$N_SHOTS" --trials 3 \
    --backbones models/SmolLM2-135M-Instruct-q4 "${WIDEN[@]}" --max-memory 8GiB --cache-on-disk \
    --results "$SMOLLM2.widened.jsonl" --done-in "$SMOLLM2".shard-{0,1}-of-2.jsonl ${STORE:+"$SMOLLM2.$STORE.jsonl"}
done
# So far (one core each, beside one other worker): MiniLM's steps whole (28 min; 38 runs added: 17 probe heads at 1e-1,
# ScalarMix 10 at 3e-2 and 1 at 1e-1, DWAtt 4 at 3e-2 and 1 at 1e-1, ScalarMix+LD 4 at 3e-2 and 1 at 1e-1); SmolLM2's probe step
# stopped partway twice (38 of its first 55 runs at 3e-2); its ScalarMix/Concat/Base+n/DWAtt step whole (36 min, 7 runs:
# Concat N = 128 2 at 3e-2, N = 32 1 at 3e-2; ScalarMix N = 32 1 at 3e-2, 1 at 1e-1, 1 at 3e-1, N = 128 1 at 3e-2); its
# ScalarMix+LN step whole (N = 128's third trial at 3e-1, past the 1e-1 it chose, which it kept; about 12 min of one
# core beside the test suite) and its ScalarMix+LD step whole (N = 32's third trial at 3e-1, past the 1e-1 it chose,
# which it kept; about 12 min): rerunning these lines resumes the probe's.
# Qwen2.5-Coder-1.5B and EmbeddingGemma-300M (issue 57) ran the same grid at N = 32 with the few-shot dev choice beside
# it (docs/results/fair-few-shot-dev/run.sh), and Gemma 3 270M its probe: their stores join this report for the choice
# on 1000 dev sentences (its few-shot-dev tables hold only them; the few-shot-dev report holds every backbone's).
dwatt report docs/results/fair-cpu/fair.*.jsonl docs/results/fair-few-shot-dev/fair.Qwen2.5-Coder-1.5B-Instruct-q4*.jsonl \
  docs/results/fair-few-shot-dev/fair.embeddinggemma-300m*.jsonl docs/results/fair-few-shot-dev/fair.gemma3-270m-q4*.jsonl \
  --output docs/results/fair-cpu/report --floor docs/results/floor/floor_samples.json \
  --title "Fair comparison: each method at its own learning rate, chosen on dev, scored on test"
