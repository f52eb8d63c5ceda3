"""What every task's run shares: its configuration, the `Trainer`'s arguments, resuming, the initial models
remembered across the runs of a sweep, the feature cache memo, and writing the results."""

from __future__ import annotations

import copy
import math
import os
import platform
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import (
    PrinterCallback,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from modeling_dwatt import DWAttForTokenClassification
from specs_dwatt import layers_to_run

from ..atomic import give_usual_modes, replace_folder, scratch_folder, write_json_atomically
from ..distributed import (
    cpu_only,
    device,
    is_main_process,
    launched_processes,
    per_device_batch_size,
)
from ..features.memory import WORKING_MARGIN
from ..fingerprints import backbone_fingerprint
from ..lora import ADAPTER_FOLDER, add_lora, save_adapter
from ..model_cards import base_model_name
from ..portable import portable_results
from ..run_config import RunConfig
from ..tokenization import save_tokenizer
from .callbacks import BestDevCallback, DataParallelLossCallback, FreezeBackboneCallback, RunProgress


class InitialModels:
    """
    `DWAttForTokenClassification.from_backbone` under `set_seed(seed)`, remembered for the life of a
    process. Building a model initialises a random backbone before the pretrained weights overwrite it: several
    seconds for a large backbone, paid again by every run of a sweep, while the runs of one fusion and trial (every
    N, every budget) start from the same weights. The first build of a (backbone, fusion, seed, config) keeps the
    pretrained backbone and the fresh fusion and head weights; later builds copy those into a model made on the
    meta device, so they skip the random initialisation and give the very same model. A local backbone is known by
    its files' contents (`backbone_fingerprint`), so that weights changed in the same folder are loaded anew. The
    fresh fusion and head weights kept are the latest `max_heads` builds' within `max_head_bytes` (the latest one
    always): a Concat or DWAtt head on a 28-layer, 1536-wide LLM takes about 270 MB, and a sweep of two fusions over
    three seeds kept six of them, outside the memory budget. Likewise the backbones kept are the latest used within
    `max_backbone_bytes` (the latest always): a sweep over several backbones, or over heads cut at several depths
    (each depth loads a backbone of its own), would otherwise hold every one of them for the life of the process.
    """

    def __init__(self, max_heads: int = 16, max_head_bytes: int = 512 << 20, max_backbone_bytes: int = 2 << 30):
        self.max_heads, self.max_head_bytes, self.max_backbone_bytes = max_heads, max_head_bytes, max_backbone_bytes
        self._backbones: OrderedDict[tuple, torch.nn.Module] = OrderedDict()
        self._heads: OrderedDict[tuple, tuple] = OrderedDict()
        self.hits = self.misses = 0

    def build(
        self,
        backbone: str,
        fusion: str,
        seed: int,
        model_class=DWAttForTokenClassification,
        cache_layers: list[int] | None = None,
        shares_backbone: bool = False,
        backbone_dtype: str = "auto",
        placement: dict | None = None,
        **config_kwargs,
    ) -> DWAttForTokenClassification:
        """The model of `fusion` on `backbone` initialised with `seed`; `cache_layers`: the layers of the one cache
        the heads of a probe read, whose shared backbone runs as deep as the deepest of them. `shares_backbone` (FE,
        whose backbone never changes): the model takes the remembered backbone itself, not a copy, so that a process
        holds one copy of a 1.5B model's weights however many runs it makes. `backbone_dtype`: the dtype the backbone
        loads in (`RunConfig.backbone_weights_dtype`); `placement`: where it goes (`backbone_placement`)."""
        cls = model_class
        if cache_layers:
            config_kwargs["backbone_depth"] = layers_to_run(cache_layers)
        weights = backbone_fingerprint(backbone)  # a folder whose files changed is another backbone
        placement = dict(placement or {})
        if placement:  # a backbone spread over devices is another one to keep
            weights = (weights, repr(sorted((k, repr(v)) for k, v in placement.items())))
        key = (backbone, weights, backbone_dtype, fusion, seed, cls.__name__, repr(sorted(config_kwargs.items())))
        held = self._heads.get(key)
        if held is not None and (backbone, weights, backbone_dtype, held[0].run_depth) in self._backbones:
            self.hits += 1
            self._heads.move_to_end(key)
            config, head = held
            with torch.device("meta"):
                model = cls(copy.deepcopy(config))
            where = (backbone, weights, backbone_dtype, config.run_depth)
            self._backbones.move_to_end(where)
            kept = self._backbones[where]
            model.dwatt.use_backbone(kept if shares_backbone else copy.deepcopy(kept))
            model.load_state_dict({k: v.clone() for k, v in head.items()}, strict=False, assign=True)
        else:
            self.misses += 1
            set_seed(seed)
            model = cls.from_backbone(
                backbone, fusion=fusion, backbone_dtype=backbone_dtype, load_kwargs=placement, **config_kwargs
            )
            where = (backbone, weights, backbone_dtype, model.config.run_depth)
            if shares_backbone and where in self._backbones:  # the weights just loaded again: the kept ones serve
                model.dwatt.use_backbone(self._backbones[where])
            self._backbones.setdefault(
                where, model.dwatt.backbone if shares_backbone else copy.deepcopy(model.dwatt.backbone)
            )
            self._backbones.move_to_end(where)
            while len(self._backbones) > 1 and self.backbone_bytes() > self.max_backbone_bytes:
                self._backbones.popitem(last=False)
            head = {key: tensor.clone() for key, tensor in model.head_state().items()}
            self._heads[key] = (copy.deepcopy(model.config), head)
            while len(self._heads) > 1 and (
                len(self._heads) > self.max_heads or self.head_bytes() > self.max_head_bytes
            ):
                self._heads.popitem(last=False)
        set_seed(seed)  # the random state after a build does not depend on what the memo held
        return model

    def head_bytes(self) -> int:
        """What the kept fusion and head weights take."""
        return sum(t.numel() * t.element_size() for _, head in self._heads.values() for t in head.values())

    def backbone_bytes(self) -> int:
        """What the kept backbones' weights take (a tensor shared by two of them counted once)."""
        tensors = {id(t): t for b in self._backbones.values() for t in (*b.parameters(), *b.buffers())}
        return sum(t.numel() * t.element_size() for t in tensors.values())

    def clear(self) -> None:
        self._backbones.clear()
        self._heads.clear()
        self.hits = self.misses = 0


INITIAL_MODELS = InitialModels()


def by_length(dataset):
    """Shortest sentence first: evaluation batches then pad little, and seqeval's scores do not depend on order."""
    lengths = [len(ids) for ids in dataset["input_ids"]]
    return dataset.select(sorted(range(len(lengths)), key=lengths.__getitem__))


def scores_only(metrics: dict, prefix: str) -> dict:
    """Trainer evaluation metrics without their prefix and without timings (runtime, ..._per_second)."""
    return {
        key.removeprefix(prefix): value
        for key, value in metrics.items()
        if not key.endswith(("runtime", "_per_second"))
    }


def ensure_writable(folder: Path) -> None:
    """Fail before any work is done when results could not be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise PermissionError(f"--output-dir: {folder} is not writable ({error.strerror or error})") from None


def training_arguments(config: RunConfig, output_dir: Path) -> TrainingArguments:
    """The paper's optimisation (AdamW, linear decay to 0) with one dev evaluation per epoch. `config.batch_size`
    is the global batch: under a data-parallel launch each process takes its share of it."""
    arguments = TrainingArguments(
        output_dir=str(output_dir / "trainer"),
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=32,
        learning_rate=config.learning_rate,
        num_train_epochs=config.epochs,
        lr_scheduler_type="linear",
        optim="adamw_torch",
        eval_strategy="epoch",
        save_strategy="epoch" if config.checkpoint_every_epoch or config.resume else "no",
        save_total_limit=1,
        logging_strategy="epoch",
        report_to="none",
        seed=config.seed,
        data_seed=config.seed,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        disable_tqdm=not config.verbose,  # otherwise `callbacks.RunProgress` is the run's one bar
        full_determinism=config.deterministic,
        use_cpu=cpu_only(),
    )
    arguments.per_device_train_batch_size = per_device_batch_size(config.batch_size, arguments.world_size)
    return arguments


def train_with_resume(trainer: Trainer, best: BestDevCallback, config: RunConfig):
    """`trainer.train()`, continuing from the last checkpoint (and its best-dev state) when `config.resume`. Unless
    `config.verbose`, the `Trainer` prints nothing itself: one `RunProgress` bar shows the run (with
    `config.progress`), and the curve is in results.json."""
    if not config.verbose:
        trainer.remove_callback(PrinterCallback)
        if config.progress and trainer.is_world_process_zero():
            if best.key == "loss":
                trainer.add_callback(
                    RunProgress(best.metric, "dev perplexity", lambda loss: f"{math.exp(loss):.2f}", False)
                )
            else:
                trainer.add_callback(RunProgress(best.metric, "dev F1" if best.key == "f1" else f"dev {best.key}"))
    last_checkpoint = None
    if config.resume and Path(trainer.args.output_dir).is_dir():
        last_checkpoint = get_last_checkpoint(trainer.args.output_dir)
        if last_checkpoint is not None:
            check_weights(Path(last_checkpoint))
            best.load(last_checkpoint)
    return trainer.train(resume_from_checkpoint=last_checkpoint), last_checkpoint


def check_weights(folder: Path) -> None:
    """Every safetensors file of a checkpoint folder opens (a truncated one is named, with what to do)."""

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt") as handle:
                handle.keys()
        except (OSError, SafetensorError) as error:
            raise ValueError(
                f"{path}: the weights file is corrupted or truncated ({error}); remove {folder} to resume "
                "from the checkpoint before it, or start again without --resume"
            ) from None


def train_run(
    config: RunConfig,
    model,
    freeze,
    best: BestDevCallback,
    train_dataset,
    eval_dataset,
    data_collator,
    compute_metrics=None,
):
    """
    A run's `Trainer` (the paper's optimisation; FE/FT freezing, best-dev tracking and exact data-parallel losses as
    callbacks), trained (resumed when `config.resume`), ending with the best dev weights in `model`. Returns the
    trainer, its training output and the checkpoint it resumed from.
    """
    trainer = Trainer(
        model=model,
        args=training_arguments(config, Path(config.output_dir)),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=data_collator,
        compute_metrics=compute_metrics,
        callbacks=[freeze, best, DataParallelLossCallback()],
    )
    train_output, last_checkpoint = train_with_resume(trainer, best, config)
    best.restore_best(model)
    return trainer, train_output, last_checkpoint


def refuse_few_shot_dev(config: RunConfig) -> None:
    """A run of the `Trainer` makes no second choice on a few-shot dev sample: runs trained together do."""
    if config.few_shot_dev:
        raise ValueError(
            "few_shot_dev: the choice on a few-shot dev sample is made by runs trained together "
            "(dwatt sweep --engine stacked --few-shot-dev), not by the Trainer"
        )


def run_facts(model, train_metrics: dict, last_checkpoint) -> dict:
    return {
        "resumed_from": Path(last_checkpoint).name if last_checkpoint else None,
        "train_seconds": round(train_metrics["train_runtime"], 3),
        "train_examples_per_second": train_metrics["train_samples_per_second"],
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "lora": model.config.lora,
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "threads": torch.get_num_threads(),
            "processes": launched_processes(),
        },
    }


@dataclass(frozen=True)
class RunClock:
    """When a run started, by the wall clock and by this process's CPU time (every thread's): on a shared machine
    the wall clock also counts the time spent waiting for a core, so a run records both."""

    wall: float = field(default_factory=time.perf_counter)
    cpu: float = field(default_factory=time.process_time)

    def elapsed(self) -> dict[str, float]:
        return {
            "wall_seconds": round(time.perf_counter() - self.wall, 3),
            "cpu_seconds": round(time.process_time() - self.cpu, 3),
        }


def finish_run(config: RunConfig, model, tokenizer, results: dict, started: RunClock) -> dict:
    """Save the checkpoint (unless told not to) and write results.json atomically, its paths portable
    (`portable_results`; the returned results keep this machine's): the main process only, when a launcher
    started several (they hold the same weights and the same gathered scores)."""
    output_dir = Path(config.output_dir)
    results |= started.elapsed()
    if not is_main_process():
        return results
    write_json_atomically(output_dir / "results.json", portable_results(results))  # the scores first: they are the run
    if config.save_model:  # a LoRA run keeps its adapters beside the head: its checkpoint is small, as LoRA's are
        # (and a backbone spread by a device_map is not copied either: its checkpoint loads it from where it came)
        save_checkpoint(
            model, tokenizer, output_dir / "model", heads_only=config.mode == "lora" or spread_over_devices(model)
        )
    return results


def save_checkpoint(model, tokenizer, folder: Path, heads_only: bool = False) -> None:
    """`model` and `tokenizer` saved into a scratch folder beside `folder` and swapped in whole (`replace_folder`):
    a save that fails (a full disk) or is killed leaves the folder as it was, and says where the scores are. A model
    that trains LoRA adapters keeps them in PEFT's format too (`dwatt.lora.save_adapter`, in `adapter/`)."""

    spread = model.__dict__.pop("hf_device_map", None)  # saved head-only: none of the offloaded weights is read
    try:
        with scratch_folder(folder) as staging:
            model.save_pretrained(staging, heads_only=heads_only)
            save_adapter(model, staging / ADAPTER_FOLDER, base_model_name(model.config.backbone_name_or_path))
            save_tokenizer(tokenizer, staging)
            give_usual_modes(staging)
            replace_folder(staging, folder)
    except (OSError, SafetensorError) as error:
        raise OSError(
            f"{folder}: the checkpoint could not be written ({error}); the scores are in "
            f"{folder.parent / 'results.json'}"
        ) from None
    finally:
        if spread is not None:
            model.hf_device_map = spread


def set_training_mode(model, config: RunConfig) -> FreezeBackboneCallback:
    """The run's mode applied to `model`: for LoRA, the adapters put into its backbone first (`dwatt.lora.add_lora`),
    with a note, where the run would otherwise cache features, that it cannot (the adapters change them). Returns
    the callback that keeps the mode through training."""
    if config.mode == "lora":
        add_lora(model, **config.lora_options())
        if config.use_cache and config.progress and is_main_process():
            print(
                "--mode lora: the backbone's adapters train, so its features change every step: no feature cache",
                file=sys.stderr,
            )
    freeze = FreezeBackboneCallback(config.mode)
    freeze.apply(model)
    return freeze


BACKBONE_SHARE = 0.75  # of a memory budget beyond the working margin, what a backbone spread by a device_map takes


def backbone_placement(config: RunConfig) -> dict:
    """`from_pretrained`'s arguments for where the run's backbone goes: none (the process's device), or with
    `config.device_map` its layers spread over the devices there are, on the CPU within `BACKBONE_SHARE` of what
    `config.max_memory` leaves beside the working margin, and the rest read from disk as it runs (the weights offloaded
    beside the
    caches, where the backbone's own files cannot serve)."""
    if config.device_map is None:
        return {}
    if launched_processes() > 1:
        raise ValueError(
            "--device-map spreads one backbone over every device; under torchrun/accelerate launch each "
            "process would take them all: run it as one process"
        )
    placement = {"device_map": config.device_map, "offload_folder": str(feature_cache_folder(config) / "offload")}
    if config.max_memory is not None:
        from accelerate.utils import get_max_memory

        share = int(BACKBONE_SHARE * max(config.max_memory - WORKING_MARGIN, 0))  # the rest: fusion, head, caches
        placement["max_memory"] = get_max_memory() | {"cpu": share}
    return placement


def place_on_device(model) -> None:
    """The model on this process's device; a backbone spread by a `device_map` stays where accelerate put it (its
    hooks move each layer's inputs), and the model then says where its parts are (`hf_device_map`, which the `Trainer`
    reads before moving a model)."""
    if not spread_over_devices(model):
        model.to(device())
        return
    backbone = model.dwatt.backbone
    where_kept = next(name for name, module in model.named_modules() if module is backbone)
    model.dwatt._modules.pop("backbone")  # out of the way of `to`: its offloaded weights cannot move
    try:
        model.to(device())
    finally:
        model.dwatt._modules["backbone"] = backbone
    model.hf_device_map = {
        f"{where_kept}.{name}" if name else where_kept: where for name, where in backbone.hf_device_map.items()
    }
    model.hf_device_map[""] = str(device())


def spread_over_devices(model) -> bool:
    """Whether the model's backbone was spread over devices (and disk) by a `device_map`."""
    return getattr(model.dwatt.backbone, "hf_device_map", None) is not None


def feature_cache_folder(config: RunConfig) -> Path:
    """Where caches too large for memory are kept: `config.feature_cache_dir` (a sweep's or a probe's, which all their
    runs share), else `.feature-cache` beside the run's folder, which a rerun of the command shares."""
    if config.feature_cache_dir:
        return Path(config.feature_cache_dir).resolve()
    return Path(config.output_dir).resolve().parent / ".feature-cache"


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
