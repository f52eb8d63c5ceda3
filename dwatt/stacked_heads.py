"""Copies of one FE head trained together on one cached feature set: epoch budgets, learning rates, layers.

Runs that differ only in their epoch budget (the paper's 25/50/75/100), their peak learning rate, or, for a head
on one layer (a probe), the layer it reads, share the few-shot sample, the initialisation, the order of the
batches and the dropout masks. `train_heads` keeps one copy of the trainable parameters per `HeadCopy`, stacked
(`StackedHeads`: one tensor per parameter, the copies on its first axis), optimised together by `StackedAdamW`
(each copy its own AdamW, linear schedule decaying to 0 at the end of its own budget, and gradient clipping), and
feeds every batch to all copies that have not reached their budget, each copy its own layer of the cached stack where
it names one: either batched, `torch.func.vmap` over the stacked tensors with `randomness="same"` (every copy gets the
dropout masks a lone run draws; each product of the head is one batched product over the copies), or one copy after
the other with the random state restored in between; heads that are linear maps of single layers (probes) run as
`LinearProbes`, one product per layer over the cache's labelled rows. Each copy is
scored on the dev split after each of its epochs and keeps its best weights; a Concat head is scored as one linear
map, its classifier folded into its projection (`FoldedConcat`).

Serving uses the same engine: `StackedHeads.of_models` stacks the weights of heads that already hold them (several
checkpoints of one architecture on one backbone, `dwatt.serving.shared_heads`) and `outputs` runs them all.

Copy k then ends exactly as this loop ends when it trains copy k alone (tests/test_stacked_heads.py), while the data
are read, batched and moved once for all budgets, the dev split is padded and moved to the device once for the
whole run, and on a GPU the small fusion heads of all budgets run as one batched computation. The optimisation is
the `Trainer`'s: AdamW (betas 0.9/0.999, eps 1e-8, no weight decay), linear decay to 0 without warm-up, gradient
norm clipped at 1 per copy, the last partial batch kept. The batch order is drawn by its own generator seeded with
the run's seed, not by the `Trainer`'s sampler, so a run is not step-for-step the `Trainer` run of the same seed
(`tests/test_stacked_heads.py` checks they agree where the order cannot matter: one batch per epoch, no dropout).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap
from transformers import set_seed

from .features import FeatureCache, FreedMemoryRelease
from .folding import LAYERS_INPUT, FoldedConcat, linear_token_classifier

ADAMW = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)  # the Trainer's adamw_torch defaults


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


def _to(batch: dict, device: torch.device) -> dict:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def _batches(dataset, collator, order: Sequence[int], batch_size: int):
    for start in range(0, len(order), batch_size):
        yield collator([dataset[i] for i in order[start : start + batch_size]])


def _rng_state(device: torch.device):
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def one_layer(batch: dict, layer: int | None) -> dict:
    """`batch` with only the cached `layer` of its stack (a head on one layer, fed the whole cache), or as it is."""
    return batch if layer is None else {**batch, LAYERS_INPUT: batch[LAYERS_INPUT][:, layer : layer + 1]}


def head_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A task model's own parameters and buffers: everything but its backbone's."""
    return model.head_parameters() | model.head_buffers()


class StackedHeads:
    """The trainable parameters of `model`, one copy per head, held stacked: one tensor per parameter whose first axis
    is the copy. Runs `model` with any subset of the copies (each on its own layer of the cached stack where `layers`
    names one), either all at once (`vectorize`: `torch.func.vmap` over the stacked tensors, so each of the head's
    products is one batched product over the copies) or one copy after the other."""

    def __init__(
        self, model: torch.nn.Module, copies: int, vectorize: bool, layers: Sequence[int | None] | None = None
    ):
        self.model, self.vectorize = model, vectorize
        self.layers = list(layers) if layers is not None else [None] * copies
        if len(self.layers) != copies:
            raise ValueError(f"{copies} copies but {len(self.layers)} layers")
        if len({layer is None for layer in self.layers}) > 1:
            raise ValueError("either every copy reads one layer of the stack, or none does")
        start = {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}
        if not start:
            raise ValueError("the model has no trainable parameter (is the whole model frozen?)")
        self.parameters = {
            name: t.unsqueeze(0).repeat(copies, *[1] * t.dim()).requires_grad_() for name, t in start.items()
        }

    @classmethod
    def of_models(cls, models: Sequence[torch.nn.Module], vectorize: bool) -> StackedHeads:
        """Copies that already hold their weights, for inference: the trainable parameters and the buffers of the
        head part of `models` (one architecture and configuration, the backbone frozen and shared), stacked; the first
        model runs them all."""
        heads = cls(models[0], len(models), vectorize)
        own = [head_tensors(model) for model in models]
        with torch.no_grad():
            heads.parameters = {name: torch.stack([tensors[name].detach() for tensors in own]) for name in own[0]}
        return heads

    @torch.no_grad()
    def outputs(self, batch: dict) -> list:
        """Every copy's model output on `batch` (the model in eval mode): one `vmap` over the copies where
        vectorised, else one call per copy."""
        everyone = list(range(len(self.layers)))
        if not self.vectorize:
            return [self._call(self.copy(k), self._input(k, batch)) for k in everyone]
        kind = []

        def fields(out):
            kind.append(type(out))
            return {key: value for key, value in out.items() if value is not None}

        stacked = self._run_all(everyone, batch, fields)
        return [kind[0](**{key: value[k] for key, value in stacked.items()}) for k in everyone]

    def copy(self, k: int) -> dict[str, torch.Tensor]:
        """Copy `k`'s parameters: views into the stacked tensors (gradients flow back into them)."""
        return {name: t[k] for name, t in self.parameters.items()}

    def batches(self, dataset, collator, order: Sequence[int], batch_size: int, device: torch.device):
        """The model's batches of `dataset` in `order`, on `device`."""
        freed = FreedMemoryRelease()  # see LinearProbes.batches
        for batch in _batches(dataset, collator, order, batch_size):
            yield _to(batch, device)
            freed.release()

    @staticmethod
    def labels(batch: dict) -> torch.Tensor:
        return batch["labels"].cpu()

    def _call(self, parameters: dict, batch: dict):
        # tie_weights=False: the copies hold trainable head tensors only, which no other tensor is tied to, and
        # working the ties out walks every module of the backbone on each call
        return functional_call(self.model, parameters, (), batch, tie_weights=False)

    def _input(self, k: int, batch: dict) -> dict:
        return one_layer(batch, self.layers[k])

    def _active(self, active: list[int]) -> dict[str, torch.Tensor]:
        if active == list(range(len(self.layers))):
            return self.parameters
        index = torch.tensor(active, device=next(iter(self.parameters.values())).device)
        return {name: t.index_select(0, index) for name, t in self.parameters.items()}

    def _run_all(self, active: list[int], batch: dict, output, randomness: str = "error") -> torch.Tensor:
        """`output(model output)` of each active copy, stacked: one vmap over the copies (and over their layers of
        the stack, for probes)."""
        stacked = self._active(active)
        if self.layers[active[0]] is None:
            return vmap(lambda p: output(self._call(p, batch)), randomness=randomness)(stacked)
        chosen = batch[LAYERS_INPUT][:, [self.layers[k] for k in active]].unsqueeze(
            2
        )  # (batch, copies, 1, seq, hidden)
        rest = {key: value for key, value in batch.items() if key != LAYERS_INPUT}
        return vmap(
            lambda p, layer: output(self._call(p, {**rest, LAYERS_INPUT: layer})),
            in_dims=(0, 1),
            randomness=randomness,
        )(stacked, chosen)

    def losses(self, active: list[int], batch: dict) -> torch.Tensor:
        """Training losses of the `active` copies on one batch, each with the dropout masks of a lone run."""
        if self.vectorize:
            return self._run_all(active, batch, lambda out: out.loss, randomness="same")
        device = batch["labels"].device
        state, losses = _rng_state(device), []
        for k in active:
            _set_rng_state(state, device)
            losses.append(self._call(self.copy(k), self._input(k, batch)).loss)
        return torch.stack(losses)

    def predictor(self, active: list[int]) -> Callable[[dict], torch.Tensor]:
        """Arg-max label ids `(copies, batch, seq)` of the `active` copies on each batch of one eval pass (model in eval
        mode), their weights held still meanwhile: a Concat head's folded maps (`FoldedConcat.fold`) are made on the
        pass's first batch and kept for the others."""
        folds: list[tuple[torch.Tensor, torch.Tensor]] = []

        @torch.no_grad()
        def predicted(batch: dict) -> torch.Tensor:
            if not FoldedConcat.fits(self.model, batch):
                return self._model_predicted_ids(active, batch)
            if not folds:
                folds.extend(FoldedConcat.fold(self.model, self.copy(k)) for k in active)
            return torch.stack(
                [
                    FoldedConcat.logits(self.model, self._input(k, batch), fold).argmax(-1)
                    for k, fold in zip(active, folds)
                ]
            )

        return predicted

    @torch.no_grad()
    def _model_predicted_ids(self, active: list[int], batch: dict) -> torch.Tensor:
        if self.vectorize:
            return self._run_all(active, batch, lambda out: out.logits).argmax(-1)
        return torch.stack([self._call(self.copy(k), self._input(k, batch)).logits.argmax(-1) for k in active])

    def state(self, k: int) -> dict[str, torch.Tensor]:
        return {name: t[k].detach().to("cpu", copy=True) for name, t in self.parameters.items()}


class StackedAdamW:
    """
    AdamW for stacked copies (`StackedHeads.parameters`), each copy with its own peak learning rate and linear decay
    to 0 at the end of its own budget, its gradient norm clipped on its own: the `Trainer`'s optimisation
    (`torch.optim.AdamW` with `get_linear_schedule_with_warmup` and no warm-up, `clip_grad_norm_` per copy), as a
    few elementwise operations over all the copies at once instead of one optimiser per copy. Copy k's update is
    torch's, operation for operation (tests/test_stacked_heads.py checks it against `torch.optim.AdamW`).
    """

    def __init__(
        self,
        parameters: dict[str, torch.Tensor],
        learning_rates: Sequence[float],
        total_steps: Sequence[int],
        max_grad_norm: float = 1.0,
        betas: tuple[float, float] = ADAMW["betas"],
        eps: float = ADAMW["eps"],
    ):
        self.parameters, self.max_grad_norm, self.betas, self.eps = parameters, max_grad_norm, betas, eps
        self.peaks, self.total_steps = list(learning_rates), list(total_steps)
        self.exp_avg = {name: torch.zeros_like(t) for name, t in parameters.items()}
        self.exp_avg_sq = {name: torch.zeros_like(t) for name, t in parameters.items()}
        self.steps = 0  # every copy still training has taken as many steps as the others

    @torch.no_grad()
    def step(self, active: list[int]) -> None:
        """One step of the `active` copies (each with the gradient it holds), then their gradients zeroed."""
        everyone = active == list(range(len(self.peaks)))
        device = next(iter(self.parameters.values())).device
        index = None if everyone else torch.tensor(active, device=device)
        pick = (lambda t: t) if everyone else (lambda t: t.index_select(0, index))
        grads = {
            name: pick(t.grad) if t.grad is not None else torch.zeros_like(pick(t))
            for name, t in self.parameters.items()
        }
        # clip_grad_norm_ per copy: the norm of the norms of each of its gradients
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads.values()], dim=1)
        total = torch.linalg.vector_norm(norms, dim=1)
        scale = torch.clamp(self.max_grad_norm / (total + 1e-6), max=1.0)
        self.steps += 1
        beta1, beta2 = self.betas
        bias_correction1, bias_correction2 = 1 - beta1**self.steps, 1 - beta2**self.steps
        step_sizes = torch.tensor(
            [-self.learning_rate_at(k, self.steps - 1) / bias_correction1 for k in active], dtype=torch.float64
        )
        for name, parameter in self.parameters.items():
            shape = (len(active),) + (1,) * (parameter.dim() - 1)
            grad = grads[name].mul_(scale.view(shape))
            exp_avg, exp_avg_sq = pick(self.exp_avg[name]), pick(self.exp_avg_sq[name])
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(self.eps)
            # addcdiv_'s `value * exp_avg / denom`, with each copy's own value
            update = exp_avg.mul(step_sizes.to(device, parameter.dtype).view(shape)).div_(denom)
            if everyone:
                parameter.add_(update)
            else:
                parameter.index_add_(0, index, update)
                self.exp_avg[name].index_copy_(0, index, exp_avg)
                self.exp_avg_sq[name].index_copy_(0, index, exp_avg_sq)
            parameter.grad = None

    def learning_rate_at(self, k: int, step: int) -> float:
        """Copy k's learning rate at `step` (counted from 0): the linear schedule's, without warm-up."""
        total = self.total_steps[k]
        return self.peaks[k] * max(0.0, float(total - step) / float(max(1, total)))


class LinearProbes:
    """
    `StackedHeads` for heads on one layer each whose head is one linear map of each labelled token after dropout (the
    Base token classifier, FE, on a `FeatureCache`): every copy's logits come from one batched product over the
    labelled positions, read straight from the cache's rows. The numbers are the model's (tests/test_stacked_heads.py
    compares them with `StackedHeads`): with labels, the model's Base head reads exactly these positions, in this
    order (sentence after sentence), draws its dropout mask over them, and averages the loss over them; every copy
    gets the mask a lone run draws. What it saves is the padded batch of every cached layer, built and cast for each
    batch, and one model call per copy, which on a 30-layer probe are most of the time.
    """

    def __init__(self, model: torch.nn.Module, copies: int, layers: Sequence[int]):
        self.stacked = StackedHeads(model, copies, vectorize=False, layers=layers)
        names = {id(parameter): name for name, parameter in model.named_parameters()}
        self.weight_name, self.bias_name = (names[id(parameter)] for parameter in model.classifier_parameters())
        # the heads' dtype (fp32 over a backbone kept in bf16 or fp16 as it was saved), which the features are cast to
        self.parameters, self.dropout = self.stacked.parameters, model.dropout
        self.dtype = self.parameters[self.weight_name].dtype
        # a copy that names no layer reads the stack as it is: a Base head's one layer, the stack's last
        layers = [-1 if layer is None else layer for layer in layers]
        self.read = sorted(set(layers))  # the cached layers some copy reads, gathered once per batch
        self.read_index = torch.tensor(self.read)[None]
        self.slab = [self.read.index(layer) for layer in layers]

    @classmethod
    def fits(cls, model: torch.nn.Module, layers: Sequence[int | None], dataset) -> bool:
        """Whether `model` is such a head, and `dataset` a cache whose rows it reads: the layer each copy names, or
        the one layer cached."""
        return (
            linear_token_classifier(model)
            and model.config.fusion_spec.passes_layer_through
            and model.fuse_labelled_positions_only
            and {id(p) for p in model.parameters() if p.requires_grad} == set(map(id, model.classifier_parameters()))
            and isinstance(dataset, FeatureCache)
            and dataset.labels is not None
            and (all(layer is not None for layer in layers) or dataset.features.shape[1] == 1)
        )

    def batches(self, dataset: FeatureCache, collator, order: Sequence[int], batch_size: int, device: torch.device):
        """Batches as `(features (layers read, labelled positions, hidden), labels (batch, seq))`."""
        freed = FreedMemoryRelease()
        for start in range(0, len(order), batch_size):
            sentences = order[start : start + batch_size]
            labels = [torch.as_tensor(dataset.labels[i]).long() for i in sentences]
            # the cache's rows of the labelled positions (all of them, in a cache of the labelled positions only)
            rows = torch.cat(
                [dataset.offsets[i] + torch.nonzero(label != -100).flatten() for i, label in zip(sentences, labels)]
            )
            # only the layers some copy reads: the cache's other rows stay on disk (or in place), uncopied
            features = (
                dataset.features[rows[:, None], self.read_index].to(device=device, dtype=self.dtype).transpose(0, 1)
            )
            labels = torch.nn.utils.rnn.pad_sequence(labels, batch_first=True, padding_value=-100)
            yield features.contiguous(), labels.to(device)
            # The last batch's features and step are freed by now; glibc keeps such blocks (megabytes each) in its
            # heap, where they fragment: never handed back, a 10x larger dev set left 0.18-0.37 GiB more anonymous
            # memory after one pass over it (tests/test_cli_train.py's memory budget, `dwatt probe`)
            freed.release()

    @staticmethod
    def labels(batch) -> torch.Tensor:
        return batch[1].cpu()

    def _logits(self, active: list[int], features: torch.Tensor, dropped: bool) -> torch.Tensor:
        """`(copies, positions, labels)`: each active copy's classifier on its own layer of `features`, one product
        per layer for all the copies that read it."""
        if dropped:  # one mask over (positions, hidden), drawn as the model's dropout draws it, for every copy
            features = features * self.dropout(torch.ones_like(features[0]))
        readers: dict[int, list[int]] = {}
        for k in active:
            readers.setdefault(self.slab[k], []).append(k)
        pieces, order = [], []
        device = features.device
        for slab, ks in readers.items():
            index = torch.tensor(ks, device=device)
            weight = self.parameters[self.weight_name].index_select(0, index).flatten(0, 1)
            bias = self.parameters[self.bias_name].index_select(0, index).flatten(0, 1)
            pieces.append(
                F.linear(features[slab], weight, bias).unflatten(-1, (len(ks), -1))
            )  # (positions, copies, labels)
            order += ks
        logits = torch.cat(pieces, dim=1).transpose(0, 1)
        where = {k: i for i, k in enumerate(order)}
        return logits if order == active else logits[[where[k] for k in active]]

    def losses(self, active: list[int], batch) -> torch.Tensor:
        features, labels = batch
        logits = self._logits(active, features, dropped=True)
        targets = labels[labels != -100]
        summed = F.cross_entropy(logits.flatten(0, 1), targets.repeat(len(active)), reduction="none")
        return summed.view(len(active), -1).sum(1) / max(len(targets), 1)

    def predictor(self, active: list[int]) -> Callable[[tuple], torch.Tensor]:
        """`predicted_ids` of the `active` copies on each batch of one eval pass (as `StackedHeads.predictor`)."""
        return partial(self.predicted_ids, active)

    @torch.no_grad()
    def predicted_ids(self, active: list[int], batch) -> torch.Tensor:
        features, labels = batch
        ids = self._logits(active, features, dropped=False).argmax(-1)
        scored = (labels != -100).expand(len(active), *labels.shape)
        return torch.zeros(len(active), *labels.shape, dtype=ids.dtype, device=ids.device).index_put(
            (scored,), ids.flatten()
        )

    def state(self, k: int) -> dict[str, torch.Tensor]:
        return self.stacked.state(k)

    @classmethod
    @torch.no_grad()
    def predict(
        cls,
        model: torch.nn.Module,
        states: Sequence[dict[str, torch.Tensor]],
        layers: Sequence[int | None],
        dataset: FeatureCache,
        batch_size: int = 32,
    ) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
        """Each head's (`states`, reading `layers`) predicted label ids on `dataset`, batch by batch, and the labels:
        the inputs of `NERMetrics.score_ids`, for every head from one pass over the cache."""
        heads, device = cls(model, len(states), layers), next(model.parameters()).device
        with torch.no_grad():
            for name in (heads.weight_name, heads.bias_name):
                heads.parameters[name].copy_(torch.stack([state[name] for state in states]))
        everyone, predicted, labels = list(range(len(states))), [], []
        for batch in heads.batches(dataset, None, range(len(dataset)), batch_size, device):
            predicted.append(heads.predicted_ids(everyone, batch).cpu())
            labels.append(heads.labels(batch))
        return [[ids[k] for ids in predicted] for k in everyone], labels


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
    device = next(model.parameters()).device
    set_seed(seed)
    layers = [c.layer for c in copies]
    fits = LinearProbes.fits(model, layers, train_set) and LinearProbes.fits(model, layers, dev_set)
    if linear_probes and not fits:
        raise ValueError("linear_probes: only for a Base token classifier on one layer per copy, fed a feature cache")
    if fits and linear_probes is not False:
        heads = LinearProbes(model, len(copies), layers)
    else:
        heads = StackedHeads(model, len(copies), vectorize, layers)
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
        # padded and cast to fp32 (7.0 GiB for 1000 CoNLL-03 dev sentences on a 28 x 1536 LLM), growing with the dev
        # set
        predicted, first_pass, predict = [], not dev_labels, heads.predictor(active)
        for batch in heads.batches(dev_set, collator, range(len(dev_set)), eval_batch_size, device):
            predicted.append(predict(batch).cpu())
            if first_pass:
                dev_labels.append(heads.labels(batch))
        for position, k in enumerate(active):
            mine = [ids[position] for ids in predicted]
            metrics = score(mine, dev_labels)
            point = {"epoch": float(epoch), "step": step, metric: metrics[metric]}
            outcome = outcomes[k]
            if sample_score is not None:
                point[f"sample_{metric}"] = sample_score(mine, dev_labels)[metric]
                if outcome.sample_best is None or point[f"sample_{metric}"] > outcome.sample_best[f"sample_{metric}"]:
                    outcome.sample_best, outcome.sample_best_state = dict(point), heads.state(k)
            outcome.curve.append(point)
            if outcome.best is None or point[metric] > outcome.best[metric]:
                outcome.best = dict(point, metrics=metrics)
                outcome.best_state = heads.state(k)
            if epoch == outcome.epochs:
                outcome.final_state = heads.state(k)
        finished = time.perf_counter()
        timings["train_seconds"] += evaluated - started
        timings["eval_seconds"] += finished - evaluated
    model.train(was_training)
    return outcomes, timings


__all__ = [
    "BudgetOutcome",
    "HeadCopy",
    "LinearProbes",
    "StackedAdamW",
    "StackedHeads",
    "head_tensors",
    "one_layer",
    "train_heads",
]
