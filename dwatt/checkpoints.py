"""Loading a saved DWAtt checkpoint (a `dwatt train` model folder, a head-only folder, or a Hub id) with its task."""

from __future__ import annotations

from pathlib import Path

TASK_OF_ARCHITECTURE = {"ForTokenClassification": "ner", "ForMaskedLM": "mlm", "ForSequenceClassification": "cls"}


def checkpoint_task(config) -> str:
    """`"ner"`, `"mlm"` or `"cls"`, from the architecture a checkpoint's config records."""
    for architecture in getattr(config, "architectures", None) or []:
        for suffix, task in TASK_OF_ARCHITECTURE.items():
            if architecture.endswith(suffix):
                return task
    raise ValueError(
        f"the checkpoint's config names no DWAtt task model (architectures: {getattr(config, 'architectures', None)}); "
        "expected a token-classification, masked-LM or sequence-classification checkpoint saved by dwatt"
    )


def load_checkpoint(path: str | Path):
    """The model (in eval mode), its tokenizer and its task (`checkpoint_task`) from a checkpoint folder or id, with
    this package's model classes (registered with the Auto classes first)."""
    from transformers import (
        AutoConfig,
        AutoModelForMaskedLM,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    from .auto import register_auto_classes
    from .tokenization import load_tokenizer

    register_auto_classes()
    config = AutoConfig.from_pretrained(path)
    task = checkpoint_task(config)
    auto = {"mlm": AutoModelForMaskedLM, "cls": AutoModelForSequenceClassification}.get(task, AutoModelForTokenClassification)
    return auto.from_pretrained(path, config=config).eval(), load_tokenizer(path), task


__all__ = ["checkpoint_task", "load_checkpoint"]
