"""FE runs trained together by the budgets engine (`dwatt.stacked_heads.train_heads`), for every task whose runs may be
(`Task.trains_together`: few-shot NER and text classification).

Runs that differ only in their epoch budget, learning rate and output folder -- and, for heads on one layer
(`fusion="base"`, `layers=k`), in the layer they read -- share the sample, the model's initialisation and one feature
cache; `run_together` trains them as stacked copies of one head and writes each run's results as the run alone would.
What differs between tasks (preparing the data and the model, the scores, the results) comes from the task's module
(`Task.procedures`), through its `prepare_together`, as a `TrainedTogether`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from configuration_dwatt import single_layer
from fusions_dwatt import FUSION_CLASSES

from ..distributed import launched_processes
from ..fingerprints import run_fingerprints
from ..portable import backbone_folder
from ..run_config import NOT_DEFINING, RunConfig
from ..tasks import TASKS, task_named
from .common import RunClock, finish_run, run_facts
from .probe_ensembles import ENSEMBLES_FIELD, ProbeEnsembles, predict_features, probe_ensembles

# What FE runs trained together may differ in; heads on one layer (`fusion="base"`) may also differ in the layer.
TRAINED_TOGETHER_MAY_DIFFER = ("epochs", "learning_rate", "output_dir")
# A copy's training, kept in its run folder from the moment it is final until its results are written, so that a
# group stopped while scoring test (the slow part on a deep backbone) resumes without training again.
TRAINED_RECORD = ("dwatt_trained.json", "dwatt_trained.safetensors")
SAMPLE_PREFIX = "few_shot_dev::"  # the copy's weights at the epoch its few-shot dev sample chose
FINAL_PREFIX = "last_epoch::"  # the copy's weights at the end of its budget


@dataclass
class TrainedTogether:
    """What runs trained together need of their task, prepared for the group's first run: the model in FE form (of
    the cached `cache_layers` where heads read one layer each), the cached training and dev sets with their collator,
    the training sample's size (a few-shot dev sample is as large), the dev scores (`score_ids(predicted, labels)` and
    `score_sample(predicted, labels, size, seed)`), a run's results from its best point and curve (its best weights
    loaded in the model), and the test split with its scores, where the run scores test."""

    model: torch.nn.Module
    tokenizer: object
    train_set: object
    dev_set: object
    collator: Callable
    train_size: int
    dev_metrics: object
    results: Callable[[RunConfig, dict, list[dict]], dict]
    test: Callable[[], tuple[object, object] | None]


def procedures(task: str):
    """The module of `task`'s procedures (`Task.procedures`): its `run`, and its `prepare_together` where its runs
    may train together."""
    return task_named(task).procedure("procedures")


def run_together(configs: list[RunConfig], vectorize: bool | None = None, linear_probes: bool | None = None,
                 train_in_parts: int | None = None) -> list[dict]:
    """
    FE runs that differ only in their epoch budget, learning rate and output folder -- and, for heads on one layer,
    in the layer they read -- trained together by `dwatt.stacked_heads.train_heads` on one feature cache (holding every
    layer the heads read): each ends as that run alone would with the same loop. Writes each run's `results.json`
    (and checkpoint) like a run of the `Trainer`; returns the results in order. `vectorize`: batch the copies with
    `torch.func.vmap`; by default for the per-token fusions (Base+n's attention layers are left to run one copy
    after the other, which is always exact), on a CPU too: faster there for every such head measured
    (benchmarks/engine_throughput.py), each copy ending as it would alone up to float rounding.
    Token-classification heads on one layer train as `dwatt.stacked_heads.LinearProbes` unless `linear_probes=False`. Each copy's training is kept in its folder as it
    ends (`save_trained`), and a group run again trains only the copies not kept there; `train_in_parts`: train at
    most that many copies at a time (a copy ends as it does alone), so that a group stopped in its training (a
    150-head probe takes hours on a CPU) loses one part. Everything after training (test scores, the probe's
    ensembles, the results) is the whole group's.
    """
    from ..stacked_heads import HeadCopy, LinearProbes, train_heads

    started = RunClock()
    first = configs[0]
    task = task_named(first.task)
    may_differ = TRAINED_TOGETHER_MAY_DIFFER + (("layers",) if FUSION_CLASSES[first.fusion].passes_layer_through else ())
    shared = {k: v for k, v in asdict(first).items() if k not in may_differ}
    for config in configs[1:]:
        differs = sorted(k for k, v in asdict(config).items() if k in shared and shared[k] != v)
        if differs:
            raise ValueError(f"runs trained together may differ only in {', '.join(may_differ)}, not in {differs}")
    if first.mode != "fe" or not first.use_cache or not task.trains_together:
        trainable = ", ".join(name for name, t in TASKS.items() if t.trains_together)
        raise ValueError(f"runs train together only in the FE mode with the feature cache, for these tasks: {trainable}")
    if first.resume or first.checkpoint_every_epoch:
        raise ValueError("--resume/--checkpoint-every-epoch are Trainer features; runs trained together restart")
    if launched_processes() > 1:
        raise ValueError("runs trained together run in one process; under torchrun/accelerate train one run at a "
                         "time (dwatt train), or split a sweep across workers with --shard")
    read = probed_layers(configs)
    probes = read is not None and len(set(read)) > 1
    cache_layers = sorted(set(read)) if probes else None
    parts = procedures(first.task).prepare_together(first, cache_layers)
    model = parts.model
    copies = [HeadCopy(c.epochs, c.learning_rate, cache_layers.index(layer) if probes else None)
              for c, layer in zip(configs, read or [None] * len(configs))]
    sample_size = parts.train_size  # a few-shot user's dev set: as large as the training sample (or the whole dev split)
    sample_score = ((lambda predicted, labels: parts.dev_metrics.score_sample(predicted, labels, sample_size, first.seed))
                    if first.few_shot_dev else None)
    # copies a stopped group had trained are final; the others train, `train_in_parts` at a time
    trained = [load_trained(config) for config in configs]
    outcomes = [record[0] if record is not None else None for record in trained]
    part_timings = list({json.dumps(record[1], sort_keys=True): record[1] for record in trained if record is not None}.values())
    untrained = [k for k, outcome in enumerate(outcomes) if outcome is None]
    if train_in_parts is not None and train_in_parts < 1:
        raise ValueError(f"train_in_parts: expected a positive number of copies, got {train_in_parts}")
    size = train_in_parts or len(untrained) or 1
    for start in range(0, len(untrained), size):
        part = untrained[start:start + size]
        part_outcomes, timings = train_heads(
            model, parts.train_set, parts.dev_set, parts.collator, [copies[k] for k in part], parts.dev_metrics.score_ids,
            seed=first.seed, batch_size=first.batch_size, metric=task.score,
            vectorize=model.dwatt.fusion_is_per_token if vectorize is None else vectorize,
            linear_probes=linear_probes, sample_score=sample_score,
        )
        part_timings.append(timings)
        for k, outcome in zip(part, part_outcomes):
            outcomes[k] = outcome
            save_trained(configs[k], outcome, timings)
    timings = {key: sum(spent[key] for spent in part_timings) for key in part_timings[0]}
    facts = {"train_runtime": timings["train_seconds"] + timings["eval_seconds"],
             "train_samples_per_second": len(parts.train_set) * max(c.epochs for c in configs) / max(timings["train_seconds"], 1e-9)}
    test = parts.test()
    layers = [copy.layer for copy in copies]
    # with few_shot_dev, also the weights a user with no dev set keeps: the last epoch's (where the group kept them)
    no_dev = first.few_shot_dev and test is not None and all(outcome.final_state is not None for outcome in outcomes)
    test_predictions = sample_test_predictions = final_test_predictions = None  # of every head at once, for probes
    if test is not None and linear_probes is not False and LinearProbes.fits(model, layers, test[0]):
        predict = lambda states: LinearProbes.predict(model, states, layers, test[0])
        test_predictions = predict([outcome.best_state for outcome in outcomes])
        if first.few_shot_dev:
            sample_test_predictions = predict([outcome.sample_best_state for outcome in outcomes])
        if no_dev:
            final_test_predictions = predict([outcome.final_state for outcome in outcomes])

    ensembles = None  # the group's probe ensembles, held by its first run's results
    if probes and test is not None:
        sample = {"size": sample_size, "seed": first.seed, "items": task.items} if first.few_shot_dev else None
        state_of = lambda k, chosen_on: outcomes[k].best_state if chosen_on == "dev" else outcomes[k].sample_best_state
        ensembles = probe_ensembles(ProbeEnsembles(model, parts.collator, read, layers, state_of),
                                    [c.learning_rate for c in configs], outcomes, parts.dev_set, parts.dev_metrics,
                                    test, task.score, sample)

    def test_scores(index: int, state: dict, predictions) -> dict:
        if predictions is not None:
            return test[1].score_ids(predictions[0][index], predictions[1])
        model.load_state_dict(state, strict=False)
        return evaluate_features(model, test[0], parts.collator, test[1], layer=copies[index].layer)

    all_results = []
    own_layers = model.config.fused_layers
    for index, (config, outcome) in enumerate(zip(configs, outcomes)):
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        model.load_state_dict(outcome.best_state, strict=False)
        model.config.fused_layers = config.layers if probes else own_layers  # what the saved head reads
        results = parts.results(config, outcome.best, outcome.curve)
        results |= {"engine": "budgets", "trained_together": [c.epochs for c in configs],
                    "trained_together_runs": len(configs)}
        results |= run_facts(model, facts, None)
        if test is not None:
            results["test_scores"] = test_scores(index, outcome.best_state, test_predictions)
        if first.few_shot_dev:
            results["few_shot_dev"] = {task.items: sample_size, "seed": first.seed,
                                       f"best_{task.score}": outcome.sample_best[f"sample_{task.score}"],
                                       "best_epoch": outcome.sample_best["epoch"]}
            if test is not None:
                results["few_shot_dev"]["test_scores"] = test_scores(index, outcome.sample_best_state,
                                                                     sample_test_predictions)
        if ensembles and index == 0:
            results[ENSEMBLES_FIELD] = ensembles
        if no_dev:
            results["last_epoch"] = {"epoch": outcome.epochs,
                                     "test_scores": test_scores(index, outcome.final_state, final_test_predictions)}
        model.load_state_dict(outcome.best_state, strict=False)  # what the run saves
        all_results.append(finish_run(config, model, parts.tokenizer, results, started))
    for config in configs:  # results.json now holds what the record kept
        for name in TRAINED_RECORD:
            (Path(config.output_dir) / name).unlink(missing_ok=True)
    model.config.fused_layers = own_layers
    return all_results


def trained_identity(config: RunConfig) -> dict:
    """What a kept copy was trained for: its settings and what it read by content (the backbone's weights and the data
    folder's files, `run_fingerprints`), so that a copy kept before either changed in place is trained again."""
    settings = {key: value for key, value in asdict(config).items() if key not in NOT_DEFINING + ("evaluate_test",)}
    return settings | run_fingerprints(config.backbone, config.data_dir)


def save_trained(config: RunConfig, outcome, timings: dict) -> None:
    from safetensors.torch import save_file

    from ..atomic import write_json_atomically

    if outcome.best_state is None:  # nothing to resume from: the group trains again
        return
    folder = Path(config.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = (dict(outcome.best_state)
               | {SAMPLE_PREFIX + key: value for key, value in (outcome.sample_best_state or {}).items()}
               | {FINAL_PREFIX + key: value for key, value in (outcome.final_state or {}).items()})
    save_file({key: value.contiguous() for key, value in tensors.items()}, str(folder / TRAINED_RECORD[1]))
    write_json_atomically(folder / TRAINED_RECORD[0], {"identity": trained_identity(config), "epochs": outcome.epochs,
                                                       "best": outcome.best, "curve": outcome.curve, "timings": timings,
                                                       "sample_best": outcome.sample_best})


def load_trained(config: RunConfig):
    """The copy `save_trained` kept for `config` (its outcome and the group's timings), or None where there is none,
    it was trained for other settings, or it does not read."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from ..stacked_heads import BudgetOutcome

    folder = Path(config.output_dir)
    try:
        record = json.loads((folder / TRAINED_RECORD[0]).read_text())
        if record["identity"] != json.loads(json.dumps(trained_identity(config), default=str)):
            return None
        state = load_file(str(folder / TRAINED_RECORD[1]))
    except (OSError, ValueError, KeyError, TypeError, SafetensorError):
        return None
    prefixed = lambda prefix: {key.removeprefix(prefix): value for key, value in state.items() if key.startswith(prefix)}
    best = {key: value for key, value in state.items() if not key.startswith((SAMPLE_PREFIX, FINAL_PREFIX))}
    return (BudgetOutcome(record["epochs"], record["curve"], record["best"], best, sample_best=record.get("sample_best"),
                          sample_best_state=prefixed(SAMPLE_PREFIX) or None, final_state=prefixed(FINAL_PREFIX) or None),
            record["timings"])


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


def evaluate_features(model, dataset, collator, metrics, batch_size: int = 32, layer: int | None = None) -> dict:
    """Scores (`metrics.score_ids`) of `model` on a tokenised or cached eval set, without a `Trainer`; a head on one
    layer fed the cached `layer` of the stack, for probes."""
    logits, labels = predict_features(model, dataset, collator, batch_size, layer)
    return metrics.score_ids([batch.argmax(-1) for batch in logits], labels)


__all__ = ["TrainedTogether", "evaluate_features", "procedures", "run_together"]
