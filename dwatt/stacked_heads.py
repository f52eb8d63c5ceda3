"""Copies of one FE head trained together on one cached feature set: epoch budgets, learning rates, layers.

Runs that differ only in their epoch budget (the paper's 25/50/75/100), their peak learning rate, or, for a head
on one layer (a probe), the layer it reads, share the few-shot sample, the initialisation, the order of the
batches and the dropout masks. `train_heads` keeps one copy of the trainable parameters per `HeadCopy`, stacked
(`dwatt.head_stack.StackedHeads`), optimised together by `dwatt.stacked_adamw.StackedAdamW` (each copy its own AdamW,
linear schedule decaying to 0 at the end of its own budget, and gradient clipping), and feeds every batch to all
copies that have not reached their budget, each copy its own layer of the cached stack where it names one; heads that
are linear maps of single layers (probes) run as `dwatt.linear_probes.LinearProbes`, one product per layer over the
cache's labelled rows. Each copy is scored on the dev split after each of its epochs and keeps its best weights.

Copy k then ends exactly as this loop ends when it trains copy k alone (tests/test_stacked_heads.py), while the
training data are read and batched once for all copies; the dev batches are made again on every pass (kept, they
would hold every cached layer padded in fp32). The optimisation is the `Trainer`'s: AdamW (betas 0.9/0.999, eps 1e-8,
no weight decay), linear decay to 0 without warm-up, gradient norm clipped at 1 per copy, the last partial batch kept.
The batch order is drawn by its own generator seeded with the run's seed, not by the `Trainer`'s sampler, so a run is
not step-for-step the `Trainer` run of the same seed (`tests/test_stacked_heads.py` checks they agree where the order
cannot matter: one batch per epoch, no dropout).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch
from transformers import set_seed

from .head_stack import StackedHeads
from .linear_probes import LinearProbes
from .stacked_adamw import StackedAdamW


@dataclass(frozen=True)
class HeadCopy:
    """One head `train_heads` trains: its epoch budget, its peak learning rate, and the one layer of the cached stack
    it reads (a probe of that layer: the model is then a head on one layer), or None for the stack as it is."""

    epochs: int
    learning_rate: float
    layer: int | None = None


@dataclass
class BudgetOutcome:
    """One copy's run: the dev score after every epoch, the best point (with all its scores) and its weights."""

    epochs: int
    curve: list[dict] = field(default_factory=list)
    best: dict | None = None
    best_state: dict[str, torch.Tensor] | None = None
    copy: HeadCopy | None = None
    # the same, chosen on a second, smaller dev sample (`train_heads(sample_score=...)`), where there is one
    sample_best: dict | None = None
    sample_best_state: dict[str, torch.Tensor] | None = None
    # the weights at the end of the copy's budget: what a run with no dev set to choose an epoch on keeps
    final_state: dict[str, torch.Tensor] | None = None


def train_heads(
    model: torch.nn.Module,
    train_set,
    dev_set,
    collator: Callable[[list[dict]], dict],
    copies: Sequence[HeadCopy],
    score: Callable[[list[torch.Tensor], list[torch.Tensor]], dict],
    *,
    seed: int,
    batch_size: int = 16,
    eval_batch_size: int = 32,
    max_grad_norm: float = 1.0,
    vectorize: bool = True,
    metric: str = "f1",
    linear_probes: bool | None = None,
    sample_score: Callable[[list[torch.Tensor], list[torch.Tensor]], dict] | None = None,
) -> tuple[list[BudgetOutcome], dict]:
    """
    Train one copy of `model`'s trainable parameters per `HeadCopy` on `train_set` (items for `collator`, e.g. a
    `FeatureCache`), scoring each copy on `dev_set` after each of its epochs with `score(predicted_ids, labels)`
    (lists of `(batch, seq)` tensors over the dev batches, in dataset order) and keeping its best weights by
    `metric`. `model` must be in FE form (backbone frozen), and, for copies that name a layer, a head on one layer
    fed the whole cached stack; it is left with its own weights untouched. `linear_probes`: train linear heads on
    one layer each as `LinearProbes` (default: wherever they fit), else by running the model (`StackedHeads`).
    `sample_score`: a second scoring of the same dev predictions (a smaller dev sample, as a few-shot user has): each
    curve point also holds its `sample_<metric>`, and each copy keeps its best point and weights by it too
    (`BudgetOutcome.sample_best`, `sample_best_state`). Each copy also keeps its weights at the end of its budget
    (`BudgetOutcome.final_state`).
    Returns the outcomes in the order of `copies` and timings (`train_seconds`, `eval_seconds`).
    """
    copies = list(copies)
    _check_copies(copies, train_set)
    budgets = [c.epochs for c in copies]
    device = next(model.parameters()).device
    set_seed(seed)
    heads = _stacked_heads(model, copies, train_set, dev_set, vectorize, linear_probes)
    steps_per_epoch = math.ceil(len(train_set) / batch_size)
    optimizer = StackedAdamW(
        heads.parameters, [c.learning_rate for c in copies], [steps_per_epoch * e for e in budgets], max_grad_norm
    )
    order_generator = torch.Generator().manual_seed(seed)
    dev_labels: list[torch.Tensor] = []  # read on the first pass over the dev set
    outcomes = [BudgetOutcome(c.epochs, copy=c) for c in copies]
    timings = {"train_seconds": 0.0, "eval_seconds": 0.0}
    step, was_training = 0, model.training
    for epoch in range(1, max(budgets) + 1):
        active = [k for k, e in enumerate(budgets) if e >= epoch]
        started = time.perf_counter()
        model.train()
        order = torch.randperm(len(train_set), generator=order_generator).tolist()
        for batch in heads.batches(train_set, collator, order, batch_size, device):
            heads.losses(active, batch).sum().backward()
            optimizer.step(active)
            step += 1
        model.eval()
        evaluated = time.perf_counter()
        # The dev batches are made again on every pass, not kept: kept, they held the dev set's every cached layer,
        # padded and cast to fp32, growing with the dev set
        predicted, first_pass, predict = [], not dev_labels, heads.predictor(active)
        for batch in heads.batches(dev_set, collator, range(len(dev_set)), eval_batch_size, device):
            predicted.append(predict(batch).cpu())
            if first_pass:
                dev_labels.append(heads.labels(batch))
        for position, k in enumerate(active):
            mine = [ids[position] for ids in predicted]
            point = {"epoch": float(epoch), "step": step}
            _record_point(outcomes[k], point, mine, dev_labels, score, sample_score, metric, partial(heads.state, k))
        finished = time.perf_counter()
        timings["train_seconds"] += evaluated - started
        timings["eval_seconds"] += finished - evaluated
    model.train(was_training)
    return outcomes, timings


def _check_copies(copies: list[HeadCopy], train_set) -> None:
    """Refuse copies no training can make: a budget that is no positive whole number of epochs, a copy given twice,
    a learning rate that is not positive, or nothing to train on."""
    budgets = [c.epochs for c in copies]
    if not copies or any(int(e) != e or e <= 0 for e in budgets):
        raise ValueError(f"every copy needs a positive epoch count, got {budgets}")
    twice = [c for c in dict.fromkeys(copies) if copies.count(c) > 1]
    if twice:
        raise ValueError(f"copies must differ in epochs, learning rate or layer; {twice[0]} comes twice")
    if any(not c.learning_rate > 0 for c in copies):
        raise ValueError(f"learning rates must be positive, got {[c.learning_rate for c in copies]}")
    if len(train_set) == 0:
        raise ValueError("the training set is empty")


def _stacked_heads(model, copies: list[HeadCopy], train_set, dev_set, vectorize: bool, linear_probes: bool | None):
    """The copies as one trainable stack: `LinearProbes` where they fit (linear heads on one layer each, fed a
    feature cache) unless `linear_probes` is False, else `StackedHeads`."""
    layers = [c.layer for c in copies]
    fits = LinearProbes.fits(model, layers, train_set) and LinearProbes.fits(model, layers, dev_set)
    if linear_probes and not fits:
        raise ValueError("linear_probes: only for a Base token classifier on one layer per copy, fed a feature cache")
    if fits and linear_probes is not False:
        return LinearProbes(model, len(copies), layers)
    return StackedHeads(model, len(copies), vectorize, layers)


def _record_point(outcome: BudgetOutcome, point: dict, predicted, dev_labels, score, sample_score, metric: str, state):
    """A copy's dev scores after an epoch (`point`: its epoch and step), added to its curve, and its best, best-by-
    sample and final weights (`state()`, taken only where kept) updated."""
    metrics = score(predicted, dev_labels)
    point[metric] = metrics[metric]
    if sample_score is not None:
        point[f"sample_{metric}"] = sample_score(predicted, dev_labels)[metric]
        if outcome.sample_best is None or point[f"sample_{metric}"] > outcome.sample_best[f"sample_{metric}"]:
            outcome.sample_best, outcome.sample_best_state = dict(point), state()
    outcome.curve.append(point)
    if outcome.best is None or point[metric] > outcome.best[metric]:
        outcome.best = dict(point, metrics=metrics)
        outcome.best_state = state()
    if point["epoch"] == outcome.epochs:
        outcome.final_state = state()


__all__ = ["BudgetOutcome", "HeadCopy", "train_heads"]
