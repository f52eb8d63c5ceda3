"""Entity-level NER scores with seqeval (offline; no Hub metric download)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from seqeval.metrics import accuracy_score, classification_report


def entity_scores(references: list[list[str]], predictions: list[list[str]]) -> dict[str, float]:
    """
    seqeval micro precision/recall/F1 (default CoNLL evaluation, IOB2 tags), token accuracy, and per entity type
    `<TYPE>_precision/_recall/_f1/_support`. Keys: `precision`, `recall`, `f1`, `accuracy`, ...
    """
    report = classification_report(references, predictions, output_dict=True, zero_division=0)
    scores = {
        "precision": float(report["micro avg"]["precision"]),
        "recall": float(report["micro avg"]["recall"]),
        "f1": float(report["micro avg"]["f1-score"]),
        "accuracy": float(accuracy_score(references, predictions)),
    }
    for entity, values in report.items():
        if entity.endswith(" avg"):
            continue
        scores[f"{entity}_precision"] = float(values["precision"])
        scores[f"{entity}_recall"] = float(values["recall"])
        scores[f"{entity}_f1"] = float(values["f1-score"])
        scores[f"{entity}_support"] = int(values["support"])
    return scores


def decode_tags(logits: np.ndarray, labels: np.ndarray, names: Sequence[str]) -> tuple[list[list[str]], list[list[str]]]:
    """Reference and predicted tag strings at labelled positions (label != -100), one list per sentence."""
    predicted = np.asarray(logits).argmax(-1)
    references, predictions = [], []
    for row_pred, row_label in zip(predicted, labels):
        keep = row_label != -100
        references.append([names[i] for i in row_label[keep]])
        predictions.append([names[i] for i in row_pred[keep]])
    return references, predictions


class NERMetrics:
    """`compute_metrics` for `transformers.Trainer`: seqeval scores of an `EvalPrediction`."""

    def __init__(self, label_names: Sequence[str]):
        self.label_names = list(label_names)

    def __call__(self, eval_prediction) -> dict[str, float]:
        logits, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(logits, tuple):
            logits = logits[0]
        return entity_scores(*decode_tags(logits, labels, self.label_names))
