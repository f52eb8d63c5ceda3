"""
The floor under every head: what a task scores with no backbone at all, on the same few-shot sample, dev split and
test split a run reads (`ner_splits`, `classification_splits`), scored by the run's own metric.

- The majority label: `O` for every token (NER), the sample's most frequent class (text classification; multi-label:
  the labels most of its texts carry; regression: its mean).
- A model with no backbone, its one hyperparameter chosen on dev like a head's learning rate: a linear-chain CRF on
  word features (the word, its lowercase, shape, prefixes and suffixes, its neighbours; sklearn-crfsuite) for NER,
  TF-IDF over word and character n-grams with logistic regression (scikit-learn) for text classification (one per
  label, one-vs-rest, for multi-label; ridge regression for a numeric target).

scikit-learn and sklearn-crfsuite are the `baselines` extra, in the `probe` extra with matplotlib for the figure
(`pip install "dwatt[probe]"`).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..data.targets import MULTI_LABEL, REGRESSION
from ..run_config import RunConfig
from ..tasks import TASKS
from .widening import Widening, widened_choice

EXTRA = 'pip install "dwatt[probe]"'
# The CRF's L2 weight and the logistic regression's inverse one, each chosen on dev (ties: the smaller), the grid
# widened where the choice sits at its edge (`widened_choice`).
CRF_L2 = (0.01, 0.1, 1.0)
LOGISTIC_C = (0.1, 1.0, 10.0, 100.0)
RIDGE_ALPHA = (0.01, 0.1, 1.0, 10.0)  # ridge regression's L2 weight (regression), chosen on dev the same way


@dataclass
class BaselineScores:
    """One baseline's dev score and test score (x 100; test None where the run scores none), with its choice."""

    name: str
    dev: float
    test: float | None = None
    chosen: str = ""


def word_features(words: list[str], position: int) -> dict:
    """A word as a CRF reads it: itself, lowercased, its shape, affixes, and its neighbours' lowercase and case."""
    word = words[position]
    shape = "".join("X" if c.isupper() else "x" if c.islower() else "d" if c.isdigit() else c for c in word)
    features = {
        "bias": 1.0,
        "word": word,
        "lower": word.lower(),
        "shape": shape,
        "short_shape": "".join(c for i, c in enumerate(shape) if i == 0 or c != shape[i - 1]),
        "title": word.istitle(),
        "upper": word.isupper(),
        "digit": word.isdigit(),
        **{f"prefix{n}": word[:n] for n in (1, 2, 3)},
        **{f"suffix{n}": word[-n:] for n in (1, 2, 3)},
    }
    for offset in (-2, -1, 1, 2):
        where = position + offset
        if 0 <= where < len(words):
            features[f"{offset}:lower"] = words[where].lower()
            features[f"{offset}:title"] = words[where].istitle()
        else:
            features[f"{offset}:edge"] = True
    return features


def sentence_features(words: list[str]) -> list[dict]:
    return [word_features(words, position) for position in range(len(words))]


def ner_baselines(config: RunConfig) -> list[BaselineScores]:
    """The majority label and the CRF on `config`'s sample, its L2 weight chosen on dev (`CRF_L2`)."""
    from sklearn_crfsuite import CRF

    from ..metrics import tag_scorer
    from ..splits import ner_splits

    config.validate()
    data, train, _, dev = ner_splits(config)
    names = data["train"].features["ner_tags"].feature.names

    def read(split):
        return [sentence_features(words) for words in split["tokens"]], [
            [names[tag] for tag in tags] for tags in split["ner_tags"]
        ]

    def f1(gold, predicted) -> float:
        return 100 * tag_scorer(names)(gold, predicted)["f1"]

    train_x, train_y = read(train)
    dev_x, dev_y = read(dev)
    test = read(data["test"]) if config.evaluate_test else None

    def fitted(l2: float):
        crf = CRF(algorithm="lbfgs", c1=0.0, c2=l2, max_iterations=100, all_possible_transitions=True)
        crf.fit(train_x, train_y)
        return f1(dev_y, tags_of(crf, dev_x)), crf

    l2, (dev_f1, crf), widening = widened_choice(
        CRF_L2, fitted, Widening(floor=1e-6, ceiling=1e3, unit="L2 weight", option="")
    )
    return [
        BaselineScores(
            "the majority label (O everywhere)",
            f1(dev_y, _all_o(dev_y)),
            None if test is None else f1(test[1], _all_o(test[1])),
        ),
        BaselineScores(
            "no backbone: a CRF on word features",
            dev_f1,
            None if test is None else f1(test[1], tags_of(crf, test[0])),
            f"L2 weight {l2:g}{widening.note()}",
        ),
    ]


def tags_of(crf, sentences: list[list[dict]]) -> list[list[str]]:
    """The CRF's tags as lists of strings: sklearn-crfsuite returns one 2-D array where every sentence has the same
    length, which seqeval cannot read."""
    return [[str(tag) for tag in tags] for tags in crf.predict(sentences)]


def _all_o(tags: list[list[str]]) -> list[list[str]]:
    return [["O"] * len(sentence) for sentence in tags]


def classification_baselines(config: RunConfig) -> list[BaselineScores]:
    """The sample's majority and TF-IDF with a linear model on `config`'s sample, its regularisation chosen on dev,
    scored by the task's score (`Task.score`): single-label, the most frequent class and logistic regression (C from
    `LOGISTIC_C`); multi-label, the labels most of the sample's texts carry and one logistic regression per label
    (one-vs-rest); regression, the sample's mean (a constant, so no correlation) and ridge regression (alpha from
    `RIDGE_ALPHA`)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline, make_union
    from sklearn.preprocessing import MultiLabelBinarizer

    from ..data.classification import class_names
    from ..metrics import ClassificationMetrics
    from ..splits import classification_splits

    config.validate()
    task = TASKS[config.task]
    data, train, _, dev = classification_splits(config)
    names = class_names(data["train"])
    metrics = ClassificationMetrics(names, {}, task.problem_type)

    def texts(split) -> list[str]:
        pairs = split["text_pair"] if "text_pair" in split.column_names else [None] * len(split)
        return [text if pair is None else f"{text} [SEP] {pair}" for text, pair in zip(split["text"], pairs)]

    def targets(split) -> np.ndarray:
        if task.problem_type == MULTI_LABEL:
            return MultiLabelBinarizer(classes=range(len(names))).fit_transform(split["label"])
        return np.asarray(split["label"])

    def score(gold: np.ndarray, predicted) -> float:
        return 100 * metrics.scores(np.asarray(predicted), gold)[task.score]

    train_y, dev_y = targets(train), targets(dev)
    test = (targets(data["test"]), texts(data["test"])) if config.evaluate_test else None

    def fitted(strength: float):
        linear = {
            REGRESSION: lambda: Ridge(alpha=strength),
            MULTI_LABEL: lambda: OneVsRestClassifier(LogisticRegression(C=strength, max_iter=2000)),
        }.get(task.problem_type, lambda: LogisticRegression(C=strength, max_iter=2000))()
        words = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
        characters = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)
        model = make_pipeline(make_union(words, characters), linear)
        with warnings.catch_warnings():  # a label every (or no) sampled text carries: its one-vs-rest is a constant
            warnings.simplefilter("ignore", UserWarning)
            model.fit(texts(train), train_y)
        return score(dev_y, model.predict(texts(dev))), model

    regression = task.problem_type == REGRESSION
    grid, unit = (RIDGE_ALPHA, "alpha") if regression else (LOGISTIC_C, "C")
    strength, (dev_score, model), widening = widened_choice(
        grid, fitted, Widening(floor=1e-4, ceiling=1e4, unit=unit, option="")
    )
    majority, named = _majority(train_y, task.problem_type)
    linear_name = {REGRESSION: "ridge regression", MULTI_LABEL: "one logistic regression per label"}
    return [
        BaselineScores(
            named,
            score(dev_y, [majority] * len(dev_y)),
            None if test is None else score(test[0], [majority] * len(test[0])),
        ),
        BaselineScores(
            f"no backbone: TF-IDF and {linear_name.get(task.problem_type, 'logistic regression')}",
            dev_score,
            None if test is None else score(test[0], model.predict(test[1])),
            f"{unit} {strength:g}{widening.note()}",
        ),
    ]


def _majority(train_y: np.ndarray, problem_type: str | None) -> tuple:
    """What the sample's majority predicts for every text, and its name."""
    if problem_type == REGRESSION:
        return float(train_y.mean()), "the sample's mean (a constant: no correlation)"
    if problem_type == MULTI_LABEL:
        return (train_y.mean(0) > 0.5).astype(int), "the majority labels (those most of the sample's texts carry)"
    counts = Counter(train_y.tolist())
    return min(
        counts, key=lambda label: (-counts[label], label)
    ), "the majority label (the sample's most frequent class)"


# The floor's own mapping of task kinds (`Task.kind`): the baselines each kind is scored against.
BASELINES_OF_KIND = {"tagging": ner_baselines, "classification": classification_baselines}


def baselines(config: RunConfig) -> list[BaselineScores]:
    """The majority label and the no-backbone model of `config.task` on the run's own sample and splits; raises
    `ModuleNotFoundError` naming the extra where scikit-learn or sklearn-crfsuite is missing."""
    try:
        task = TASKS[config.task]
        if task.kind not in BASELINES_OF_KIND:
            raise ValueError(f"the baselines score labels: {config.task!r} has none")
        return BASELINES_OF_KIND[task.kind](config)
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"the no-backbone baselines need {error.name}: {EXTRA}") from error


def mean_scores(per_trial: list[list[BaselineScores]]) -> list[BaselineScores]:
    """Each baseline's scores averaged over trials (test None unless every trial has one); its choice per trial."""
    merged = []
    for row in zip(*per_trial):
        tests = [scores.test for scores in row]
        merged.append(
            BaselineScores(
                row[0].name,
                math.fsum(scores.dev for scores in row) / len(row),
                None if None in tests else math.fsum(tests) / len(tests),
                choices_text([scores.chosen for scores in row if scores.chosen]),
            )
        )
    return merged


def choices_text(choices: list[str]) -> str:
    """A baseline's choice in each trial, as one clause: said once where every trial chose alike, else by trial."""
    if len(set(choices)) <= 1:
        return (choices[0] + (f" in each of {len(choices)} trials" if len(choices) > 1 else "")) if choices else ""
    return "; ".join(f"trial {trial}: {choice}" for trial, choice in enumerate(choices))


def floor_lines(floor: list[BaselineScores], chosen_dev: float, metric: str, missing: str = "") -> list[str]:
    """The baselines' scores as a probe prints them, and by how much a head chosen at `chosen_dev` beats the model
    with no backbone (the last of `floor`) on dev; or why none was scored (`missing`)."""
    if missing:
        return [f"no baseline scored: {missing}"]
    lines = []
    for scores in floor:
        choice = f" ({scores.chosen}; chosen on dev)" if scores.chosen else ""
        test = "" if scores.test is None else f", test {metric} {scores.test:.2f}"
        lines.append(f"{scores.name}{choice}: dev {metric} {scores.dev:.2f}{test}")
    margin = chosen_dev - floor[-1].dev
    verb = "beats" if margin > 0 else "does not beat"
    lines.append(f"the chosen layer {verb} the model with no backbone on dev, by {margin:+.2f} {metric}")
    return lines


__all__ = [
    "BaselineScores",
    "baselines",
    "choices_text",
    "floor_lines",
    "mean_scores",
    "sentence_features",
    "word_features",
]
