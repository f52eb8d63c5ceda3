"""Freezing (dwatt.training.callbacks): in FE mode exactly the backbone is frozen, and the stock Trainer leaves it
untouched."""

import pytest
import torch
from transformers import BertTokenizerFast, DataCollatorForTokenClassification, Trainer, TrainingArguments

from dwatt import RobertaDWAttForTokenClassification
from dwatt.data import load_conll2003, tokenize_and_align
from dwatt.training import FreezeBackboneCallback, trainable_parameter_names

from .conftest import tiny_config


def test_fe_callback_freezes_exactly_the_backbone():
    model = RobertaDWAttForTokenClassification(tiny_config())
    callback = FreezeBackboneCallback("fe")
    callback.apply(model)
    trainable = trainable_parameter_names(model)
    assert trainable and not any(n.startswith("dwatt.backbone.") for n in trainable)
    expected = {n for n, _ in model.named_parameters() if n.startswith(("dwatt.fusion.", "classifier."))}
    assert set(trainable) == expected
    model.train()
    assert model.training and model.dwatt.fusion.training and not model.dwatt.backbone.training
    FreezeBackboneCallback("ft").apply(model)
    assert len(trainable_parameter_names(model)) == len(list(model.parameters()))
    assert model.dwatt.backbone.training
    with pytest.raises(ValueError, match="unknown training mode 'xx'"):
        FreezeBackboneCallback("xx")


def test_trainer_in_fe_mode_leaves_the_backbone_untouched(tiny_backbone, tiny_conll, tmp_path):
    data = load_conll2003(tiny_conll)
    tokenizer = BertTokenizerFast.from_pretrained(tiny_backbone)
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = TrainingArguments(
        output_dir=str(tmp_path),
        num_train_epochs=2,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=4,
        disable_tqdm=True,
        learning_rate=1e-2,
    )
    columns = ["input_ids", "attention_mask", "labels"]
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=tokenize_and_align(data["train"], tokenizer).select_columns(columns),
        data_collator=DataCollatorForTokenClassification(tokenizer),
        callbacks=[FreezeBackboneCallback("fe")],
    )
    trainer.train()
    after = model.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all(not k.startswith("dwatt.backbone.") for k in changed)
    assert any(k.startswith("dwatt.fusion.") for k in changed) and "classifier.weight" in changed
