"""What a task's module prepares for its runs trained together (`TrainedTogether`, from its `prepare_together`), and
`dwatt.training.together` trains."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..run_config import RunConfig


@dataclass
class TrainedTogether:
    """What runs trained together need of their task, prepared for the group's first run: the model in FE form (of
    the cached `cache_layers` where heads read one layer each), the cached training and dev sets with their collator,
    the training sample's size (a few-shot dev sample is as large), the dev scores (`score_ids(predicted, labels)` and
    `score_sample(predicted, labels, size, seed)`), a run's results from its best point and curve (its best weights
    loaded in the model), and the test split with its scores, where the run scores test."""

    model: torch.nn.Module
    tokenizer: object
    train_set: object
    dev_set: object
    collator: Callable
    train_size: int
    dev_metrics: object
    results: Callable[[RunConfig, dict, list[dict]], dict]
    test: Callable[[], tuple[object, object] | None]
