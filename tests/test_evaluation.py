"""Scoring a checkpoint on a dataset (dwatt.serving.evaluation) as training scores it: seqeval's entity scores of a
tagger, accuracy and macro scores of a classifier, each refusing a split the data lacks or labels it does not share.
The command `dwatt evaluate` end to end: test_cli_train, test_classification."""

import pytest

from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.data import CONLL_LABELS, load_tokenizer
from dwatt.metrics import entity_scores
from dwatt.serving.evaluation import score_classifier, score_tagger
from dwatt.serving.prediction import predict_tags


def test_a_tagger_is_scored_with_seqeval_on_the_split_asked_for(tiny_backbone, tiny_conll):
    labels = dict(enumerate(CONLL_LABELS))
    model = DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="concat", id2label=labels).eval()
    tokenizer = load_tokenizer(tiny_backbone)
    scores = score_tagger(model, tokenizer, dataset=None, data_dir=str(tiny_conll), split="test", batch_size=3)
    from dwatt.data import load_conll2003

    rows = load_conll2003(tiny_conll)["test"].filter(lambda row: len(row["tokens"]) > 0)
    gold = [[CONLL_LABELS[t] for t in tags] for tags in rows["ner_tags"]]
    assert scores == {"split": "test", **entity_scores(gold, predict_tags(model, tokenizer, rows["tokens"]))}
    with pytest.raises(
        ValueError, match=r"--split: tiny-conll\d* \(.*\) has no 'dev' split; it has train, validation, test"
    ):
        score_tagger(model, tokenizer, dataset=None, data_dir=str(tiny_conll), split="dev")
    other = DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="concat", num_labels=3)
    with pytest.raises(ValueError, match=r"the checkpoint's labels \['LABEL_0', 'LABEL_1', 'LABEL_2'\] differ"):
        score_tagger(other, tokenizer, dataset=None, data_dir=str(tiny_conll), split="test")


def test_a_classifier_is_scored_on_labels_it_shares_with_the_data(tiny_backbone, tiny_topics):
    tokenizer = load_tokenizer(tiny_backbone)
    model = DWAttForSequenceClassification.from_backbone(
        str(tiny_backbone), fusion="scalar_mix", id2label={0: "food", 1: "people", 2: "places"}
    ).eval()
    scores = score_classifier(model, tokenizer, dataset="topics", data_dir=str(tiny_topics), split="validation")
    assert scores["split"] == "validation" and scores["examples"] == 9 and 0 <= scores["accuracy"] <= 1
    wrong = DWAttForSequenceClassification.from_backbone(
        str(tiny_backbone), fusion="scalar_mix", id2label={0: "food", 1: "sports"}
    )
    with pytest.raises(ValueError, match=r"the checkpoint's labels \['food', 'sports'\] differ from the dataset's"):
        score_classifier(wrong, tokenizer, dataset="topics", data_dir=str(tiny_topics), split="validation")
    with pytest.raises(ValueError, match=r"--split: topics has no 'test' split; it has train, validation"):
        score_classifier(model, tokenizer, dataset="topics", data_dir=str(tiny_topics), split="test")
