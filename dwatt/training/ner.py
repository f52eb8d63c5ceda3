"""Few-shot NER runs: sample N x C sentences, train (the `Trainer`, or with other runs by `together`), score with
seqeval."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import (
    DataCollatorForTokenClassification,
)

from modeling_dwatt import DWAttForTokenClassification

from ..console import first_sentence
from ..data import (
    entity_types,
    load_tokenizer,
    tokenize_and_align,
)
from ..features.cache import FeatureCollator, model_inputs
from ..layer_weights import has_layer_weights, layer_weights_by_type
from ..metrics import NERMetrics
from ..portable import backbone_folder
from ..run_config import RunConfig
from ..splits import ner_splits
from ..tokenization import model_input_names
from .callbacks import BestDevCallback, FreezeBackboneCallback
from .initial_models import INITIAL_MODELS
from .placement import backbone_placement
from .prepared_together import TrainedTogether
from .run_caches import cache_facts, feature_caches
from .run_results import RunClock, finish_run, run_facts
from .trainer_run import by_length, ensure_writable, refuse_few_shot_dev, scores_only, set_training_mode, train_run


class TaggingCollator(DataCollatorForTokenClassification):
    """transformers' token-classification collator, which also pads each row's `word_ids` (with -1, on the
    tokenizer's padding side) where the rows hold them: what a word readout that pools sub-tokens takes."""

    def torch_call(self, features):
        if "word_ids" not in features[0]:
            return super().torch_call(features)
        word_ids = [list(feature["word_ids"]) for feature in features]
        batch = super().torch_call([{k: v for k, v in feature.items() if k != "word_ids"} for feature in features])
        length = batch["input_ids"].shape[1]
        left = self.tokenizer.padding_side == "left"
        batch["word_ids"] = torch.tensor(
            [[-1] * (length - len(ids)) + ids if left else ids + [-1] * (length - len(ids)) for ids in word_ids]
        )
        return batch


@dataclass
class NERSetup:
    """Everything a few-shot NER run needs before training: data, the sample, the model and its inputs."""

    config: RunConfig
    backbone: str
    data: object
    label_names: list[str]
    train: object
    sampled_ids: list[int]
    dev: object
    tokenizer: object
    dev_tokens: object
    model: DWAttForTokenClassification
    freeze: FreezeBackboneCallback
    cached: bool
    train_set: object
    dev_set: object
    collator: object
    cache_seconds: float

    def metrics(self) -> NERMetrics:
        return NERMetrics(self.label_names, windows=list(zip(self.dev_tokens["sentence"], self.dev_tokens["window"])))


def prepare_ner(config: RunConfig, cache_layers: list[int] | None = None) -> NERSetup:
    """Sample N x C training sentences with `config.seed`, tokenise, build the model from the pretrained backbone
    (initialised with the same seed), and, for FE with the cache, compute the backbone's features once (of
    `cache_layers`, backbone layers 1..L, rather than the layers the model reads: a probe's heads on one layer each
    read one cache of them all)."""
    config.validate()
    ensure_writable(Path(config.output_dir))
    backbone = backbone_folder(config.backbone)
    data, train, sampled_ids, dev = ner_splits(config)
    label_names = data["train"].features["ner_tags"].feature.names
    tokenizer = load_tokenizer(backbone)
    train_tokens = tokenize_and_align(train, tokenizer, readout=config.word_readout)
    dev_tokens = by_length(tokenize_and_align(dev, tokenizer, readout=config.word_readout))

    model = INITIAL_MODELS.build(
        backbone,
        config.fusion,
        config.seed,
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
        **config.model_options(),
        cache_layers=cache_layers,
        shares_backbone=config.mode == "fe",
        backbone_dtype=config.backbone_weights_dtype,
        placement=backbone_placement(config),
    )
    model.fuse_labelled_positions_only = True  # the loss and seqeval read labelled positions only
    freeze = set_training_mode(model, config)
    cached = config.caches_features
    cache_seconds = 0.0
    if cached:
        cache_start = time.perf_counter()
        train_set, dev_set = feature_caches(
            model,
            backbone,
            config,
            (train_tokens, {}),
            (dev_tokens, {"scored_positions_only": model.dwatt.fusion_is_per_token}),
            layers=cache_layers,
        )
        collator = FeatureCollator(dtype=model.dtype)
        cache_seconds = time.perf_counter() - cache_start
    else:
        names = model_input_names(config.word_readout)
        train_set, dev_set = model_inputs(train_tokens, names), model_inputs(dev_tokens, names)
        collator = TaggingCollator(tokenizer)
    return NERSetup(
        config,
        backbone,
        data,
        list(label_names),
        train,
        sampled_ids,
        dev,
        tokenizer,
        dev_tokens,
        model,
        freeze,
        cached,
        train_set,
        dev_set,
        collator,
        cache_seconds,
    )


def ner_results(setup: NERSetup, config: RunConfig, best: dict, curve: list[dict]) -> dict:
    """The results of a finished run whose best weights are loaded in `setup.model`."""
    results = {
        "config": asdict(config) | {"backbone": setup.backbone},
        "task": config.task,
        "labels": setup.label_names,
        "entity_types": entity_types(setup.label_names),
        "seed": config.seed,
        "num_train_sentences": len(setup.train),
        "train_pool_size": len(setup.data["train"]),
        "num_dev_sentences": len(setup.dev),
        "example_input": first_sentence(setup.dev),
        "sampled_sentence_ids": setup.sampled_ids if config.n_shot is not None else None,
        "best_dev_f1": best["f1"],
        "best_epoch": best["epoch"],
        "best_dev_scores": scores_only(best["metrics"], "eval_"),
        "final_dev_f1": curve[-1]["f1"],
        "dev_curve": curve,
        "cached_features": setup.cached,
        "cache_seconds": round(setup.cache_seconds, 3),
        "backbone_layers": setup.model.config.encoder_config.num_hidden_layers,
    } | (cache_facts(setup.train_set, setup.dev_set) if setup.cached else {})
    unseen = tags_only_in_evaluation(setup, config)
    if unseen:
        results["unseen_labels"] = unseen
    if has_layer_weights(setup.model):
        results["dev_layer_weights"] = layer_weights_by_type(
            setup.model, setup.dev_set, setup.collator, setup.label_names
        )
    return results


def tags_only_in_evaluation(setup: NERSetup, config: RunConfig) -> dict[str, dict[str, int]]:
    """The tags the dev split (and test, where the run scores it) holds but the whole training split lacks, with
    their token counts by split: `{tag: {split: tokens}}`. No head can predict them; they stay in the scores."""
    in_training = {tag for tags in setup.data["train"]["ner_tags"] for tag in tags}
    splits = {"validation": setup.dev}
    if config.evaluate_test and "test" in setup.data:
        splits["test"] = setup.data["test"]
    unseen: dict[str, dict[str, int]] = {}
    for split, rows in splits.items():
        for tags in rows["ner_tags"]:
            for tag in tags:
                if tag not in in_training:
                    counts = unseen.setdefault(setup.label_names[tag], {})
                    counts[split] = counts.get(split, 0) + 1
    return unseen


def scored_test_split(setup: NERSetup, cache_layers: list[int] | None = None):
    """The test split tokenised (and cached for FE, of `cache_layers` for probes), with the metrics that score it."""
    tokens = by_length(tokenize_and_align(setup.data["test"], setup.tokenizer, readout=setup.config.word_readout))
    metrics = NERMetrics(setup.label_names, windows=list(zip(tokens["sentence"], tokens["window"])))
    if setup.cached:
        [cache] = feature_caches(setup.model, setup.backbone, setup.config, (tokens, {}), layers=cache_layers)
        return cache, metrics
    return model_inputs(tokens, model_input_names(setup.config.word_readout)), metrics


def run_ner(config: RunConfig) -> dict:
    """
    One few-shot NER run: sample N x C training sentences with `seed`, build the model from the pretrained
    backbone, train with `Trainer` (FE with the feature cache, or FT), score the dev split after every epoch,
    and end with the best dev model. Writes `results.json` (and the checkpoint under `model/`) to `output_dir`.
    """
    refuse_few_shot_dev(config)
    started = RunClock()
    setup = prepare_ner(config)
    model = setup.model
    best = BestDevCallback()
    trainer, train_output, last_checkpoint = train_run(
        config, model, setup.freeze, best, setup.train_set, setup.dev_set, setup.collator, setup.metrics()
    )
    results = ner_results(setup, config, best.best, best.curve) | {"engine": "trainer"}
    results |= run_facts(model, train_output.metrics, last_checkpoint)
    if config.evaluate_test and "test" in setup.data:
        data, trainer.compute_metrics = scored_test_split(setup)
        results["test_scores"] = scores_only(trainer.evaluate(data, metric_key_prefix="test"), "test_")
    return finish_run(config, model, setup.tokenizer, results, started)


def prepare_together(config: RunConfig, cache_layers: list[int] | None = None) -> TrainedTogether:
    """What runs trained together need of NER (`dwatt.training.prepared_together.TrainedTogether`), for `config` and the
    layers the group's heads read (`cache_layers`, for probes)."""

    setup = prepare_ner(config, cache_layers=cache_layers)
    return TrainedTogether(
        setup.model,
        setup.tokenizer,
        setup.train_set,
        setup.dev_set,
        setup.collator,
        len(setup.train),
        setup.metrics(),
        results=lambda run, best, curve: ner_results(setup, run, best, curve),
        test=lambda: scored_test_split(setup, cache_layers) if config.evaluate_test and "test" in setup.data else None,
    )


run = run_ner  # the task's entry point (`dwatt.training.run`)
