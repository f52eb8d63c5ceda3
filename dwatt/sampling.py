"""Few-shot samplers: which training sentences a trial sees."""

from __future__ import annotations

import numpy as np
from datasets import Dataset

from .data.tag_sets import entity_types, scheme_of
from .data.tag_sets import mentions as mentions_of


class SamplingError(ValueError):
    """A sample that the pool cannot provide."""


def sample_sentences(pool_size: int, count: int, seed: int) -> list[int]:
    """
    `count` sentence indices drawn uniformly without replacement from a pool of `pool_size`, with a generator
    seeded by `seed` (the same seed always gives the same sentences). Sorted ascending. A pool of exactly `count`
    sentences is taken whole (WikiAnn's smallest languages have 100 training sentences).
    """
    if count < 1:
        raise SamplingError(f"the number of sentences to sample must be >= 1, got {count}")
    if count > pool_size:
        raise SamplingError(f"cannot sample {count} sentences from a pool of {pool_size}")
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(pool_size, size=count, replace=False))


def sample_uniform(pool_size: int, n_shot: int, num_classes: int, seed: int) -> list[int]:
    """The paper's CoNLL protocol: N x C sentences drawn by `sample_sentences`."""
    if n_shot < 1 or num_classes < 1:
        raise SamplingError(f"n_shot and num_classes must be >= 1, got n_shot={n_shot}, num_classes={num_classes}")
    wanted = n_shot * num_classes
    if wanted > pool_size:
        raise SamplingError(f"cannot sample {n_shot} x {num_classes} = {wanted} sentences from a pool of {pool_size}")
    return sample_sentences(pool_size, wanted, seed)


def sample_per_class(
    tags: list[list[str]], n_shot: int, entity_types: list[str], seed: int, scheme: str = "IOB2"
) -> list[int]:
    """
    At least `n_shot` sentences mentioning each entity type: sentences are visited in a seeded random order and
    kept while some type they mention still needs examples. `tags` are the tag strings of each sentence, in
    `scheme` (`tag_sets.scheme_of`: a span's first tag mentions its type; a plain tag, itself).
    """
    mentions = [mentions_of(sentence, scheme) for sentence in tags]
    return _covering_sample(mentions, n_shot, entity_types, seed, lambda n, e: f"only {n} sentences mention {e}")


def sample_examples_per_label(
    label_sets: list[list[int]], n_shot: int, seed: int, label_names: list[str] | None = None
) -> list[int]:
    """
    Few-shot multi-label classification: at least `n_shot` examples carrying each label present, drawn as
    `sample_per_class` draws sentences (visited in a seeded random order, kept while a label they carry still
    needs examples). A label too rare is named (`label_names`, by id) where given.
    """
    carried = [set(labels) for labels in label_sets]
    present = sorted(set().union(*carried)) if carried else []

    def too_few(available, label):
        return f"only {available} examples carry the label {label_names[label] if label_names else label!r}"

    return _covering_sample(carried, n_shot, present, seed, too_few)


def _covering_sample(mentions: list[set], n_shot: int, classes: list, seed: int, too_few) -> list[int]:
    """Indices (sorted) of items visited in a seeded random order, each kept while one of the classes it mentions
    still needs examples, until every class has `n_shot`; `too_few(available, class)` words a class too rare."""
    if n_shot < 1:
        raise SamplingError(f"n_shot must be >= 1, got {n_shot}")
    for name in classes:
        available = sum(name in m for m in mentions)
        if available < n_shot:
            raise SamplingError(f"{too_few(available, name)}; cannot sample {n_shot} of them")
    needed = dict.fromkeys(classes, n_shot)
    chosen = []
    for index in np.random.default_rng(seed).permutation(len(mentions)):
        useful = [e for e in mentions[index] if needed.get(e, 0) > 0]
        if useful:
            chosen.append(int(index))
            for name in mentions[index]:
                if name in needed:
                    needed[name] -= 1
        if not any(needed.values()):
            break
    return sorted(chosen)


def sample_examples_per_class(
    labels: list[int], n_shot: int, seed: int, label_names: list[str] | None = None
) -> list[int]:
    """
    Few-shot text classification: exactly `n_shot` examples of each class present in `labels`, drawn uniformly
    without replacement within the class by one generator seeded with `seed`. Sorted ascending. A class too small
    is named by its label (`label_names`, by id) where given.
    """
    if n_shot < 1:
        raise SamplingError(f"n_shot must be >= 1, got {n_shot}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    chosen = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        if len(members) < n_shot:
            name = repr(label_names[int(label)]) if label_names else int(label)
            raise SamplingError(f"class {name} has {len(members)} examples; cannot sample {n_shot} of them")
        chosen += [int(i) for i in rng.choice(members, size=n_shot, replace=False)]
    return sorted(chosen)


def few_shot_split(train: Dataset, n_shot: int, seed: int, strategy: str = "uniform") -> tuple[Dataset, list[int]]:
    """
    A few-shot training set drawn from `train` (a dataset with `ner_tags` of any tag set): `strategy="uniform"`
    draws N x C sentences (C = the data's own entity types, or plain tags but O: `tag_sets.entity_types`), `"per_class"` at least N per type, `"sentences"` exactly N
    sentences (WikiAnn's protocol: 100 per language). Returns the subset and the indices of the chosen sentences.
    """
    names = train.features["ner_tags"].feature.names
    entities = entity_types(names)
    if strategy == "sentences":
        indices = sample_sentences(len(train), n_shot, seed)
    elif strategy == "uniform":
        indices = sample_uniform(len(train), n_shot, len(entities), seed)
    elif strategy == "per_class":
        tags = [[names[t] for t in sentence] for sentence in train["ner_tags"]]
        indices = sample_per_class(tags, n_shot, entities, seed, scheme_of(names))
    else:
        raise SamplingError(f"unknown sampling strategy {strategy!r}; expected 'uniform', 'per_class' or 'sentences'")
    return train.select(indices), indices


def with_shuffled_labels(sample: Dataset, column: str, seed: int, whole_items: bool = False) -> Dataset:
    """
    `sample` with the labels of `column` permuted among its items (a control: a head trained on them can learn the
    sample, not the task). A label column of sequences (NER's tags) is permuted over every word of the sample, each
    sentence keeping its length; a column of single labels, or with `whole_items` each item's list (a multi-label
    text's set of labels), over the examples. The same `seed` always permutes alike,
    and the labels' counts are the sample's own.
    """
    labels = sample[column]
    generator = np.random.default_rng(seed)
    if labels and isinstance(labels[0], list) and whole_items:
        shuffled = [labels[i] for i in generator.permutation(len(labels))]
    elif labels and isinstance(labels[0], list):
        flat = generator.permutation([label for sentence in labels for label in sentence]).tolist()
        starts = np.cumsum([0] + [len(sentence) for sentence in labels]).tolist()
        shuffled = [flat[start:end] for start, end in zip(starts, starts[1:])]
    else:
        shuffled = generator.permutation(labels).tolist()
    return sample.remove_columns(column).add_column(column, shuffled, feature=sample.features[column])
