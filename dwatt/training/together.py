"""FE runs trained together by the stacked engine (`dwatt.stacked_heads.train_heads`), for every task whose runs may be
(`Task.trains_together`: few-shot NER and text classification).

Runs that differ only in their epoch budget, learning rate and output folder -- and, for heads on one layer
(`fusion="base"`, `layers=k`), in the layer they read -- share the sample, the model's initialisation and one feature
cache; `run_together` trains them as stacked copies of one head and writes each run's results as the run alone would.
What differs between tasks (preparing the data and the model, the scores, the results) comes from the task's module
(`PROCEDURES`), through its `prepare_together`, as a `TrainedTogether`.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

import dwatt.training.cls as cls  # (not `from . import`: that reads the package, which imports this module)
import dwatt.training.mlm as mlm
import dwatt.training.ner as ner
from configuration_dwatt import single_layer
from specs_dwatt import fusion_spec

from ..atomic import write_json_atomically
from ..data.targets import decided
from ..distributed import launched_processes
from ..execution import RunResults
from ..features.memory import WORKING_MARGIN, gib, model_nbytes
from ..fingerprints import run_fingerprints
from ..linear_probes import LinearProbes
from ..portable import backbone_folder
from ..run_config import NOT_DEFINING, RunConfig
from ..schema import ENSEMBLES_FIELD
from ..stacked_heads import BudgetOutcome, HeadCopy, train_heads
from ..tasks import TASKS, Task, task_named
from .prepared_together import TrainedTogether
from .probe_ensembles import ProbeEnsembles, predict_features, probe_ensembles
from .run_caches import FEATURE_MEMO
from .run_results import RunClock, finish_run, run_facts

# What FE runs trained together may differ in; heads on one layer (`fusion="base"`) may also differ in the layer.
TRAINED_TOGETHER_MAY_DIFFER = ("epochs", "learning_rate", "output_dir")
# A copy's training, kept in its run folder from the moment it is final until its results are written, so that a
# group stopped while scoring test (the slow part on a deep backbone) resumes without training again.
TRAINED_RECORD = ("dwatt_trained.json", "dwatt_trained.safetensors")
SAMPLE_PREFIX = "few_shot_dev::"  # the copy's weights at the epoch its few-shot dev sample chose
FINAL_PREFIX = "last_epoch::"  # the copy's weights at the end of its budget
# What a trained weight of a stacked copy takes, in float32: itself, its gradient, AdamW's two moments and its step's
# temporaries, and the copy's three kept states (best, few-shot best, last epoch) until its part ends: up to 32 bytes a
# weight as benchmarks/copy_memory.py measures it (over four runs, DWAtt 22-30 and Concat 23-32; its results hold the
# last), and some headroom. At 16, the first four alone, Qwen2.5-Coder-1.5B's AG News grid trained Concat three copies
# at a time and reached 10 GiB under an 8 GiB budget
TRAINING_BYTES_PER_WEIGHT = 36


def trained_weights(model) -> int:
    """How many weights a copy of `model`'s fusion and head trains: every parameter but its backbone's."""
    return sum(weight.numel() for weight in model.head_parameters().values())


def copies_within_budget(model, count: int, max_memory: int | None) -> int:
    """How many of `count` stacked copies of `model`'s fusion and head train at once within `max_memory` (bytes; all
    of them without a budget): what the model's weights, the caches held in memory (`FEATURE_MEMO`) and the working
    margin leave of it, at `TRAINING_BYTES_PER_WEIGHT` a trained weight; at least one. Five copies of Concat or DWAtt
    on a 28-layer, 1536-wide LLM take 10 GiB to train, beside a backbone of 3 GiB."""
    if max_memory is None or count <= 1:
        return count
    trained = trained_weights(model)
    left = max_memory - model_nbytes(model) - FEATURE_MEMO.memory_bytes() - WORKING_MARGIN
    return max(1, min(count, left // max(TRAINING_BYTES_PER_WEIGHT * trained, 1)))


# The training side's own mapping: the module that trains each task, with its `run(config)` and, where its runs may
# train together (`Task.trains_together`), its `prepare_together`.
PROCEDURES = {"tagging": ner, "masked_lm": mlm, "classification": cls}


def procedures(task: str):
    """The module that trains `task` (see `PROCEDURES`)."""
    return PROCEDURES[task_named(task).kind]


@dataclass
class TogetherPlan:
    """What a group of runs trained together is, before anything trains: its runs (the first one's settings shared),
    its task, the layer each head reads where they are heads on one layer each (`read`; `cache_layers`, the cached
    layers, where they differ) and the copies the engine trains."""

    configs: list[RunConfig]
    task: Task
    read: list[int] | None
    cache_layers: list[int] | None
    copies: list

    @property
    def first(self) -> RunConfig:
        return self.configs[0]

    @property
    def probes(self) -> bool:
        return self.cache_layers is not None


@dataclass
class TogetherScores:
    """What the group's scoring made for the runs' results: each copy's test scores as chosen on dev, on the few-shot
    dev sample and at its last epoch (`None` where not scored), and the probe's ensembles (the first run's)."""

    test: list[dict | None]
    sample_test: list[dict | None]
    last_epoch_test: list[dict | None]
    ensembles: list | None


def plan_together(configs: list[RunConfig]) -> TogetherPlan:
    """The group's plan, after checking that its runs may train together (FE with the feature cache, one process,
    differing only in `TRAINED_TOGETHER_MAY_DIFFER`, and the layer for heads on one layer)."""

    first = configs[0]
    task = task_named(first.task)
    may_differ = TRAINED_TOGETHER_MAY_DIFFER + (("layers",) if fusion_spec(first.fusion).passes_layer_through else ())
    shared = {k: v for k, v in asdict(first).items() if k not in may_differ}
    for config in configs[1:]:
        differs = sorted(k for k, v in asdict(config).items() if k in shared and shared[k] != v)
        if differs:
            raise ValueError(f"runs trained together may differ only in {', '.join(may_differ)}, not in {differs}")
    if first.mode != "fe" or not first.use_cache or not task.trains_together:
        trainable = ", ".join(name for name, t in TASKS.items() if t.trains_together)
        raise ValueError(
            f"runs train together only in the FE mode with the feature cache, for these tasks: {trainable}"
        )
    if first.resume or first.checkpoint_every_epoch:
        raise ValueError("--resume/--checkpoint-every-epoch are Trainer features; runs trained together restart")
    if launched_processes() > 1:
        raise ValueError(
            "runs trained together run in one process; under torchrun/accelerate train one run at a "
            "time (dwatt train), or split a sweep across workers with --shard"
        )
    read = probed_layers(configs)
    cache_layers = sorted(set(read)) if read is not None and len(set(read)) > 1 else None
    copies = [
        HeadCopy(c.epochs, c.learning_rate, cache_layers.index(layer) if cache_layers else None)
        for c, layer in zip(configs, read or [None] * len(configs))
    ]
    return TogetherPlan(configs, task, read, cache_layers, copies)


def train_together(
    plan: TogetherPlan,
    parts: TrainedTogether,
    vectorize: bool | None,
    linear_probes: bool | None,
    train_in_parts: int | None,
) -> tuple[list, dict]:
    """Each copy's training (`BudgetOutcome`), and the group's training facts for the results. Copies a stopped group
    kept are final; the others train, `train_in_parts` at a time, each kept as it ends (`save_trained`)."""

    if train_in_parts is not None and train_in_parts < 1:
        raise ValueError(f"train_in_parts: expected a positive number of copies, got {train_in_parts}")
    first, model = plan.first, parts.model
    sample_size = (
        parts.train_size
    )  # a few-shot user's dev set: as large as the training sample (or the whole dev split)
    sample_score = (
        (lambda predicted, labels: parts.dev_metrics.score_sample(predicted, labels, sample_size, first.seed))
        if first.few_shot_dev
        else None
    )
    trained = [load_trained(config) for config in plan.configs]
    outcomes = [record[0] if record is not None else None for record in trained]
    part_timings = list(
        {json.dumps(record[1], sort_keys=True): record[1] for record in trained if record is not None}.values()
    )
    untrained = [k for k, outcome in enumerate(outcomes) if outcome is None]
    size = train_in_parts or copies_within_budget(model, len(untrained) or 1, first.max_memory)
    if size < len(untrained) and not train_in_parts and first.progress:
        print(
            f"training {size} of the {len(untrained)} copies at a time: --max-memory {gib(first.max_memory)} leaves "
            "room for no more",
            file=sys.stderr,
        )
    for start in range(0, len(untrained), size):
        part = untrained[start : start + size]
        part_outcomes, timings = train_heads(
            model,
            parts.train_set,
            parts.dev_set,
            parts.collator,
            [plan.copies[k] for k in part],
            parts.dev_metrics.score_ids,
            seed=first.seed,
            batch_size=first.batch_size,
            metric=plan.task.score,
            vectorize=model.dwatt.fusion_is_per_token if vectorize is None else vectorize,
            linear_probes=linear_probes,
            sample_score=sample_score,
        )
        part_timings.append(timings)
        for k, outcome in zip(part, part_outcomes):
            save_trained(plan.configs[k], outcome, timings)
            # Read back from its folder, memory-mapped: a group's states (three a copy) do not pile up in memory over
            # its parts (140 heads of a probe on a 1536-wide LLM's text classification held 3.9 GiB of them)
            kept = load_trained(plan.configs[k]) if outcome.best_state is not None else None
            outcomes[k] = outcome if kept is None else kept[0]
    timings = {key: sum(spent[key] for spent in part_timings) for key in part_timings[0]}
    facts = {
        "train_runtime": timings["train_seconds"] + timings["eval_seconds"],
        "train_samples_per_second": len(parts.train_set)
        * max(c.epochs for c in plan.configs)
        / max(timings["train_seconds"], 1e-9),
    }
    return outcomes, facts


def score_together(
    plan: TogetherPlan,
    parts: TrainedTogether,
    outcomes: list,
    linear_probes: bool | None,
    build_ensembles: bool = True,
) -> TogetherScores:
    """The copies' test scores (of every head on one layer at once where they fit `LinearProbes`) and, unless
    `build_ensembles` is off, the probe's ensembles; nothing where the runs do not score test."""

    first, model, count = plan.first, parts.model, len(plan.configs)
    test = parts.test()
    if test is None:
        return TogetherScores([None] * count, [None] * count, [None] * count, None)
    layers = [copy.layer for copy in plan.copies]
    # with few_shot_dev, also the weights a user with no dev set keeps: the last epoch's (where the group kept them)
    no_dev = first.few_shot_dev and all(outcome.final_state is not None for outcome in outcomes)
    together = linear_probes is not False and LinearProbes.fits(model, layers, test[0])

    # A copy's weights at an epoch are scored once, however many choices (the dev set's, the sample's, the last
    # epoch) fell on that epoch: on Qwen2.5-Coder-1.5B each pass of a Concat copy over CoNLL-03's test set took minutes
    scored_at: dict[tuple, dict] = {}  # (copy, epoch) -> its test scores
    probes_scored_at: dict[tuple, list[dict]] = {}  # every copy's epoch -> the linear probes' scores, from one pass

    def scores(states: list[dict], epochs: list[float]) -> list[dict]:
        if together:
            if tuple(epochs) not in probes_scored_at:
                predictions, labels = LinearProbes.predict(model, states, layers, test[0])
                probes_scored_at[tuple(epochs)] = [test[1].score_ids(predictions[k], labels) for k in range(count)]
            return copy.deepcopy(probes_scored_at[tuple(epochs)])
        for k, (state, epoch) in enumerate(zip(states, epochs)):
            if (k, epoch) not in scored_at:
                model.load_state_dict(state, strict=False)
                scored_at[k, epoch] = evaluate_features(
                    model, test[0], parts.collator, test[1], layer=plan.copies[k].layer
                )
        return [copy.deepcopy(scored_at[k, epoch]) for k, epoch in enumerate(epochs)]

    ensembles = None  # the group's probe ensembles, held by its first run's results
    if plan.probes and build_ensembles:
        sample = (
            {"size": parts.train_size, "seed": first.seed, "items": plan.task.items} if first.few_shot_dev else None
        )
        state_of = lambda k, chosen_on: outcomes[k].best_state if chosen_on == "dev" else outcomes[k].sample_best_state
        ensembles = probe_ensembles(
            ProbeEnsembles(model, parts.collator, plan.read, layers, state_of),
            [c.learning_rate for c in plan.configs],
            outcomes,
            parts.dev_set,
            parts.dev_metrics,
            test,
            plan.task.score,
            sample,
        )
    return TogetherScores(
        test=scores([o.best_state for o in outcomes], [float(o.best["epoch"]) for o in outcomes]),
        sample_test=(
            scores([o.sample_best_state for o in outcomes], [float(o.sample_best["epoch"]) for o in outcomes])
            if first.few_shot_dev
            else [None] * count
        ),
        last_epoch_test=(
            scores([o.final_state for o in outcomes], [float(o.epochs) for o in outcomes])
            if no_dev
            else [None] * count
        ),
        ensembles=ensembles,
    )


def as_run_saves_it(model, plan: TogetherPlan, config: RunConfig):
    """The group's model as one run saves it: the same modules, with a copy of the config that names the layer the
    run's head reads (the group's model reads every cached layer; its own config is left as it is)."""
    if not plan.probes:
        return model
    view = copy.copy(model)  # shares the modules and their weights; a config of its own
    view.config = copy.deepcopy(model.config)
    view.config.fused_layers = config.layers
    return view


def write_together(
    plan: TogetherPlan, parts: TrainedTogether, outcomes: list, facts: dict, scores: TogetherScores, started: RunClock
) -> list[dict]:
    """Each run's `results.json` and checkpoint, as the run alone would write them; the copies' kept training goes
    once every run is written."""
    first, model, task = plan.first, parts.model, plan.task
    all_results = []
    for index, (config, outcome) in enumerate(zip(plan.configs, outcomes)):
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        model.load_state_dict(outcome.best_state, strict=False)  # what the run reports and saves
        results = parts.results(config, outcome.best, outcome.curve)
        results |= {
            "engine": "stacked",
            "trained_together": [c.epochs for c in plan.configs],
            "trained_together_runs": len(plan.configs),
        }
        results |= run_facts(model, facts, None)
        if scores.test[index] is not None:
            results["test_scores"] = scores.test[index]
        if first.few_shot_dev:
            results["few_shot_dev"] = {
                task.items: parts.train_size,
                "seed": first.seed,
                f"best_{task.score}": outcome.sample_best[f"sample_{task.score}"],
                "best_epoch": outcome.sample_best["epoch"],
            }
            if scores.sample_test[index] is not None:
                results["few_shot_dev"]["test_scores"] = scores.sample_test[index]
        if scores.ensembles and index == 0:
            results[ENSEMBLES_FIELD] = scores.ensembles
        if scores.last_epoch_test[index] is not None:
            results["last_epoch"] = {"epoch": outcome.epochs, "test_scores": scores.last_epoch_test[index]}
        all_results.append(finish_run(config, as_run_saves_it(model, plan, config), parts.tokenizer, results, started))
    for config in plan.configs:  # results.json now holds what the record kept
        for name in TRAINED_RECORD:
            (Path(config.output_dir) / name).unlink(missing_ok=True)
    return all_results


def run_together(
    configs: list[RunConfig],
    vectorize: bool | None = None,
    linear_probes: bool | None = None,
    train_in_parts: int | None = None,
    build_ensembles: bool = True,
) -> list[RunResults]:
    """
    FE runs that differ only in their epoch budget, learning rate and output folder -- and, for heads on one layer,
    in the layer they read -- trained together by `dwatt.stacked_heads.train_heads` on one feature cache (holding every
    layer the heads read): each ends as that run alone would with the same loop. Plan (`plan_together`), train
    (`train_together`), score (`score_together`), write (`write_together`): each run's `results.json` (and checkpoint)
    like a run of the `Trainer`; returns the results in order. `vectorize`: batch the copies with `torch.func.vmap`;
    by default for the per-token fusions (Base+n's attention layers are left to run one copy after the other, which is
    always exact), on a CPU too: faster there for every such head measured (benchmarks/engine_throughput.py), each
    copy ending as it would alone up to float rounding. Token-classification heads on one layer train as
    `dwatt.linear_probes.LinearProbes` unless `linear_probes=False`. Each copy's training is kept in its folder as it
    ends (`save_trained`), and a group run again trains only the copies not kept there; `train_in_parts`: train at
    most that many copies at a time (a copy ends as it does alone), so that a group stopped in its training (a
    150-head probe takes hours on a CPU) loses one part; by default all at once, or as many as `max_memory` leaves
    room for (`copies_within_budget`). Everything after training (test scores, the probe's ensembles, the results) is
    the whole group's. `build_ensembles=False`: heads on one layer each build no ensembles (a group that is part of a
    probe's grid, such as a widening's added rates, would rank its own heads alone).
    """
    started = RunClock()
    plan = plan_together(configs)
    parts = procedures(plan.first.task).prepare_together(plan.first, plan.cache_layers)
    outcomes, facts = train_together(plan, parts, vectorize, linear_probes, train_in_parts)
    scores = score_together(plan, parts, outcomes, linear_probes, build_ensembles)
    return write_together(plan, parts, outcomes, facts, scores, started)


def trained_identity(config: RunConfig) -> dict:
    """What a kept copy was trained for: its settings and what it read by content (the backbone's weights and the data
    folder's files, `run_fingerprints`), so that a copy kept before either changed in place is trained again."""
    settings = {key: value for key, value in asdict(config).items() if key not in NOT_DEFINING + ("evaluate_test",)}
    return settings | run_fingerprints(config.backbone, config.data_dir)


def save_trained(config: RunConfig, outcome, timings: dict) -> None:

    if outcome.best_state is None:  # nothing to resume from: the group trains again
        return
    folder = Path(config.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = (
        dict(outcome.best_state)
        | {SAMPLE_PREFIX + key: value for key, value in (outcome.sample_best_state or {}).items()}
        | {FINAL_PREFIX + key: value for key, value in (outcome.final_state or {}).items()}
    )
    save_file({key: value.contiguous() for key, value in tensors.items()}, str(folder / TRAINED_RECORD[1]))
    write_json_atomically(
        folder / TRAINED_RECORD[0],
        {
            "identity": trained_identity(config),
            "epochs": outcome.epochs,
            "best": outcome.best,
            "curve": outcome.curve,
            "timings": timings,
            "sample_best": outcome.sample_best,
        },
    )


def load_trained(config: RunConfig):
    """The copy `save_trained` kept for `config` (its outcome and the group's timings), or None where there is none,
    it was trained for other settings, or it does not read."""

    folder = Path(config.output_dir)
    try:
        record = json.loads((folder / TRAINED_RECORD[0]).read_text())
        if record["identity"] != json.loads(json.dumps(trained_identity(config), default=str)):
            return None
        state = load_file(str(folder / TRAINED_RECORD[1]))
    except (OSError, ValueError, KeyError, TypeError, SafetensorError):
        return None
    prefixed = lambda prefix: {
        key.removeprefix(prefix): value for key, value in state.items() if key.startswith(prefix)
    }
    best = {key: value for key, value in state.items() if not key.startswith((SAMPLE_PREFIX, FINAL_PREFIX))}
    return (
        BudgetOutcome(
            record["epochs"],
            record["curve"],
            record["best"],
            best,
            sample_best=record.get("sample_best"),
            sample_best_state=prefixed(SAMPLE_PREFIX) or None,
            final_state=prefixed(FINAL_PREFIX) or None,
        ),
        record["timings"],
    )


def probed_layers(configs: list[RunConfig]) -> list[int] | None:
    """The backbone layer (1..L) each Base head of `configs` reads, or None for other fusions."""
    if not fusion_spec(configs[0].fusion).passes_layer_through:
        return None
    read = [single_layer(config.layers) for config in configs]
    if None in read:  # the last layer, the default
        last = AutoConfig.from_pretrained(backbone_folder(configs[0].backbone)).num_hidden_layers
        read = [last if layer is None else layer for layer in read]
    return read


def evaluate_features(model, dataset, collator, metrics, batch_size: int = 32, layer: int | None = None) -> dict:
    """Scores (`metrics.score_ids`) of `model` on a tokenised or cached eval set, without a `Trainer`; a head on one
    layer fed the cached `layer` of the stack, for probes."""
    logits, labels = predict_features(model, dataset, collator, batch_size, layer)
    problem_type = getattr(model.config, "problem_type", None)
    return metrics.score_ids([decided(batch, problem_type) for batch in logits], labels)


__all__ = [
    "PROCEDURES",
    "TogetherPlan",
    "TogetherScores",
    "TrainedTogether",
    "evaluate_features",
    "plan_together",
    "procedures",
    "run_together",
    "score_together",
    "train_together",
    "write_together",
]
