"""NER scoring (dwatt.metrics): a sample of the dev sentences scored from the same predictions."""

import numpy as np
import pytest

from dwatt.metrics import NERMetrics, decode_ids, entity_scores
from dwatt.sampling import sample_sentences

NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def test_a_sample_of_the_sentences_scores_as_seqeval_on_those_sentences_alone():
    rng = np.random.default_rng(0)
    labels, predicted = [], []
    for _ in range(4):  # batches of 5 sentences, padded with -100
        gold = rng.integers(0, len(NAMES), (5, 9))
        gold[:, 7:] = -100
        gold[1, :] = -100  # a sentence with no labelled token is not a sentence of the sample
        guess = np.where(rng.random(gold.shape) < 0.7, gold, rng.integers(0, len(NAMES), gold.shape))
        labels.append(gold)
        predicted.append(np.where(gold == -100, 0, guess))
    metrics = NERMetrics(NAMES)
    scored = metrics.score_sample(predicted, labels, size=6, seed=3)
    references, predictions = decode_ids(np.concatenate(predicted), np.concatenate(labels), NAMES)
    kept = [(r, p) for r, p in zip(references, predictions) if r]  # the sentences with a labelled token
    chosen = sample_sentences(len(kept), 6, 3)
    expected = entity_scores([kept[i][0] for i in chosen], [kept[i][1] for i in chosen])
    assert scored == pytest.approx(expected)
    assert metrics.score_sample(predicted, labels, size=100, seed=3) == pytest.approx(metrics.score_ids(predicted, labels))
