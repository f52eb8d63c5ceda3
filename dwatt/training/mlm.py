"""Masked-LM runs on WikiText-2: fresh masks every training epoch, fixed masks for dev and test, perplexity."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    default_data_collator,
    set_seed,
)

from modeling_dwatt import DWAttForMaskedLM

from ..console import masked_prose_line
from ..data import (
    group_texts_for_mlm,
    load_tokenizer,
    load_wikitext2,
    mlm_collator,
)
from ..portable import backbone_folder
from ..run_config import RunConfig
from .callbacks import BestDevCallback
from .run_results import RunClock, finish_run, run_facts
from .trainer_run import ensure_writable, set_training_mode, train_run


def fixed_masks(dataset, collator, seed: int) -> list[dict]:
    """Mask an evaluation set once, with its own seed, so every epoch is scored on the same masked tokens."""
    rows = [dataset[i] for i in range(len(dataset))]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        batch = collator(rows)
    return [{key: value[i] for key, value in batch.items()} for i in range(len(rows))]


def load_mlm_splits(data_dir: str | None):
    """WikiText-2 lines per split (`load_wikitext2`; without a folder the Hub dataset) and where the training lines
    come from: without a train split, the first 90% of the validation lines train and the last 10% are dev."""
    data = load_wikitext2(data_dir or "wikitext")
    if "train" in data:
        return data, "train"
    if "validation" not in data:
        raise FileNotFoundError(f"{data_dir}: neither a train nor a validation split of WikiText-2")
    lines = data["validation"]
    cut = int(len(lines) * 0.9)
    data["train"], data["validation"] = lines.select(range(cut)), lines.select(range(cut, len(lines)))
    return data, "first 90% of validation lines (no train split); dev: last 10%"


MLM_MASK_SEEDS = {"validation": 0, "test": 1}  # offsets from the run's seed: dev and test are masked once each


@torch.no_grad()
def evaluate_mlm(
    model, tokenizer, data_dir: str | None, split: str, block_size: int = 128, seed: int = 0, batch_size: int = 32
) -> dict:
    """Masked-token loss and perplexity of a masked-LM checkpoint on one WikiText-2 split, masked as `run_mlm`
    masks it for a run of `seed` (so a run's own dev and test perplexities come back)."""
    data, _ = load_mlm_splits(data_dir)
    if split not in data:
        raise ValueError(f"--split: the WikiText-2 data has no {split!r} split ({', '.join(data)})")
    blocks = group_texts_for_mlm(data[split], tokenizer, block_size, split)
    rows = fixed_masks(blocks, mlm_collator(tokenizer), seed + MLM_MASK_SEEDS.get(split, 0))
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(rows), batch_size):  # the Trainer's mean: batch losses weighted by batch size
        batch = default_data_collator(rows[start : start + batch_size])
        total += model(**batch).loss.item() * len(batch["labels"])
        count += len(batch["labels"])
    loss = total / max(count, 1)
    return {"split": split, "blocks": count, "loss": loss, "perplexity": math.exp(loss)}


def score_checkpoint(model, tokenizer, *, data_dir: str | None, split: str, block_size: int, seed: int, **_) -> dict:
    """`dwatt evaluate` on a masked-LM checkpoint (the task's `scorer`): `evaluate_mlm` on the WikiText-2 files of
    `data_dir`. An ONNX export gives logits, not the loss a perplexity needs, and is refused."""
    if getattr(model, "takes_arrays", False):
        raise ValueError(
            "an ONNX export of a masked LM gives logits, not the loss its perplexity needs; score its checkpoint"
        )
    if data_dir is None:
        raise ValueError("--data-dir: a masked-LM checkpoint is scored on WikiText-2 files; give their folder")
    return evaluate_mlm(model, tokenizer, data_dir, split, block_size, seed)


def run_mlm(config: RunConfig) -> dict:
    """
    One masked-LM run on WikiText-2 files in `data_dir` (`dwatt.data.load_wikitext2`; without it the Hub dataset
    `wikitext`, which needs the network): blocks of
    `block_size` tokens, the standard 15% masking for training (new masks every epoch), fixed masks for dev and
    test, the backbone's LM head on the fused representation, batch 8 by default. The run ends with the model of
    the lowest dev loss and reports perplexities (exp of the mean masked-token loss). When the folder has no train
    split, the first 90% of the validation lines train and the last 10% are the dev split (said in the results).
    FE trains the fusion module and the LM head; the feature cache does not apply (masks change every epoch).
    """
    config.validate()
    started = RunClock()
    ensure_writable(Path(config.output_dir))
    backbone = backbone_folder(config.backbone)
    # before the data: the collator would otherwise complain of a missing mask token
    DWAttForMaskedLM.check_backbone(AutoConfig.from_pretrained(backbone))
    data, train_source = load_mlm_splits(config.data_dir)
    tokenizer = load_tokenizer(backbone)
    blocks = group_texts_for_mlm(data, tokenizer, config.block_size)
    collator = mlm_collator(tokenizer)
    set_seed(config.seed)
    model = DWAttForMaskedLM.from_backbone(
        backbone, fusion=config.fusion, backbone_dtype=config.backbone_weights_dtype, **config.model_options()
    )
    model.fuse_labelled_positions_only = True  # the loss reads masked positions only
    freeze = set_training_mode(model, config)
    best = BestDevCallback(metric="eval_loss", greater_is_better=False, key="loss")
    trainer, train_output, last_checkpoint = train_run(
        config,
        model,
        freeze,
        best,
        blocks["train"],
        fixed_masks(blocks["validation"], collator, config.seed + MLM_MASK_SEEDS["validation"]),
        lambda rows: default_data_collator(rows) if "labels" in rows[0] else collator(rows),  # eval: masked once
    )
    results = {
        "config": asdict(config) | {"backbone": backbone},
        "task": config.task,
        "seed": config.seed,
        "train_source": train_source,
        "num_train_blocks": len(blocks["train"]),
        "example_input": masked_prose_line(data["validation"], tokenizer.mask_token),
        "best_dev_loss": best.best["loss"],
        "best_dev_perplexity": math.exp(best.best["loss"]),
        "best_epoch": best.best["epoch"],
        "dev_curve": best.curve,
    } | run_facts(model, train_output.metrics, last_checkpoint)
    if "test" in blocks:
        test_masks = fixed_masks(blocks["test"], collator, config.seed + MLM_MASK_SEEDS["test"])
        test_loss = trainer.evaluate(test_masks, metric_key_prefix="test")["test_loss"]
        results.update(test_loss=test_loss, test_perplexity=math.exp(test_loss))
    return finish_run(config, model, tokenizer, results, started)


run = run_mlm  # the task's entry point (`dwatt.training.run`)
