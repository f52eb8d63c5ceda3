"""NER scoring (dwatt.metrics): seqeval's scores from one pass, unlabelled positions ignored, and a sample of the dev
sentences scored from the same predictions."""

import numpy as np
import pytest
import torch
from seqeval.metrics import f1_score, precision_score, recall_score

from dwatt.metrics import IOBScorer, NERMetrics, decode_ids, entity_scores
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
    assert metrics.score_sample(predicted, labels, size=100, seed=3) == pytest.approx(
        metrics.score_ids(predicted, labels)
    )


def test_metrics_match_seqeval_on_hand_made_sequences():
    references = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"], ["O", "B-MISC", "I-MISC"]]
    predictions = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"], ["O", "B-MISC", "O"]]
    scores = entity_scores(references, predictions)
    # gold: PER, LOC, ORG, MISC; predicted: PER (right), ORG (wrong span type), ORG (right), MISC (wrong span)
    assert scores["precision"] == pytest.approx(2 / 4) == precision_score(references, predictions)
    assert scores["recall"] == pytest.approx(2 / 4) == recall_score(references, predictions)
    assert scores["f1"] == pytest.approx(0.5) == f1_score(references, predictions)
    assert scores["PER_f1"] == 1.0 and scores["LOC_recall"] == 0.0 and scores["ORG_precision"] == 0.5
    assert scores["MISC_support"] == 1


def test_trainer_metric_ignores_unlabelled_positions():
    names = ["O", "B-PER", "I-PER"]
    logits = np.zeros((1, 4, 3))
    logits[0, [0, 1, 2, 3], [0, 1, 2, 1]] = 1.0  # predicts O B-PER I-PER B-PER
    labels = np.array([[-100, 1, 2, -100]])
    metrics = NERMetrics(names)(type("EvalPrediction", (), {"predictions": logits, "label_ids": labels})())
    assert metrics["f1"] == 1.0


def test_one_pass_entity_scores_equal_seqeval_classification_report():
    from seqeval.metrics import classification_report

    rng = np.random.default_rng(0)
    tags = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
    for _ in range(50):
        references = [list(rng.choice(tags, size=rng.integers(1, 12))) for _ in range(20)]
        predictions = [list(rng.choice(tags, size=len(r))) for r in references]
        ours = entity_scores(references, predictions)
        report = classification_report(references, predictions, output_dict=True, zero_division=0)
        assert ours["f1"] == pytest.approx(report["micro avg"]["f1-score"], abs=1e-12)
        assert ours["precision"] == pytest.approx(report["micro avg"]["precision"], abs=1e-12)
        assert ours["recall"] == pytest.approx(report["micro avg"]["recall"], abs=1e-12)
        for entity in ("PER", "ORG", "LOC"):
            if entity in report:
                assert ours[f"{entity}_f1"] == pytest.approx(report[entity]["f1-score"], abs=1e-12)
                assert ours[f"{entity}_support"] == report[entity]["support"]


@pytest.mark.parametrize("windowed", [False, True])
def test_numpy_scores_of_label_ids_equal_seqeval_s(windowed):
    """`NERMetrics.score_ids` scores IOB ids in numpy (`IOBScorer`): the numbers of seqeval's path, windows joined."""
    rng = np.random.default_rng(1)
    names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
    rows = 24
    windows = [(i // 3, 2 - i % 3) for i in range(rows)] if windowed else None  # windows given out of order
    metrics = NERMetrics(names, windows=windows)  # one for all draws: a layout remembered must follow new labels
    for _ in range(40):
        lengths = rng.integers(0, 9, size=rows)
        longest = int(lengths.max()) + 2
        labels = np.full((rows, longest), -100)
        predicted = rng.integers(0, len(names), size=(rows, longest))
        for row, length in enumerate(lengths):
            labels[row, 1 : 1 + length] = rng.choice(len(names), size=length, p=[0.5] + [1 / 12] * 6)
        batches_predicted = [torch.as_tensor(predicted[i : i + 5]) for i in range(0, rows, 5)]
        batches_labels = [torch.as_tensor(labels[i : i + 5]) for i in range(0, rows, 5)]
        metrics.iob = IOBScorer.for_names(names)
        assert metrics.iob is not None
        fast = metrics.score_ids(batches_predicted, batches_labels)
        # the same labels again (the layout is remembered), with other predictions
        other = [torch.as_tensor(rng.integers(0, len(names), size=tuple(b.shape))) for b in batches_predicted]
        fast_other = metrics.score_ids(other, batches_labels)
        metrics.iob = None  # seqeval's path
        assert fast == pytest.approx(metrics.score_ids(batches_predicted, batches_labels), abs=1e-12)
        assert fast_other == pytest.approx(metrics.score_ids(other, batches_labels), abs=1e-12)
    assert NERMetrics(["O", "S-PER", "B-PER", "I-PER", "E-PER"]).iob is None  # IOBES: seqeval's path


def test_plain_tags_are_scored_per_token_and_iobes_spans_by_seqeval():
    from dwatt.metrics import NERMetrics, tag_scorer, token_scores

    gold = [["NOUN", "VERB", "DET", "NOUN"]]
    guessed = [["NOUN", "VERB", "NOUN", "NOUN"]]
    scores = token_scores(gold, guessed)
    assert scores["accuracy"] == scores["f1"] == pytest.approx(0.75)  # no O: micro F1 is accuracy
    assert scores["NOUN_precision"] == pytest.approx(2 / 3) and scores["DET_recall"] == 0.0
    assert scores["macro_f1"] == pytest.approx((0.8 + 1.0 + 0.0) / 3)
    with_outside = token_scores([["O", "PER", "O"]], [["PER", "PER", "O"]])
    assert with_outside["precision"] == pytest.approx(0.5) and with_outside["recall"] == 1.0
    assert tag_scorer(["NOUN", "VERB"]) is token_scores
    iobes = NERMetrics(["O", "B-X", "I-X", "E-X", "S-X"])
    assert iobes.score([["B-X", "E-X", "S-X"]], [["B-X", "E-X", "O"]])["f1"] == pytest.approx(2 / 3)
