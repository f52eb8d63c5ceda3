"""Few-shot text classification runs: N examples per class, FE (with the sentence feature cache) or FT, scored by
accuracy and macro-F1 on the evaluation split after every epoch."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from transformers import DataCollatorWithPadding

from modeling_dwatt import DWAttForSequenceClassification
from specs_dwatt import fusion_spec

from ..console import first_text
from ..data import load_tokenizer
from ..data.classification import (
    class_names,
    to_model_labels,
    tokenize_texts,
    warn_about_unseen_labels,
)
from ..features.cache import FeatureCollator, model_inputs
from ..metrics import ClassificationMetrics
from ..portable import backbone_folder
from ..run_config import RunConfig
from ..splits import classification_splits
from ..tasks import TASKS
from .callbacks import BestDevCallback, FreezeBackboneCallback
from .initial_models import INITIAL_MODELS
from .placement import backbone_placement
from .prepared_together import TrainedTogether
from .run_caches import cache_facts, feature_caches
from .run_results import RunClock, finish_run, run_facts
from .trainer_run import by_length, ensure_writable, refuse_few_shot_dev, scores_only, set_training_mode, train_run


def cache_pooling(fusion: str, pooling: str) -> str | None:
    """What the FE cache keeps per sentence (`build_feature_cache`'s `pooled`): only the first (last) position for a
    per-token fusion read at its first (last) token, each layer's mean for a fusion linear in the layers read by its
    mean (the mean over tokens commutes with it), else every token (DWAtt with mean pooling is non-linear per token;
    Base+n attends over all tokens)."""
    spec = fusion_spec(fusion)
    if pooling in ("first", "last") and spec.per_token:
        return pooling
    if pooling == "mean" and spec.linear_in_layers:
        return "mean"
    return None


@dataclass
class ClassificationSetup:
    """Everything a few-shot classification run needs before training. `label_names` are the dataset's classes,
    `model_ids` the dataset ids of the model's (those its training examples hold, in the dataset's order)."""

    config: RunConfig
    backbone: str
    data: object
    label_names: list[str]
    model_ids: list[int] | None  # None: a regression's one output
    train: object
    sampled_ids: list[int]
    dev: object
    tokenizer: object
    model: DWAttForSequenceClassification
    freeze: FreezeBackboneCallback
    cached: str | bool
    train_set: object
    dev_set: object
    collator: object
    cache_seconds: float
    unseen_labels: dict  # evaluation labels absent from the training examples: {label: {split: rows}}

    @property
    def model_labels(self) -> list[str]:
        return [self.label_names[i] for i in self.model_ids] if self.model_ids is not None else ["score"]

    def metrics(self, split: str) -> ClassificationMetrics:
        """What scores `split` (`validation` or `test`): the task's scores over the model's classes, its unseen
        labels counted as errors."""
        return ClassificationMetrics(self.model_labels, self.unseen_in(split), self.model.config.problem_type)

    def unseen_in(self, split: str) -> dict[str, int]:
        """Rows of each class the model has no output for, in `split` (they are labelled -100 there)."""
        return {label: rows[split] for label, rows in self.unseen_labels.items() if split in rows}

    def tokens(self, dataset):
        """A split tokenised, sorted by length, its labels the model's (`to_model_labels`)."""
        return to_model_labels(by_length(tokenize_texts(dataset, self.tokenizer)), self.model_ids)


def model_classes(train_labels: list, problem_type: str) -> list[int] | None:
    """The dataset ids of the model's classes: those its training examples hold (each row's one class, or every class
    a multi-label row carries), in the dataset's order; None for a regression (one output)."""
    if problem_type == "regression":
        return None
    return sorted({i for label in train_labels for i in (label if isinstance(label, list) else [label])})


def prepare_classification(config: RunConfig, cache_layers: list[int] | None = None) -> ClassificationSetup:
    """Sample N examples per class with `config.seed`, tokenise, build the model (initialised with the same seed),
    and in FE with the cache compute the backbone's features once, pooled where that is exact (`cache_pooling`):
    of the layers the model reads, or of `cache_layers` (hidden-state indices 0..k, the model then keeping the
    backbone's layers through k): a probe's heads, one on each layer, read one cache of them all.
    The model's classes are those of its training examples: an evaluation label they lack is warned about once
    (`warn_about_unseen_labels`) and its rows are scored as errors, never as a class the model could guess."""

    config.validate()
    ensure_writable(Path(config.output_dir))
    backbone = backbone_folder(config.backbone)
    data, train, sampled_ids, dev = classification_splits(config)
    problem_type = TASKS[config.task].problem_type
    label_names = class_names(data["train"])
    scored = {"validation": dev} | ({"test": data["test"]} if config.evaluate_test else {})
    sample = (
        "the training split"
        if config.n_shot is None
        else f"the training sample ({config.n_shot} per class, seed {config.seed})"
    )
    unseen = warn_about_unseen_labels(train["label"], scored, sample)
    model_ids = model_classes(train["label"], problem_type)
    model_labels = [label_names[i] for i in model_ids] if model_ids is not None else ["score"]
    if model_ids is not None and len(model_ids) < 2:
        raise ValueError(f"{sample} holds one class ({model_labels[0]!r}); a classifier needs examples of two or more")
    tokenizer = load_tokenizer(backbone)
    train_tokens = to_model_labels(tokenize_texts(train, tokenizer), model_ids)
    dev_tokens = to_model_labels(by_length(tokenize_texts(dev, tokenizer)), model_ids)
    model_kwargs = config.model_options()
    if config.pooling is not None:
        model_kwargs["pooling"] = config.pooling
    model = INITIAL_MODELS.build(
        backbone,
        config.fusion,
        config.seed,
        model_class=DWAttForSequenceClassification,
        id2label=dict(enumerate(model_labels)),
        label2id={name: i for i, name in enumerate(model_labels)},
        problem_type=problem_type,
        **model_kwargs,
        cache_layers=cache_layers,
        shares_backbone=config.mode == "fe",
        backbone_dtype=config.backbone_weights_dtype,
        placement=backbone_placement(config),
    )
    freeze = set_training_mode(model, config)
    cached: str | bool = False
    cache_seconds = 0.0
    if config.caches_features:
        start = time.perf_counter()
        pooled = cache_pooling(config.fusion, model.config.pooling)
        train_set, dev_set = feature_caches(
            model,
            backbone,
            config,
            (train_tokens, {"pooled": pooled}),
            (dev_tokens, {"pooled": pooled}),
            layers=cache_layers,
        )
        collator, cached = FeatureCollator(dtype=model.dtype), pooled or "tokens"
        cache_seconds = time.perf_counter() - start
    else:
        train_set, dev_set = model_inputs(train_tokens), model_inputs(dev_tokens)
        collator = DataCollatorWithPadding(tokenizer)
    return ClassificationSetup(
        config,
        backbone,
        data,
        label_names,
        model_ids,
        train,
        sampled_ids,
        dev,
        tokenizer,
        model,
        freeze,
        cached,
        train_set,
        dev_set,
        collator,
        cache_seconds,
        {label: entry["rows"] for label, entry in unseen.items()},
    )


def classification_results(setup: ClassificationSetup, config: RunConfig, best: dict, curve: list[dict]) -> dict:
    """The results of a finished run whose best weights are loaded in `setup.model`."""
    scores, score = scores_only(best["metrics"], "eval_"), TASKS[config.task].score
    return (
        {
            "config": asdict(config) | {"backbone": setup.backbone},
            "task": config.task,
            "labels": setup.model_labels + list(setup.unseen_in("validation")),  # the classes scored
            "pooling": setup.model.config.pooling,
            "seed": config.seed,
            "num_train_examples": len(setup.train),
            "train_pool_size": len(setup.data["train"]),
            "num_dev_examples": len(setup.dev),
            "backbone_layers": setup.model.config.encoder_config.num_hidden_layers,
            "example_input": first_text(setup.dev, setup.tokenizer.sep_token),
            "sampled_example_ids": setup.sampled_ids if config.n_shot is not None else None,
            f"best_dev_{score}": best[score],
            "best_dev_macro_f1": scores.get("macro_f1"),
            "best_epoch": best["epoch"],
            "best_dev_scores": scores,
            f"final_dev_{score}": curve[-1][score],
            "dev_curve": curve,
            "unseen_labels": setup.unseen_labels,
            "cached_features": setup.cached,
            "cache_seconds": round(setup.cache_seconds, 3),
        }
        | (cache_facts(setup.train_set, setup.dev_set) if setup.cached else {})
        | ({"num_test_examples": len(setup.data["test"])} if config.evaluate_test else {})
    )


def scored_test_split(setup: ClassificationSetup, cache_layers: list[int] | None = None):
    """The test split tokenised (and cached for FE, of `cache_layers` for probes), with the metrics that score it."""
    tokens = setup.tokens(setup.data["test"])
    if setup.cached:
        pooled = cache_pooling(setup.config.fusion, setup.model.config.pooling)
        [test] = feature_caches(
            setup.model, setup.backbone, setup.config, (tokens, {"pooled": pooled}), layers=cache_layers
        )
    else:
        test = model_inputs(tokens)
    return test, setup.metrics("test")


def run_classification(config: RunConfig, cache_layers: list[int] | None = None) -> dict:
    """
    One few-shot text classification run: N examples per class (`config.n_shot`; all with `None`), trained with
    the `Trainer` (FE with the sentence feature cache, or FT), the evaluation split scored after every epoch,
    ending with the best epoch's model (by the task's score: accuracy, micro-F1, Spearman). Writes `results.json` and the checkpoint like NER runs.
    `cache_layers`: see `prepare_classification`.
    """
    refuse_few_shot_dev(config)
    started = RunClock()
    setup = prepare_classification(config, cache_layers)
    model = setup.model
    score = TASKS[config.task].score
    best = BestDevCallback(metric=f"eval_{score}", key=score)
    trainer, train_output, last_checkpoint = train_run(
        config,
        model,
        setup.freeze,
        best,
        setup.train_set,
        setup.dev_set,
        setup.collator,
        setup.metrics("validation"),
    )
    results = classification_results(setup, config, best.best, best.curve) | {"engine": "trainer"}
    results |= run_facts(model, train_output.metrics, last_checkpoint)
    if config.evaluate_test:
        test, trainer.compute_metrics = scored_test_split(setup, cache_layers)
        results["test_scores"] = scores_only(trainer.evaluate(test, metric_key_prefix="test"), "test_")
    return finish_run(config, model, setup.tokenizer, results, started)


def prepare_together(config: RunConfig, cache_layers: list[int] | None = None) -> TrainedTogether:
    """What runs trained together need of text classification (`dwatt.training.prepared_together.TrainedTogether`), for
    `config` and the layers the group's heads read (`cache_layers`, for probes)."""

    setup = prepare_classification(config, cache_layers)
    return TrainedTogether(
        setup.model,
        setup.tokenizer,
        setup.train_set,
        setup.dev_set,
        setup.collator,
        len(setup.train),
        setup.metrics("validation"),
        results=lambda run, best, curve: classification_results(setup, run, best, curve),
        test=lambda: scored_test_split(setup, cache_layers) if config.evaluate_test else None,
    )


run = run_classification  # the task's entry point (`dwatt.training.run`)


__all__ = [
    "cache_pooling",
    "classification_results",
    "prepare_classification",
    "prepare_together",
    "run_classification",
    "scored_test_split",
]
