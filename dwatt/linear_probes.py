"""Heads on one layer each that are one linear map of each labelled token (a probe's Base token classifiers, FE, on a
feature cache), run as one batched product per layer over the cache's labelled rows instead of the model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
import torch.nn.functional as F

from .features.cache import FeatureCache
from .features.memory import FreedMemoryRelease
from .folding import linear_token_classifier
from .head_stack import StackedHeads


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


__all__ = ["LinearProbes"]
