"""Few-shot NER runs: sample N x C sentences, train (the `Trainer`, or several epoch budgets together), score with
seqeval."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import (
    DataCollatorForTokenClassification,
)

from configuration_dwatt import single_layer
from fusions_dwatt import FUSION_CLASSES
from modeling_dwatt import RobertaDWAttForTokenClassification

from ..console import example_input
from ..data import (
    entity_types,
    load_conll2003,
    load_tokenizer,
    load_wikiann,
    tokenize_and_align,
)
from ..distributed import launched_processes
from ..features import (
    FeatureCollator,
    model_inputs,
)
from ..layer_weights import has_layer_weights, layer_weights_by_type
from ..metrics import NERMetrics
from ..portable import backbone_folder
from ..sampling import few_shot_split
from .callbacks import BestDevCallback, FreezeBackboneCallback
from .common import (
    INITIAL_MODELS,
    RunClock,
    RunConfig,
    by_length,
    cache_facts,
    dev_subset,
    ensure_writable,
    feature_caches,
    finish_run,
    run_facts,
    scores_only,
    set_training_mode,
    train_run,
)


def load_ner_dataset(name: str, data_dir: str | None):
    if name == "conll2003":
        return load_conll2003(data_dir)
    if name.startswith("wikiann:"):
        return load_wikiann(name.split(":", 1)[1], data_dir)
    raise ValueError(f"--dataset: unknown dataset {name!r}; expected conll2003 or wikiann:<lang>")


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
    model: RobertaDWAttForTokenClassification
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
    data = load_ner_dataset(config.dataset, config.data_dir)
    label_names = data["train"].features["ner_tags"].feature.names
    train = data["train"]
    sampled_ids = list(range(len(train)))
    if config.n_shot is not None:
        train, sampled_ids = few_shot_split(train, config.n_shot, config.seed, config.sampling)
    dev = dev_subset(data["validation"], config)
    tokenizer = load_tokenizer(backbone)
    train_tokens = tokenize_and_align(train, tokenizer)
    dev_tokens = by_length(tokenize_and_align(dev, tokenizer))

    model = INITIAL_MODELS.build(
        backbone,
        config.fusion,
        config.seed,
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
        **config.model_options(),
        cache_layers=cache_layers,
    )
    model.fuse_labelled_positions_only = True  # the loss and seqeval read labelled positions only
    freeze = set_training_mode(model, config)
    cached = config.caches_features
    cache_seconds = 0.0
    if cached:
        cache_start = time.perf_counter()
        train_set, dev_set = feature_caches(
            model, backbone, config, (train_tokens, {}),
            (dev_tokens, {"scored_positions_only": model.dwatt.fusion_is_per_token}), layers=cache_layers,
        )
        collator = FeatureCollator(dtype=model.dtype)
        cache_seconds = time.perf_counter() - cache_start
    else:
        train_set, dev_set = model_inputs(train_tokens), model_inputs(dev_tokens)
        collator = DataCollatorForTokenClassification(tokenizer)
    return NERSetup(
        config, backbone, data, list(label_names), train, sampled_ids, dev, tokenizer, dev_tokens, model, freeze,
        cached, train_set, dev_set, collator, cache_seconds,
    )


def ner_results(setup: NERSetup, config: RunConfig, best: dict, curve: list[dict]) -> dict:
    """The results of a finished run whose best weights are loaded in `setup.model`."""
    results = {
        "config": asdict(config) | {"backbone": setup.backbone},
        "task": "ner",
        "labels": setup.label_names,
        "entity_types": entity_types(setup.label_names),
        "seed": config.seed,
        "num_train_sentences": len(setup.train),
        "train_pool_size": len(setup.data["train"]),
        "num_dev_sentences": len(setup.dev),
        "example_input": example_input("ner", setup.dev),
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
    if has_layer_weights(setup.model):
        results["dev_layer_weights"] = layer_weights_by_type(setup.model, setup.dev_set, setup.collator, setup.label_names)
    return results


def scored_test_split(setup: NERSetup, cache_layers: list[int] | None = None):
    """The test split tokenised (and cached for FE, of `cache_layers` for probes), with the metrics that score it."""
    tokens = by_length(tokenize_and_align(setup.data["test"], setup.tokenizer))
    metrics = NERMetrics(setup.label_names, windows=list(zip(tokens["sentence"], tokens["window"])))
    if setup.cached:
        [cache] = feature_caches(setup.model, setup.backbone, setup.config, (tokens, {}), layers=cache_layers)
        return cache, metrics
    return model_inputs(tokens), metrics


def run_ner(config: RunConfig) -> dict:
    """
    One few-shot NER run: sample N x C training sentences with `seed`, build the model from the pretrained
    backbone, train with `Trainer` (FE with the feature cache, or FT), score the dev split after every epoch,
    and end with the best dev model. Writes `results.json` (and the checkpoint under `model/`) to `output_dir`.
    """
    if config.few_shot_dev:
        raise ValueError("few_shot_dev: the choice on a few-shot dev sample is made by runs trained together "
                         "(dwatt sweep --engine budgets --few-shot-dev), not by the Trainer")
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


# What FE runs trained together may differ in; heads on one layer (`fusion="base"`) may also differ in the layer.
TRAINED_TOGETHER_MAY_DIFFER = ("epochs", "learning_rate", "output_dir")


def run_ner_together(configs: list[RunConfig], vectorize: bool | None = None, linear_probes: bool | None = None) -> list[dict]:
    """
    FE runs that differ only in their epoch budget, learning rate and output folder -- and, for heads on one layer
    (`fusion="base"`, `layers=k`), in the layer they read -- trained together by `dwatt.budgets.train_heads` on one
    feature cache (holding every layer the heads read): each ends as that run alone would with the same loop. Writes
    each run's `results.json` (and checkpoint) like `run_ner`; returns the results in order. `vectorize`: batch the
    copies with `torch.func.vmap`; by default on a GPU for the per-token fusions (Base+n's attention layers are left to
    run one copy after the other, which is always exact), never on a CPU. Heads on one layer train as
    `dwatt.budgets.LinearProbes` unless `linear_probes=False`.
    """
    from ..budgets import HeadCopy, LinearProbes, train_heads

    started = RunClock()
    first = configs[0]
    may_differ = TRAINED_TOGETHER_MAY_DIFFER + (("layers",) if FUSION_CLASSES[first.fusion].passes_layer_through else ())
    shared = {k: v for k, v in asdict(first).items() if k not in may_differ}
    for config in configs[1:]:
        differs = sorted(k for k, v in asdict(config).items() if k in shared and shared[k] != v)
        if differs:
            raise ValueError(f"runs trained together may differ only in {', '.join(may_differ)}, not in {differs}")
    if first.mode != "fe" or not first.use_cache or first.task != "ner":
        raise ValueError("runs train together only for NER in the FE mode with the feature cache")
    if first.resume or first.checkpoint_every_epoch:
        raise ValueError("--resume/--checkpoint-every-epoch are Trainer features; runs trained together restart")
    if launched_processes() > 1:
        raise ValueError("runs trained together run in one process; under torchrun/accelerate train one run at a "
                         "time (dwatt train), or split a sweep across workers with --shard")
    read = probed_layers(configs)
    probes = read is not None and len(set(read)) > 1
    cache_layers = sorted(set(read)) if probes else None
    setup = prepare_ner(first, cache_layers=cache_layers)
    model = setup.model
    copies = [HeadCopy(c.epochs, c.learning_rate, cache_layers.index(layer) if probes else None)
              for c, layer in zip(configs, read or [None] * len(configs))]
    metrics = setup.metrics()
    sample_size = len(setup.train)  # a few-shot user's dev set: as many sentences as the training sample
    sample_score = ((lambda predicted, labels: metrics.score_sample(predicted, labels, sample_size, first.seed))
                    if first.few_shot_dev else None)
    trained = [load_trained(config) for config in configs]
    if all(record is not None for record in trained):  # a group killed after training: its copies are final
        outcomes, timings = [outcome for outcome, _ in trained], trained[0][1]
    else:
        outcomes, timings = train_heads(
            model, setup.train_set, setup.dev_set, setup.collator, copies, metrics.score_ids,
            seed=first.seed, batch_size=first.batch_size,
            vectorize=torch.cuda.is_available() and model.dwatt.fusion_is_per_token if vectorize is None else vectorize,
            linear_probes=linear_probes, sample_score=sample_score,
        )
        for config, outcome in zip(configs, outcomes):
            save_trained(config, outcome, timings)
    facts = {"train_runtime": timings["train_seconds"] + timings["eval_seconds"],
             "train_samples_per_second": len(setup.train_set) * max(c.epochs for c in configs) / max(timings["train_seconds"], 1e-9)}
    test = scored_test_split(setup, cache_layers) if first.evaluate_test and "test" in setup.data else None
    test_predictions = None  # of every head at once, where they are linear probes
    layers = [copy.layer for copy in copies]
    sample_test_predictions = None
    if test is not None and linear_probes is not False and LinearProbes.fits(model, layers, test[0]):
        test_predictions = LinearProbes.predict(model, [outcome.best_state for outcome in outcomes], layers, test[0])
        if first.few_shot_dev:
            sample_test_predictions = LinearProbes.predict(
                model, [outcome.sample_best_state for outcome in outcomes], layers, test[0])
    all_results = []
    own_layers = model.config.fused_layers
    for index, (config, copy, outcome) in enumerate(zip(configs, copies, outcomes)):
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        model.load_state_dict(outcome.best_state, strict=False)
        model.config.fused_layers = config.layers if probes else own_layers  # what the saved head reads
        results = ner_results(setup, config, outcome.best, outcome.curve)
        results |= {"engine": "budgets", "trained_together": [c.epochs for c in configs],
                    "trained_together_runs": len(configs)}
        results |= run_facts(model, facts, None)
        if test_predictions is not None:
            results["test_scores"] = test[1].score_ids(test_predictions[0][index], test_predictions[1])
        elif test is not None:
            results["test_scores"] = evaluate_features(model, test[0], setup.collator, test[1], layer=copy.layer)
        if first.few_shot_dev:
            results["few_shot_dev"] = {"sentences": sample_size, "seed": first.seed,
                                       "best_f1": outcome.sample_best["sample_f1"], "best_epoch": outcome.sample_best["epoch"]}
            if sample_test_predictions is not None:
                results["few_shot_dev"]["test_scores"] = test[1].score_ids(sample_test_predictions[0][index],
                                                                           sample_test_predictions[1])
            elif test is not None:
                model.load_state_dict(outcome.sample_best_state, strict=False)
                results["few_shot_dev"]["test_scores"] = evaluate_features(model, test[0], setup.collator, test[1],
                                                                           layer=copy.layer)
                model.load_state_dict(outcome.best_state, strict=False)  # what the run saves
        all_results.append(finish_run(config, model, setup.tokenizer, results, started))
    for config in configs:  # results.json now holds what the record kept
        for name in TRAINED_RECORD:
            (Path(config.output_dir) / name).unlink(missing_ok=True)
    model.config.fused_layers = own_layers
    return all_results


# A copy's training, kept in its run folder from the moment it is final until its results are written, so that a
# group stopped while scoring test (the slow part on a deep backbone) resumes without training again.
TRAINED_RECORD = ("dwatt_trained.json", "dwatt_trained.safetensors")
SAMPLE_PREFIX = "few_shot_dev::"  # the copy's weights at the epoch its few-shot dev sample chose


def trained_identity(config: RunConfig) -> dict:
    from ..run_config import NOT_DEFINING

    return {key: value for key, value in asdict(config).items() if key not in NOT_DEFINING + ("evaluate_test",)}


def save_trained(config: RunConfig, outcome, timings: dict) -> None:
    from safetensors.torch import save_file

    from ..atomic import write_json_atomically

    if outcome.best_state is None:  # nothing to resume from: the group trains again
        return
    folder = Path(config.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = dict(outcome.best_state) | {SAMPLE_PREFIX + key: value for key, value in (outcome.sample_best_state or {}).items()}
    save_file({key: value.contiguous() for key, value in tensors.items()}, str(folder / TRAINED_RECORD[1]))
    write_json_atomically(folder / TRAINED_RECORD[0], {"identity": trained_identity(config), "epochs": outcome.epochs,
                                                       "best": outcome.best, "curve": outcome.curve, "timings": timings,
                                                       "sample_best": outcome.sample_best})


def load_trained(config: RunConfig):
    """The copy `save_trained` kept for `config` (its outcome and the group's timings), or None where there is none,
    it was trained for other settings, or it does not read."""
    import json

    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from ..budgets import BudgetOutcome

    folder = Path(config.output_dir)
    try:
        record = json.loads((folder / TRAINED_RECORD[0]).read_text())
        if record["identity"] != json.loads(json.dumps(trained_identity(config), default=str)):
            return None
        state = load_file(str(folder / TRAINED_RECORD[1]))
    except (OSError, ValueError, KeyError, TypeError, SafetensorError):
        return None
    sample = {key.removeprefix(SAMPLE_PREFIX): value for key, value in state.items() if key.startswith(SAMPLE_PREFIX)}
    best = {key: value for key, value in state.items() if not key.startswith(SAMPLE_PREFIX)}
    return (BudgetOutcome(record["epochs"], record["curve"], record["best"], best, sample_best=record.get("sample_best"),
                          sample_best_state=sample or None), record["timings"])


def probed_layers(configs: list[RunConfig]) -> list[int] | None:
    """The backbone layer (1..L) each Base head of `configs` reads, or None for other fusions."""
    if not FUSION_CLASSES[configs[0].fusion].passes_layer_through:
        return None
    read = [single_layer(config.layers) for config in configs]
    if None in read:  # the last layer, the default
        from transformers import AutoConfig

        last = AutoConfig.from_pretrained(backbone_folder(configs[0].backbone)).num_hidden_layers
        read = [last if layer is None else layer for layer in read]
    return read


@torch.no_grad()
def evaluate_features(model, dataset, collator, metrics: NERMetrics, batch_size: int = 32, layer: int | None = None) -> dict:
    """Scores of `model` on a tokenised or cached eval set, without a `Trainer`; a head on one layer fed the cached
    `layer` of the stack, for probes."""
    from torch.utils.data import DataLoader

    model.eval()
    device = next(model.parameters()).device
    predicted, labels = [], []
    for batch in DataLoader(dataset, batch_size=batch_size, collate_fn=collator):
        batch = {key: value.to(device) for key, value in batch.items()}
        if layer is not None:
            batch["backbone_hidden_states"] = batch["backbone_hidden_states"][:, layer : layer + 1]
        predicted.append(model(**batch).logits.argmax(-1).cpu())
        labels.append(batch["labels"].cpu())
    return metrics.score_ids(predicted, labels)
