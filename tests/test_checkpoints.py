"""Loading a saved checkpoint (dwatt.checkpoints): a folder checked before transformers reads it (every error names the
file and line or key; a Hub id passes through), the task read from the architecture it records, and the model, its
tokenizer and its task loaded in one call."""

import json

import pytest
import torch

from dwatt import DWAttForSequenceClassification
from dwatt.checkpoints import check_checkpoint_folder, checkpoint_task, load_checkpoint


def test_a_folder_is_checked_before_loading_and_each_error_names_its_file(tmp_path):
    check_checkpoint_folder("someone/dwatt-ner")  # a Hub id: the Hub or its cache answers
    with pytest.raises(FileNotFoundError, match=r"nowhere: no checkpoint folder there"):
        check_checkpoint_folder(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"config\.json: missing; .* is not a checkpoint folder"):
        check_checkpoint_folder(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps({"dtype": "float32", "encoder_config": {"torch_dtype": "float33"}})
    )
    with pytest.raises(ValueError, match=r"config\.json: encoder_config\.torch_dtype 'float33' is not a torch dtype"):
        check_checkpoint_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "auto"}))
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 512,\n "pad_token": }')
    with pytest.raises(ValueError, match=r"tokenizer_config\.json:2: not JSON"):
        check_checkpoint_folder(tmp_path)


def test_the_task_is_read_from_the_architecture_the_config_records():
    from types import SimpleNamespace

    assert checkpoint_task(SimpleNamespace(architectures=["RobertaDWAttForTokenClassification"])) == "ner"
    assert checkpoint_task(SimpleNamespace(architectures=["DWAttForSequenceClassification"])) == "cls"
    with pytest.raises(ValueError, match=r"names no DWAtt task model \(architectures: \['BertModel'\]\)"):
        checkpoint_task(SimpleNamespace(architectures=["BertModel"]))


def test_a_saved_classifier_loads_in_eval_mode_with_its_tokenizer_and_task(tiny_backbone, tmp_path):
    model = DWAttForSequenceClassification.from_backbone(str(tiny_backbone), fusion="scalar_mix", num_labels=3)
    model.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(tmp_path)
    loaded, tokenizer, task = load_checkpoint(tmp_path)
    assert (
        task == "cls"
        and not loaded.training
        and tokenizer("peter blackburn")["input_ids"][0] == tokenizer.cls_token_id
    )
    batch = tokenizer(["peter blackburn", "eu rejects german call"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model.eval()(**batch).logits)
