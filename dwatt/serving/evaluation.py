"""`dwatt evaluate`: a trained checkpoint (or its ONNX export) scored on one split of a dataset, as training scored
it. `dwatt evaluate` maps each task to its scorer (`dwatt.cli.evaluate.scorer`); the masked LM's is in
`dwatt.training.mlm`, which owns its masking."""

from __future__ import annotations

import numpy as np

from ..data import load_ner_dataset
from ..data.classification import class_names, load_classification_dataset, to_model_labels, warn_about_unseen_labels
from ..data.targets import REGRESSION, SINGLE_LABEL, decided_by_probabilities
from ..metrics import ClassificationMetrics, tag_scorer
from ..tasks import TASKS
from .prediction import BATCH_SIZE, class_probabilities, predict_tags


def score_tagger(
    model, tokenizer, *, dataset: str | None, data_dir: str | None, split: str, batch_size: int = BATCH_SIZE, **_
) -> dict:
    """The tag set's scores (`tag_scorer`: seqeval's entity scores, or per token for plain tags) of a tagging
    checkpoint on `split` of `dataset` (default: conll2003; a folder of the user's files is called by its name),
    whose labels must be the checkpoint's."""
    dataset = TASKS["ner"].dataset_for(dataset, data_dir)
    data = load_ner_dataset(dataset, data_dir)
    if split not in data:
        raise ValueError(
            f"--split: {dataset}{f' ({data_dir})' if data_dir else ''} has no {split!r} split; "
            f"it has {', '.join(data)}"
        )
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if names != data[split].features["ner_tags"].feature.names:
        raise ValueError(f"the checkpoint's labels {names} differ from the dataset's; cannot score it on {dataset}")
    rows = data[split].filter(lambda row: len(row["tokens"]) > 0)  # as training scores it: empty ones skipped
    gold = [[names[t] for t in tags] for tags in rows["ner_tags"]]
    predicted = predict_tags(model, tokenizer, rows["tokens"], batch_size)
    return {"split": split, **tag_scorer(names)(gold, predicted)}


def score_classifier(
    model,
    tokenizer,
    *,
    dataset: str | None,
    data_dir: str | None,
    split: str,
    batch_size: int = BATCH_SIZE,
    text_column: str | None = None,
    pair_column: str | None = None,
    label_column: str | None = None,
    **_,
) -> dict:
    """The task's scores of a text checkpoint on one split of a dataset (default: ag_news; a folder of the user's
    files is called by its name), read as its `problem_type` says: accuracy, macro and per-class scores
    (single-label), micro/macro-F1 (multi-label: the labels whose probability is above 0.5), Spearman's correlation
    (regression). The dataset's labels must include the checkpoint's; rows of a label the checkpoint lacks are
    warned about and scored as errors. The `*_column`s name the files' columns, as in training (detected when not
    given)."""
    columns = {"text_column": text_column, "pair_column": pair_column, "label_column": label_column}
    problem_type = getattr(model.config, "problem_type", None) or SINGLE_LABEL
    task = next(task for task in TASKS.values() if task.problem_type == problem_type)
    dataset = task.dataset_for(dataset, data_dir)
    data = load_classification_dataset(dataset, data_dir, problem_type, **columns)
    if split not in data:
        raise ValueError(f"--split: {dataset} has no {split!r} split; it has {', '.join(data)}")
    rows = data[split]
    pairs = rows["text_pair"] if "text_pair" in rows.column_names else None
    outputs = class_probabilities(model, tokenizer, rows["text"], pairs, batch_size)
    if problem_type == REGRESSION:
        metrics = ClassificationMetrics(["score"], None, problem_type)
        return {"split": split, "examples": len(rows), **metrics.scores(outputs[:, 0], np.asarray(rows["label"]))}
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    dataset_names = class_names(rows)
    if not set(names) <= set(dataset_names):
        raise ValueError(
            f"the checkpoint's labels {names} differ from the dataset's {dataset_names}; cannot score it on {dataset}"
        )
    model_ids = [dataset_names.index(name) for name in names]
    unseen = warn_about_unseen_labels(model_ids, {split: rows}, "the checkpoint's classes")
    counts = {label: entry["rows"][split] for label, entry in unseen.items()}
    labels = to_model_labels(rows.rename_column("label", "labels").select_columns(["labels"]), model_ids)["labels"]
    predicted = decided_by_probabilities(outputs, problem_type)
    metrics = ClassificationMetrics(names, counts, problem_type)
    return {"split": split, "examples": len(rows), **metrics.scores(predicted, np.asarray(labels))}


__all__ = ["score_classifier", "score_tagger"]
