"""Model cards (dwatt.model_cards): the YAML metadata the Hub reads parses and carries the base model and scores, and
the card says what the fusion reads and what the backbone is."""

import pytest
import yaml

from dwatt import RobertaDWAttForTokenClassification
from dwatt.model_cards import model_card

from .conftest import save_tiny_backbone
from .helpers import RUN_RESULTS


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return save_tiny_backbone(tmp_path_factory.mktemp("tiny-bert"), "bert")


def test_model_card_metadata_parses_and_carries_base_model_and_scores(backbone):
    model = RobertaDWAttForTokenClassification.from_backbone(str(backbone), num_labels=5)
    card = model_card(model, RUN_RESULTS, "someone/dwatt-ner")
    metadata = yaml.safe_load(card.split("---\n")[1])
    # a folder of this machine is named by its name alone
    assert metadata["library_name"] == "transformers" and metadata["base_model"] == backbone.name
    assert {"dwatt", "layer-fusion", "token-classification"} <= set(metadata["tags"])
    assert metadata["datasets"] == ["conll2003"] and set(metadata["metrics"]) == {
        "f1",
        "precision",
        "recall",
        "accuracy",
    }
    values = {m["type"]: m["value"] for m in metadata["model-index"][0]["results"][0]["metrics"]}
    assert values == {"f1": 0.3008, "precision": 0.25, "recall": 0.375, "accuracy": 0.86}
    assert "trust_remote_code=True" in card and "FE (frozen backbone" in card and "| f1 | 30.08 |" in card
    assert str(backbone) not in card and str(backbone.parent) not in card
    assert f"over the encoder `{backbone.name}`" in card and "- Fusion: `dwatt` over all of the backbone's" in card


@pytest.mark.parametrize(
    "fusion, layers, reads",
    [
        ("concat", "2", "- Fusion: `concat` over 2 (`2`) of the backbone's 3 layers"),
        ("scalar_mix", "all", "- Fusion: `scalar_mix` over all of the backbone's 3 layers"),
        ("base", "all", "- Fusion: `base` (the last of the backbone's 3 layers)"),
        ("base_plus_n", "all", "- Fusion: `base_plus_n` (1 extra layer over the last of the backbone's 3)"),
    ],
)
def test_the_model_card_says_what_the_fusion_reads_and_that_the_backbone_is_a_decoder(
    fusion, layers, reads, tiny_decoder
):
    model = RobertaDWAttForTokenClassification.from_backbone(
        str(tiny_decoder), num_labels=5, fusion=fusion, fused_layers=layers, num_extra_layers=1
    )
    card = model_card(model, RUN_RESULTS, "someone/dwatt-ner")
    assert f"over the decoder LLM `{tiny_decoder.name}`" in card and reads in card, card


def test_the_model_card_says_how_a_word_is_read_where_it_is_not_at_its_first_sub_token(tiny_decoder):
    first = RobertaDWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=5)
    echo = RobertaDWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=5, word_readout="echo-mean")
    assert "word_readout" not in model_card(first, RUN_RESULTS, "someone/dwatt-ner")
    assert "each word read as `echo-mean` (`word_readout`: the model takes `word_ids`" in model_card(
        echo, RUN_RESULTS, "someone/dwatt-ner"
    )
