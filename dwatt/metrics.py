"""Token-labelling scores: entity-level spans with seqeval (IOB2 and IOBES; offline, no Hub metric download), and
plain tags per token (`token_scores`); text tasks' scores: single-label, multi-label and regression."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from seqeval.metrics import accuracy_score
from seqeval.metrics.sequence_labeling import get_entities

from .data.tag_sets import OUTSIDE, scheme_of
from .data.targets import decided
from .sampling import sample_sentences


def _prf(correct: int, predicted: int, gold: int) -> tuple[float, float, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def entity_scores(references: list[list[str]], predictions: list[list[str]]) -> dict[str, float]:
    """
    seqeval's entity-level scores in its default (CoNLL) mode: micro precision/recall/F1, token accuracy, and per
    entity type `<TYPE>_precision/_recall/_f1/_support`. The entities come from seqeval's own `get_entities`, read
    once per call (its `classification_report` reads them once per statistic); the numbers are the same
    (tests/test_metrics.py compares them on random sequences).
    """
    gold = set(get_entities(references))
    predicted = set(get_entities(predictions))
    correct = gold & predicted
    count_gold, count_predicted, count_correct = (Counter(e[0] for e in s) for s in (gold, predicted, correct))
    precision, recall, f1 = _prf(len(correct), len(predicted), len(gold))
    scores = {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "accuracy": float(accuracy_score(references, predictions)),
    }
    for entity in sorted(count_gold | count_predicted):
        p, r, f = _prf(count_correct[entity], count_predicted[entity], count_gold[entity])
        scores.update(
            {
                f"{entity}_precision": p,
                f"{entity}_recall": r,
                f"{entity}_f1": f,
                f"{entity}_support": count_gold[entity],
            }
        )
    return scores


def token_scores(references: list[list[str]], predictions: list[list[str]]) -> dict[str, float]:
    """
    Plain tags (no span prefixes: part of speech, say), scored per token: micro precision/recall/F1 over the tokens
    whose gold or predicted tag is not `O` (where the tag set has no `O`, all three equal token accuracy), the macro
    F1 over the tags (`macro_f1`), token `accuracy`, and per tag `<TAG>_precision/_recall/_f1/_support`: the same keys
    as `entity_scores`, so that tables and choices read them alike.
    """
    gold = [tag for sentence in references for tag in sentence]
    guessed = [tag for sentence in predictions for tag in sentence]
    correct = Counter(g for g, p in zip(gold, guessed) if g == p)
    count_gold, count_predicted = Counter(gold), Counter(guessed)
    tags = sorted((set(count_gold) | set(count_predicted)) - {OUTSIDE})
    precision, recall, f1 = _prf(
        sum(correct[t] for t in tags), sum(count_predicted[t] for t in tags), sum(count_gold[t] for t in tags)
    )
    scores = {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "accuracy": sum(correct.values()) / len(gold) if gold else 0.0,
    }
    per_tag = []
    for tag in tags:
        p, r, f = _prf(correct[tag], count_predicted[tag], count_gold[tag])
        per_tag.append(f)
        scores.update({f"{tag}_precision": p, f"{tag}_recall": r, f"{tag}_f1": f, f"{tag}_support": count_gold[tag]})
    scores["macro_f1"] = float(np.mean(per_tag)) if per_tag else 0.0
    return scores


def tag_scorer(label_names: Sequence[str]):
    """The scorer of a tag set: `token_scores` for plain tags, else seqeval's `entity_scores`."""
    return token_scores if scheme_of(label_names) == "plain" else entity_scores


def decode_tags(
    logits: np.ndarray, labels: np.ndarray, names: Sequence[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """Reference and predicted tag strings at labelled positions (label != -100), one list per sentence."""
    return decode_ids(np.asarray(logits).argmax(-1), labels, names)


def decode_ids(
    predicted: np.ndarray, labels: np.ndarray, names: Sequence[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """`decode_tags` from predicted label ids `(sentences, seq)` instead of logits."""
    predicted, labels = np.asarray(predicted), np.asarray(labels)
    names = np.asarray(names, dtype=object)
    references, predictions = [], []
    for row_pred, row_label in zip(predicted, labels):
        keep = row_label != -100
        references.append(names[row_label[keep]].tolist())
        predictions.append(names[row_pred[keep]].tolist())
    return references, predictions


def reassemble(rows: list[list[str]], windows: Sequence[tuple[int, int]] | None) -> list[list[str]]:
    """Join the windows of each sentence (rows tagged `(sentence, window)`) back into one tag sequence per sentence,
    in window order; without `windows` every row is a sentence."""
    if windows is None:
        return rows
    if len(windows) != len(rows):
        raise ValueError(f"{len(rows)} rows of predictions but {len(windows)} (sentence, window) tags")
    joined: dict[int, list[str]] = {}
    for index in sorted(range(len(rows)), key=lambda i: tuple(windows[i])):
        joined.setdefault(windows[index][0], []).extend(rows[index])
    return list(joined.values())


class IOBScorer:
    """
    `entity_scores` on label ids, in numpy: the same numbers (seqeval's default mode: a chunk starts at B-X, at I-X
    after O or after another type, and runs on over I-X), without building tag strings or entity lists in Python.
    Scoring many heads on one dev split after every epoch (`dwatt.stacked_heads.train_heads`) is where the time would
    go.
    Only for IOB tags (`B-`, `I-`, `O`); `for_names` returns None for any other scheme.
    """

    def __init__(self, kinds: np.ndarray, types: np.ndarray, type_names: list[str]):
        self.kinds, self.types, self.type_names = kinds, types, type_names  # kinds: 0 O, 1 B, 2 I

    @classmethod
    def for_names(cls, names: Sequence[str]) -> IOBScorer | None:
        kinds, types, type_names = [], [], []
        for name in names:
            if name == "O":
                kinds.append(0)
                types.append(-1)
                continue
            prefix, _, entity = name.partition("-")
            if prefix not in ("B", "I") or not entity:
                return None
            if entity not in type_names:
                type_names.append(entity)
            kinds.append(1 if prefix == "B" else 2)
            types.append(type_names.index(entity))
        return cls(np.asarray(kinds), np.asarray(types), type_names)

    def entities(self, ids: np.ndarray, sentence_starts: np.ndarray) -> np.ndarray:
        """The chunks of the flat tag ids as `(start, end, type)` rows (`sentence_starts` marks each sentence's first
        token: a chunk never runs across sentences)."""
        kinds, types = self.kinds[ids], self.types[ids]
        inside = kinds != 0
        previous_types = np.concatenate(([-1], types[:-1]))
        previous_inside = np.concatenate(([False], inside[:-1]))
        continues = (kinds == 2) & previous_inside & (previous_types == types) & ~sentence_starts
        starts = np.flatnonzero(inside & ~continues)
        ends = np.flatnonzero(inside & ~np.concatenate((continues[1:], [False])))
        return np.stack([starts, ends, types[starts]], axis=1)

    def scores(self, gold_ids: np.ndarray, predicted_ids: np.ndarray, sentence_starts: np.ndarray) -> dict[str, float]:
        gold, predicted = self.entities(gold_ids, sentence_starts), self.entities(predicted_ids, sentence_starts)
        width = len(gold_ids) + 1

        def keys(chunks):
            return (chunks[:, 0] * width + chunks[:, 1]) * len(self.type_names) + chunks[:, 2]

        correct_keys = np.intersect1d(keys(gold), keys(predicted), assume_unique=True)
        correct_types = correct_keys % max(len(self.type_names), 1)
        count = [np.bincount(t, minlength=len(self.type_names)) for t in (gold[:, 2], predicted[:, 2], correct_types)]
        precision, recall, f1 = _prf(len(correct_keys), len(predicted), len(gold))
        scores = {
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "accuracy": float((gold_ids == predicted_ids).mean()) if len(gold_ids) else 0.0,
        }
        for index in sorted(range(len(self.type_names)), key=self.type_names.__getitem__):
            if count[0][index] or count[1][index]:
                p, r, f = _prf(int(count[2][index]), int(count[1][index]), int(count[0][index]))
                name = self.type_names[index]
                scores.update(
                    {
                        f"{name}_precision": p,
                        f"{name}_recall": r,
                        f"{name}_f1": f,
                        f"{name}_support": int(count[0][index]),
                    }
                )
        return scores


class NERMetrics:
    """
    `compute_metrics` for `transformers.Trainer`: seqeval scores of an `EvalPrediction`. With `windows` (the eval
    set's `(sentence, window)` per row, in its order), windows of long sentences are scored as whole sentences.
    """

    def __init__(self, label_names: Sequence[str], windows: Sequence[tuple[int, int]] | None = None):
        self.label_names = list(label_names)
        self.windows = windows
        self.iob = IOBScorer.for_names(self.label_names)
        self.scorer = tag_scorer(self.label_names)
        self._remembered_layout = None

    def __call__(self, eval_prediction) -> dict[str, float]:
        logits, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(logits, tuple):
            logits = logits[0]
        return self.score(*decode_tags(logits, labels, self.label_names))

    def score_ids(self, predicted: Sequence, labels: Sequence) -> dict[str, float]:
        """The same scores from predicted label ids and labels given batch by batch (lists of `(batch, seq)`
        arrays or tensors, in the eval set's order), as `dwatt.stacked_heads.train_heads` produces them; in numpy for
        IOB
        tags (`IOBScorer`), through seqeval otherwise."""
        if self.iob is not None:
            return self.iob.scores(*self.flat_ids(predicted, labels))
        references, predictions = [], []
        for batch_predicted, batch_labels in zip(predicted, labels):
            batch_references, batch_predictions = decode_ids(batch_predicted, batch_labels, self.label_names)
            references += batch_references
            predictions += batch_predictions
        return self.score(references, predictions)

    def score_sample(self, predicted: Sequence, labels: Sequence, size: int, seed: int) -> dict[str, float]:
        """`score_ids` over `size` of the eval set's sentences drawn uniformly with `seed` (`sample_sentences` over
        the sentences with a labelled token, in scoring order): the same sentences for every call on one eval set.
        Exact: chunks never cross sentences. IOB tags only."""

        if self.iob is None:
            raise ValueError("scoring a sample of the dev sentences needs IOB tags (B-, I-, O)")
        gold, guessed, starts = self.flat_ids(predicted, labels)
        sentence = np.cumsum(starts) - 1  # each scored position's sentence, in scoring order
        chosen = np.isin(sentence, sample_sentences(int(starts.sum()), min(size, int(starts.sum())), seed))
        return self.iob.scores(gold[chosen], guessed[chosen], starts[chosen])

    def score(self, references: list[list[str]], predictions: list[list[str]]) -> dict[str, float]:
        return self.scorer(reassemble(references, self.windows), reassemble(predictions, self.windows))

    def flat_ids(self, predicted: Sequence, labels: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gold and predicted ids at the labelled positions, sentence after sentence (windows joined in order), and
        where each sentence starts."""
        flat_labels = (
            np.concatenate([np.asarray(b).reshape(-1) for b in labels]) if len(labels) else np.zeros(0, np.int64)
        )
        take, starts = self._layout(flat_labels, [np.asarray(b).shape for b in labels])
        flat_predicted = (
            np.concatenate([np.asarray(b).reshape(-1) for b in predicted]) if len(predicted) else np.zeros(0, np.int64)
        )
        if flat_predicted.shape != flat_labels.shape:
            raise ValueError(f"predictions cover {flat_predicted.size} positions but the labels {flat_labels.size}")
        return flat_labels[take].astype(np.int64), flat_predicted[take].astype(np.int64), starts

    def _layout(self, flat_labels: np.ndarray, shapes: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
        """Which positions of the batches' flattened labels are scored, in scoring order, and which of them start a
        sentence. Remembered for the last labels seen: a probe scores every head on the same dev batches."""
        remembered = self._remembered_layout
        if remembered is not None and remembered[0] == shapes and np.array_equal(remembered[1], flat_labels):
            return remembered[2]
        rows, offset = [], 0
        for height, width in shapes:  # (batch, seq) per batch
            for start in range(offset, offset + height * width, width):
                rows.append(start + np.flatnonzero(flat_labels[start : start + width] != -100))
            offset += height * width
        order = range(len(rows))
        if self.windows is not None:
            if len(self.windows) != len(rows):
                raise ValueError(f"{len(rows)} rows of predictions but {len(self.windows)} (sentence, window) tags")
            order = sorted(order, key=lambda i: tuple(self.windows[i]))
        starts, sentence_of = [], None
        for index in order:
            sentence = self.windows[index][0] if self.windows is not None else index
            starts.append(np.zeros(len(rows[index]), dtype=bool))
            if len(rows[index]) and sentence != sentence_of:
                starts[-1][0] = True
                sentence_of = sentence
        take = np.concatenate([rows[i] for i in order]).astype(np.int64) if rows else np.zeros(0, np.int64)
        layout = take, np.concatenate(starts) if starts else np.zeros(0, bool)
        self._remembered_layout = (shapes, flat_labels.copy(), layout)
        return layout


def classification_scores(
    predicted: Sequence[int], labels: Sequence[int], names: Sequence[str], unseen: dict[str, int] | None = None
) -> dict[str, float]:
    """Accuracy, macro P/R/F1 (every class weighs the same, absent predictions count as 0) and per-class
    P/R/F1/support, over all examples. `names` are the model's classes; `unseen` counts the rows of each class the
    model has no output for (an evaluation label absent from its training examples), labelled -100: they stay in
    the scores as errors, and each such class enters the macro average with P = R = F1 = 0."""
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    unseen = dict(unseen or {})
    labels = np.asarray(labels)
    if int((labels == -100).sum()) != sum(unseen.values()):
        raise ValueError(
            f"{int((labels == -100).sum())} rows are labelled -100 but the unseen classes count "
            f"{sum(unseen.values())} ({unseen})"
        )
    ids = list(range(len(names)))
    precision, recall, f1, support = precision_recall_fscore_support(labels, predicted, labels=ids, zero_division=0)
    per_class = [
        (name, float(p), float(r), float(f), int(n)) for name, p, r, f, n in zip(names, precision, recall, f1, support)
    ]
    per_class += [(name, 0.0, 0.0, 0.0, count) for name, count in unseen.items()]
    scores = {"accuracy": float(accuracy_score(labels, predicted))}
    for key, column in (("macro_precision", 1), ("macro_recall", 2), ("macro_f1", 3)):
        scores[key] = float(np.mean([row[column] for row in per_class]))
    for name, p, r, f, n in per_class:
        scores |= {f"{name}_precision": p, f"{name}_recall": r, f"{name}_f1": f, f"{name}_support": n}
    return scores


def multi_label_scores(
    predicted: np.ndarray, labels: np.ndarray, names: Sequence[str], unseen: dict[str, int] | None = None
) -> dict[str, float]:
    """Multi-label scores of 0/1 decisions `(texts, classes)` against 0/1 labels: micro P/R/F1 over every (text,
    class) pair, macro P/R/F1 over the classes, the share of texts whose whole set is right (`subset_accuracy`, over
    the model's classes) and per-class P/R/F1/support. `unseen` counts the labelled pairs of each class the model has
    no output for (an evaluation label absent from its training examples): they count as missed (false negatives) in
    the micro scores, and each such class enters the macro average with P = R = F1 = 0."""
    predicted, labels = np.asarray(predicted).astype(bool), np.asarray(labels).astype(bool)
    unseen = dict(unseen or {})
    correct, guessed, gold = ((predicted & labels).sum(0), predicted.sum(0), labels.sum(0))
    precision, recall, f1 = _prf(int(correct.sum()), int(guessed.sum()), int(gold.sum()) + sum(unseen.values()))
    per_class = [(name, *_prf(int(c), int(p), int(g)), int(g)) for name, c, p, g in zip(names, correct, guessed, gold)]
    per_class += [(name, 0.0, 0.0, 0.0, count) for name, count in unseen.items()]
    scores = {"micro_precision": precision, "micro_recall": recall, "micro_f1": f1}
    scores["subset_accuracy"] = float((predicted == labels).all(1).mean()) if len(labels) else 0.0
    for key, column in (("macro_precision", 1), ("macro_recall", 2), ("macro_f1", 3)):
        scores[key] = float(np.mean([row[column] for row in per_class])) if per_class else 0.0
    for name, p, r, f, n in per_class:
        scores |= {f"{name}_precision": p, f"{name}_recall": r, f"{name}_f1": f, f"{name}_support": n}
    return scores


def regression_scores(predicted: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """Spearman's and Pearson's correlations of the predictions with the targets (0 where either is constant), the
    mean squared and absolute errors."""
    from scipy.stats import pearsonr, spearmanr

    predicted, targets = np.asarray(predicted, dtype=float).reshape(-1), np.asarray(targets, dtype=float).reshape(-1)
    varied = len(targets) > 1 and np.ptp(predicted) > 0 and np.ptp(targets) > 0
    return {
        "spearman": float(spearmanr(predicted, targets).statistic) if varied else 0.0,
        "pearson": float(pearsonr(predicted, targets).statistic) if varied else 0.0,
        "mse": float(np.mean((predicted - targets) ** 2)) if len(targets) else 0.0,
        "mae": float(np.mean(np.abs(predicted - targets))) if len(targets) else 0.0,
    }


class ClassificationMetrics:
    """`compute_metrics` for the `Trainer` on a text task, by its `problem_type`: `classification_scores` of the
    arg-max (single-label), `multi_label_scores` of the logits above 0, `regression_scores` of the one output."""

    def __init__(
        self,
        label_names: Sequence[str],
        unseen: dict[str, int] | None = None,
        problem_type: str = "single_label_classification",
    ):
        self.label_names, self.unseen, self.problem_type = list(label_names), unseen, problem_type

    def __call__(self, eval_prediction) -> dict[str, float]:
        logits = eval_prediction.predictions
        logits = logits[0] if isinstance(logits, tuple) else logits
        return self.scores(decided(np.asarray(logits), self.problem_type), np.asarray(eval_prediction.label_ids))

    def scores(self, predicted: np.ndarray, labels: np.ndarray, unseen: dict[str, int] | None = None) -> dict:
        """The scores of decisions (`decided`) against labels, all of one eval set (or, with `unseen`, a sample)."""
        unseen = self.unseen if unseen is None else unseen
        if self.problem_type == "multi_label_classification":
            return multi_label_scores(predicted, labels, self.label_names, unseen)
        if self.problem_type == "regression":
            return regression_scores(predicted, labels)
        return classification_scores(predicted, labels, self.label_names, unseen)

    @staticmethod
    def flat_ids(predicted: Sequence, labels: Sequence) -> tuple[np.ndarray, np.ndarray]:
        """Decisions and labels given batch by batch (lists of `(batch,)` or `(batch, classes)` arrays or tensors),
        joined in order."""
        join = lambda batches: (
            np.concatenate([np.asarray(b) for b in batches]) if len(batches) else np.zeros(0, np.int64)
        )
        predicted, labels = join(predicted), join(labels)
        if predicted.shape != labels.shape:
            raise ValueError(f"predictions cover {predicted.shape} examples but the labels {labels.shape}")
        return predicted, labels

    def score_ids(self, predicted: Sequence, labels: Sequence) -> dict[str, float]:
        """The scores from decisions and labels given batch by batch, as `dwatt.stacked_heads.train_heads` produces them."""
        return self.scores(*self.flat_ids(predicted, labels))

    def score_sample(self, predicted: Sequence, labels: Sequence, size: int, seed: int) -> dict[str, float]:
        """`score_ids` over `size` of the eval set's examples drawn uniformly with `seed` (`sample_sentences`, in
        scoring order): the same examples for every call on one eval set. A sampled row of a class the model has no
        output for (labelled -100) counts as an error, its class named "unseen" in the per-class scores (multi-label:
        such pairs are not in the labels, and the sample counts none)."""

        predicted, labels = self.flat_ids(predicted, labels)
        chosen = sample_sentences(len(labels), min(size, len(labels)), seed)
        unseen = int((labels[chosen] == -100).sum()) if self.problem_type == "single_label_classification" else 0
        return self.scores(predicted[chosen], labels[chosen], {"unseen": unseen} if unseen else {})
