"""A frozen backbone's features as a dataset: `FeatureCache` holds the hidden states of a tokenised split, unpadded and
token-major, in memory or memory-mapped from a file; `FeatureCollator` pads a batch of them for the model's
`backbone_hidden_states` input; and what a cache of a split will hold and take (`cached_layers`, `cache_nbytes`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset as TorchDataset

from ..tokenization import MODEL_INPUTS


def model_inputs(tokens, names: tuple[str, ...] = MODEL_INPUTS):
    """A tokenised split without its bookkeeping columns (sentence and window numbers, and word ids unless `names`
    holds them: `tokenization.model_input_names`): what the model and the padding collator take."""
    return tokens.select_columns([c for c in (*names, "labels") if c in tokens.column_names])


def dataset_fingerprint(dataset, columns: tuple[str, ...] = ("input_ids", "labels")) -> str:
    """A digest of a tokenised dataset's contents (not of its history), equal for equal token ids and labels."""
    digest = hashlib.blake2b(digest_size=16)
    for column in columns:
        if column in dataset.column_names:
            rows = dataset[column]
            digest.update(column.encode())
            rows = [row if isinstance(row, (list, tuple)) else [row] for row in rows]  # a label per sentence
            digest.update(np.asarray([len(row) for row in rows], dtype=np.int64).tobytes())
            digest.update(np.fromiter((v for row in rows for v in row), dtype=np.int64).tobytes())
    return digest.hexdigest()


class FeatureCache(TorchDataset):
    """
    Cached hidden states of a tokenised dataset. `features` is `(total_tokens, layers, hidden)`, in memory or
    memory-mapped from a file (`storage`); sentence `i` owns rows `offsets[i] : offsets[i] + lengths[i]`. Items are
    dicts with `backbone_hidden_states`
    `(layers, length, hidden)`, `attention_mask`, and `labels` when the dataset had them.
    """

    def __init__(
        self,
        features: torch.Tensor,
        offsets: list[int],
        lengths: list[int],
        labels: list | None = None,
        storage: str = "memory",
    ):
        self.features, self.offsets, self.lengths, self.labels = features, offsets, lengths, labels
        self.storage = storage  # "memory", or "disk" for a memory-mapped file

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start, length = self.offsets[index], self.lengths[index]
        item = {
            "backbone_hidden_states": self.features[start : start + length].transpose(0, 1),
            "attention_mask": torch.ones(length, dtype=torch.long),
        }
        if self.labels is not None:
            label = torch.as_tensor(self.labels[index])
            item["labels"] = label if label.is_floating_point() else label.long()
        return item

    @property
    def nbytes(self) -> int:
        return self.features.numel() * self.features.element_size()

    def select_layers(self, positions: list[int]) -> FeatureCache:
        """The same sentences with only the layers at `positions` of this cache's layer axis (a view for a run of
        consecutive layers, such as the last one alone)."""
        if positions == list(range(positions[0], positions[0] + len(positions))):
            features = self.features[:, positions[0] : positions[0] + len(positions)]
        else:
            features = self.features[:, positions]
        return FeatureCache(features, self.offsets, self.lengths, self.labels, self.storage)

    @classmethod
    def from_shares(cls, shares: list[tuple[list[int], FeatureCache]], count: int) -> FeatureCache:
        """One cache of `count` sentences from caches of disjoint shares of them, each given with the sentence
        indices it holds (what `distributed.split_and_gather` returns)."""
        where = {item: (cache, position) for items, cache in shares for position, item in enumerate(items)}
        missing = sorted(set(range(count)) - set(where))
        if missing:
            raise ValueError(f"the shares do not cover sentences {missing[:5]} of {count}")
        pieces, offsets, lengths, labels, start = [], [], [], [], 0
        for item in range(count):
            cache, position = where[item]
            length, first = cache.lengths[position], cache.offsets[position]
            pieces.append(cache.features[first : first + length])
            offsets.append(start)
            lengths.append(length)
            start += length
            if cache.labels is not None:
                labels.append(cache.labels[position])
        has_labels = shares[0][1].labels is not None
        return cls(
            torch.cat(pieces) if pieces else shares[0][1].features, offsets, lengths, labels if has_labels else None
        )


@dataclass
class FeatureCollator:
    """Pads `FeatureCache` items to the longest sentence of the batch and casts features to `dtype`."""

    dtype: torch.dtype = torch.float32

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(item["attention_mask"].shape[0] for item in items)
        layers, _, hidden = items[0]["backbone_hidden_states"].shape
        batch = len(items)
        states = torch.zeros(batch, layers, longest, hidden, dtype=self.dtype)
        mask = torch.zeros(batch, longest, dtype=torch.long)
        per_token = (
            "labels" in items[0] and items[0]["labels"].dim() == 1 and not items[0]["labels"].is_floating_point()
        )
        labels = torch.full((batch, longest), -100, dtype=torch.long) if per_token else None
        for row, item in enumerate(items):
            length = item["attention_mask"].shape[0]
            states[row, :, :length] = item["backbone_hidden_states"].to(self.dtype)
            mask[row, :length] = 1
            if per_token:
                labels[row, :length] = item["labels"]
        if "labels" in items[0] and not per_token:  # one label (or multi-hot row) per sentence
            labels = torch.stack([item["labels"] for item in items])
        output = {"backbone_hidden_states": states, "attention_mask": mask}
        if labels is not None:
            output["labels"] = labels
        return output


def cache_lengths(dataset, scored_positions_only: bool = False, pooled: str | None = None) -> list[int]:
    """How many positions `build_feature_cache` keeps of each sentence: the labelled ones, one (pooled), or all."""
    if scored_positions_only:
        return [sum(label != -100 for label in row) for row in dataset["labels"]]
    if pooled:
        return [1] * len(dataset)
    return [len(ids) for ids in dataset["input_ids"]]


def cached_layers(model, layers: Sequence[int] | None = None) -> list[int]:
    """The hidden states a feature cache keeps (indices into the backbone's hidden states, 0 = the embedding output):
    `layers`, or those the model's fusion reads."""
    indices = list(layers) if layers is not None else list(model.dwatt.fused_layer_indices)
    depth = model.config.run_depth
    if any(index > depth for index in indices):
        raise ValueError(
            f"cannot cache layers {[index for index in indices if index > depth]}: the model runs its backbone through "
            f"layer {depth} only; build it with backbone_depth={max(indices)} to cache deeper layers"
        )
    return indices


def cache_nbytes(
    model,
    dataset,
    dtype: torch.dtype,
    scored_positions_only: bool = False,
    pooled: str | None = None,
    layers: Sequence[int] | None = None,
) -> int:
    """The size `build_feature_cache` will give the features of `dataset`: positions x cached layers x width."""
    positions = sum(cache_lengths(dataset, scored_positions_only, pooled))
    width = model.dwatt.backbone.config.hidden_size
    return positions * len(cached_layers(model, layers)) * width * torch.empty((), dtype=dtype).element_size()
