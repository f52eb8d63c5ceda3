"""What a run reads of its data before any backbone runs: its few-shot training sample (its labels shuffled for the
probe's selectivity control), the dev split or its fixed subset, and a test split. The runs and the baselines that
score on the same sample (`dwatt.experiment.baselines`) read it here."""

from __future__ import annotations

from .data.classification import class_names, load_classification_dataset
from .data.ner import load_ner_dataset
from .data.targets import MULTI_LABEL, REGRESSION
from .run_config import RunConfig
from .sampling import (
    few_shot_split,
    sample_examples_per_class,
    sample_examples_per_label,
    sample_sentences,
    with_shuffled_labels,
)
from .tasks import TASKS

DEV_SAMPLE_SEED = 1234  # one dev subsample for every run of every trial, so their scores compare


def _dev_subset_ids(dev, config: RunConfig) -> list[int] | None:
    """The rows of the fixed random `config.dev_sentences` subset of the dev split, or None where it is the whole."""
    if config.dev_sentences is not None and config.dev_sentences < len(dev):
        return sample_sentences(len(dev), config.dev_sentences, DEV_SAMPLE_SEED)
    return None


def dev_subset(dev, config: RunConfig):
    """The dev split, or the fixed random `config.dev_sentences` of it (the same subset for every run and trial)."""
    ids = _dev_subset_ids(dev, config)
    return dev if ids is None else dev.select(ids)


def dev_held_out(dev, config: RunConfig):
    """The dev split's examples outside its `config.dev_sentences` subset (`dev_subset`), in their order: a test set
    no choice was made on, for data without a test split; None where the subset is the whole split."""
    ids = _dev_subset_ids(dev, config)
    if ids is None:
        return None
    chosen = set(ids)
    return dev.select([i for i in range(len(dev)) if i not in chosen])


def ner_splits(config: RunConfig):
    """What a run reads of its data, before any backbone: the dataset, the N x C training sample drawn with
    `config.seed` (all of the training split without `n_shot`; its tags permuted with `shuffle_labels`), its rows in
    the training split, and the dev split or its fixed subset (`dev_subset`)."""
    data = load_ner_dataset(config.dataset, config.data_dir)
    train = data["train"]
    sampled_ids = list(range(len(train)))
    if config.n_shot is not None:
        train, sampled_ids = few_shot_split(train, config.n_shot, config.seed, config.sampling)
    if config.shuffle_labels:
        train = with_shuffled_labels(train, "ner_tags", config.seed)
    return data, train, sampled_ids, dev_subset(data["validation"], config)


def classification_splits(config: RunConfig):
    """What a run reads of its data, before any backbone: the dataset (its test split, with `--test` on data without
    one, the dev split's rest beyond `dev_sentences`: `dev_held_out`), the few-shot sample drawn with `config.seed`
    (N examples per class; multi-label: at least N carrying each label; regression: N examples; all of the training
    split without `n_shot`; their labels permuted with `shuffle_labels`), their rows, and the dev split or its fixed
    subset."""
    problem_type = TASKS[config.task].problem_type
    data = load_classification_dataset(config.dataset, config.data_dir, problem_type, **config.columns())
    if config.evaluate_test and "test" not in data:
        rest = dev_held_out(data["validation"], config)
        if rest is None:
            where = config.data_dir or config.dataset
            why = (
                " (offline, AG News's own test split is where both of the vendored splits come from)"
                if config.dataset == "ag_news" and config.data_dir is None
                else ""
            )
            raise ValueError(
                f"--test: {where} has no test split, only {' and '.join(data)}{why}; drop --test, give "
                "--dev-sentences below the dev split's size (test is then the rest of it), or point "
                "--data-dir at a folder with a test file"
            )
        data["test"] = rest
    train, sampled_ids = data["train"], list(range(len(data["train"])))
    if config.n_shot is not None:
        names = class_names(train)  # the loader's ClassLabel: the labels by id
        if problem_type == REGRESSION:
            sampled_ids = sample_sentences(len(train), config.n_shot, config.seed)
        elif problem_type == MULTI_LABEL:
            sampled_ids = sample_examples_per_label(train["label"], config.n_shot, config.seed, names)
        else:
            sampled_ids = sample_examples_per_class(train["label"], config.n_shot, config.seed, names)
        train = train.select(sampled_ids)
    if config.shuffle_labels:
        train = with_shuffled_labels(train, "label", config.seed, whole_items=True)
    dev = dev_subset(data["validation"], config)
    return data, train, sampled_ids, dev


__all__ = ["DEV_SAMPLE_SEED", "classification_splits", "dev_held_out", "dev_subset", "ner_splits"]
