"""Few-shot samplers: counts, determinism, error cases."""

import pytest
from datasets import ClassLabel, Dataset, Features, Sequence, Value

from dwatt.sampling import SamplingError, few_shot_split, sample_per_class, sample_uniform

LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def pool(size: int) -> Dataset:
    tags = [[1, 2, 0] if i % 4 == 0 else [3, 0] if i % 4 == 1 else [5] if i % 4 == 2 else [7, 8] for i in range(size)]
    features = Features({"tokens": Sequence(Value("string")), "ner_tags": Sequence(ClassLabel(names=LABELS))})
    return Dataset.from_dict({"tokens": [["w"] * len(t) for t in tags], "ner_tags": tags}, features=features)


def test_uniform_draws_n_times_c_distinct_sentences_reproducibly():
    first = sample_uniform(1000, n_shot=16, num_classes=4, seed=3)
    assert len(first) == 64 == len(set(first)) and all(0 <= i < 1000 for i in first)
    assert sample_uniform(1000, 16, 4, seed=3) == first
    assert sample_uniform(1000, 16, 4, seed=4) != first


def test_uniform_is_uniform_over_the_pool():
    counts = [0] * 10
    for seed in range(2000):
        for index in sample_uniform(10, 1, 2, seed):
            counts[index] += 1
    assert all(340 < c < 460 for c in counts), counts  # 400 expected each


def test_asking_for_more_than_the_pool_is_an_error():
    with pytest.raises(SamplingError, match=r"cannot sample 8 x 4 = 32 sentences from a pool of 31"):
        sample_uniform(31, 8, 4, seed=0)
    with pytest.raises(SamplingError, match="n_shot and num_classes must be >= 1"):
        sample_uniform(31, 0, 4, seed=0)


def test_few_shot_split_uses_the_tag_set_entity_count():
    train = pool(100)
    subset, indices = few_shot_split(train, n_shot=2, seed=0)
    assert len(subset) == 8 and subset["ner_tags"] == [train[i]["ner_tags"] for i in indices]
    with pytest.raises(SamplingError, match="unknown sampling strategy"):
        few_shot_split(train, 2, 0, strategy="stratified")


def test_per_class_sampling_covers_every_type():
    train = pool(100)
    subset, indices = few_shot_split(train, n_shot=3, seed=1, strategy="per_class")
    mentioned = [{LABELS[t][2:] for t in tags if LABELS[t].startswith("B-")} for tags in subset["ner_tags"]]
    for entity in ("PER", "ORG", "LOC", "MISC"):
        assert sum(entity in m for m in mentioned) >= 3
    assert few_shot_split(train, 3, 1, strategy="per_class")[1] == indices
    with pytest.raises(SamplingError, match="only 0 sentences mention MISC"):
        sample_per_class([["B-PER"]] * 5, 1, ["PER", "MISC"], seed=0)


def test_sentences_strategy_draws_exactly_that_many_and_takes_a_small_pool_whole():
    train = pool(300)
    subset, ids = few_shot_split(train, 100, seed=1, strategy="sentences")
    assert len(subset) == 100 == len(set(ids)) and ids == sorted(ids)
    assert few_shot_split(train, 100, seed=1, strategy="sentences")[1] == ids
    assert few_shot_split(pool(100), 100, seed=5, strategy="sentences")[1] == list(range(100))
    with pytest.raises(SamplingError, match="cannot sample 101 sentences from a pool of 100"):
        few_shot_split(pool(100), 101, seed=0, strategy="sentences")


def test_shuffled_labels_permute_a_samples_tags_over_its_words_and_its_classes_over_its_examples():
    """NER: every word's tag permuted over the sample's words, each sentence keeping its length and the tags their
    counts; text classification: the labels over the examples. The seed fixes the permutation; features are kept."""
    from collections import Counter

    from datasets import ClassLabel, Dataset, Features, Sequence, Value

    from dwatt.sampling import with_shuffled_labels

    tags = [[0, 1, 2, 0], [3, 4], [0, 0, 5, 6, 0], [1]]
    features = Features({"tokens": Sequence(Value("string")), "ner_tags": Sequence(ClassLabel(num_classes=7))})
    ner = Dataset.from_dict({"tokens": [["w"] * len(t) for t in tags], "ner_tags": tags}, features=features)
    shuffled = with_shuffled_labels(ner, "ner_tags", seed=3)
    assert [len(t) for t in shuffled["ner_tags"]] == [len(t) for t in tags]
    flat = [tag for sentence in shuffled["ner_tags"] for tag in sentence]
    assert Counter(flat) == Counter(tag for sentence in tags for tag in sentence) and shuffled["ner_tags"] != tags
    assert shuffled.features == ner.features and shuffled["tokens"] == ner["tokens"]
    assert with_shuffled_labels(ner, "ner_tags", seed=3)["ner_tags"] == shuffled["ner_tags"]
    labels = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    cls = Dataset.from_dict(
        {"text": ["t"] * 12, "label": labels},
        features=Features({"text": Value("string"), "label": ClassLabel(names=["a", "b", "c", "d"])}),
    )
    permuted = with_shuffled_labels(cls, "label", seed=0)["label"]
    assert sorted(permuted) == labels and permuted != labels
