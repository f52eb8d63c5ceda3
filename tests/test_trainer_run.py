"""A run on the Trainer (dwatt.training.trainer_run): a fixed dev subset, a checkpoint's weights checked before resuming."""

import pytest
import torch

from dwatt.data import load_conll2003
from dwatt.training import run_ner

from .helpers import tiny_ner_run_config


def test_dev_sentences_scores_a_fixed_subset(tiny_backbone, tiny_conll, tmp_path):
    runs = [
        run_ner(
            tiny_ner_run_config(
                tiny_backbone, tiny_conll, tmp_path / str(seed), save_model=False, seed=seed, dev_sentences=3
            )
        )
        for seed in (0, 1)
    ]
    assert [r["num_dev_sentences"] for r in runs] == [3, 3]
    supports = [{k: v for k, v in r["best_dev_scores"].items() if k.endswith("_support")} for r in runs]
    assert supports[0] == supports[1]  # every trial is scored on the same sentences
    assert len(load_conll2003(tiny_conll)["validation"]) > 3
    with pytest.raises(ValueError, match="--dev-sentences must be > 0"):
        run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "x", dev_sentences=0))


def test_a_truncated_weights_file_is_named_with_what_to_do(tmp_path):
    """Resuming reads the checkpoint's weights first: a file cut short is named, with the two ways on."""
    from safetensors.torch import save_file

    from dwatt.training.trainer_run import check_weights

    save_file({"weight": torch.zeros(64, 64)}, str(tmp_path / "model.safetensors"))
    check_weights(tmp_path)  # whole: nothing to say
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors: the weights file is corrupted or truncated .*--resume"):
        check_weights(tmp_path)
