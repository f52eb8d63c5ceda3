"""A run on the stock `transformers.Trainer`: its arguments (the paper's optimisation), its mode (FE, FT or LoRA)
applied, resumed from a checkpoint whose weights open, and the scores it reports."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import (
    PrinterCallback,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

from ..distributed import (
    cpu_only,
    is_main_process,
    per_device_batch_size,
)
from ..lora import add_lora
from ..run_config import RunConfig
from .callbacks import BestDevCallback, DataParallelLossCallback, FreezeBackboneCallback, RunProgress


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
    progress = None
    if not config.verbose:
        trainer.remove_callback(PrinterCallback)
        if config.progress and trainer.is_world_process_zero():
            if best.key == "loss":
                progress = RunProgress(best.metric, "dev perplexity", lambda loss: f"{math.exp(loss):.2f}", False)
            else:
                progress = RunProgress(best.metric, "dev F1" if best.key == "f1" else f"dev {best.key}")
            trainer.add_callback(progress)
    last_checkpoint = None
    if config.resume and Path(trainer.args.output_dir).is_dir():
        last_checkpoint = get_last_checkpoint(trainer.args.output_dir)
        if last_checkpoint is not None:
            check_weights(Path(last_checkpoint))
            best.load(last_checkpoint)
    try:
        return trainer.train(resume_from_checkpoint=last_checkpoint), last_checkpoint
    finally:
        if progress is not None:
            progress.close()


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
