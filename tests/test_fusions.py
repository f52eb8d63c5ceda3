"""fusions_dwatt: every fusion's facts are declared once, as a `FusionSpec` in `specs_dwatt.FUSION_SPECS`, and
computed by the `LayerFusion` that `FUSION_CLASSES` maps its name to; what the models and the library ask of a fusion
is
read from its spec, checked here against what the fusion does."""

import re
from pathlib import Path

import pytest
import torch

import configuration_dwatt
import dwatt
from fusions_dwatt import FUSION_CLASSES, LayerFusion
from modeling_dwatt import DWAttModel
from specs_dwatt import FUSION_SPECS

from .conftest import tiny_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_is_the_one_list_of_fusions():
    assert tuple(FUSION_CLASSES) == tuple(FUSION_SPECS) == configuration_dwatt.FUSIONS == dwatt.FUSIONS
    for name, fusion in FUSION_CLASSES.items():
        assert issubclass(fusion, LayerFusion) and fusion.spec is FUSION_SPECS[name]
    assert len({spec.display_name for spec in FUSION_SPECS.values()}) == len(FUSION_SPECS)


def test_a_model_asks_its_config_what_its_fusion_is():
    model = DWAttModel(tiny_config("bert", "concat"))
    assert model.config.fusion_spec is type(model.fusion).spec is FUSION_SPECS["concat"]


def model_and_layers(fusion: str, batch: int = 2, seq: int = 5):
    model = DWAttModel(tiny_config("bert", fusion)).eval()
    ids = torch.randint(1, 50, (batch, seq))
    with torch.no_grad():
        hidden = model.run_backbone(input_ids=ids, attention_mask=torch.ones_like(ids))
    return model, hidden


@pytest.mark.parametrize("name", FUSION_CLASSES)
def test_every_fusion_is_called_one_way_and_returns_weights_where_it_declares_it(name):
    model, hidden = model_and_layers(name)
    with torch.no_grad():
        output = model(backbone_hidden_states=hidden, output_layer_weights=True)
    assert output.last_hidden_state.shape == hidden[-1].shape
    assert (output.layer_weights is not None) == FUSION_SPECS[name].weighs_layers
    assert model.fused_layer_indices == FUSION_SPECS[name].read_layers(model.config)


@pytest.mark.parametrize("name", [name for name, spec in FUSION_SPECS.items() if spec.per_token])
def test_a_per_token_fusion_gives_each_token_what_it_gives_it_alone(name):
    model, hidden = model_and_layers(name)
    mask = torch.tensor([[1, 0, 1, 1, 0], [0, 1, 0, 0, 1]], dtype=torch.bool)
    with torch.no_grad():
        everywhere = model(backbone_hidden_states=hidden).last_hidden_state
        some = model(backbone_hidden_states=hidden, token_mask=mask).last_hidden_state
    torch.testing.assert_close(some[mask], everywhere[mask])
    assert not some[~mask].any()


@pytest.mark.parametrize("name", [name for name, spec in FUSION_SPECS.items() if spec.linear_in_layers])
def test_a_fusion_linear_in_the_layers_commutes_with_a_mean_over_tokens(name):
    model, hidden = model_and_layers(name)
    with torch.no_grad():
        for parameter in model.fusion.parameters():  # away from the initial values, which may hide a non-linearity
            parameter.add_(0.3 * torch.randn_like(parameter))
        fused_then_mean = model(backbone_hidden_states=hidden).last_hidden_state.mean(1, keepdim=True)
        mean_then_fused = model(
            backbone_hidden_states=tuple(h.mean(1, keepdim=True) for h in hidden)
        ).last_hidden_state
    torch.testing.assert_close(mean_then_fused, fused_then_mean, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", [name for name, spec in FUSION_SPECS.items() if spec.passes_layer_through])
def test_a_fusion_that_passes_its_layer_through_returns_it_unchanged(name):
    model, hidden = model_and_layers(name)
    with torch.no_grad():
        fused = model(backbone_hidden_states=hidden).last_hidden_state
    assert torch.equal(fused, hidden[model.fused_layer_indices[-1]])


# No fusion is told apart by its name (or its class) outside the table: capabilities are what code asks.
DISPATCH = re.compile(
    r"""fusion["')\]]*\s*[!=]=\s*["']|fusion\s+(not\s+)?in\s+\(["']|"""
    r"""isinstance\([^)]*\b(DepthWiseAttention|ScalarMix|LastLayer|LayerConcat|ExtraLayers)\b"""
)


def test_no_fusion_is_told_apart_by_name_outside_the_table_but_where_listed():
    found = {}
    for path in [*ROOT.glob("*_dwatt.py"), *(ROOT / "dwatt").rglob("*.py")]:
        count = sum(bool(DISPATCH.search(line)) for line in path.read_text().splitlines())
        if count:
            found[path.relative_to(ROOT).as_posix()] = count
    assert found == {}


def test_the_dispatch_pattern_catches_what_it_claims_to():
    for line in (
        'if config.fusion == "base":',
        "if fusion in ('base', 'concat'):",
        "isinstance(m, (ScalarMix, LastLayer))",
        'spec.fusion != "dwatt"',
        'if config.get("fusion") != "base":',
    ):
        assert DISPATCH.search(line), line
    assert not DISPATCH.search("if self.fusion.per_token:")


def test_layer_dropout_drops_layers_from_the_softmax_in_training_only():
    """ScalarMix+LD (UDify): at inference it is ScalarMix with the same weights; in training each layer's scalar is
    dropped with probability `layer_dropout` (its weight 0), and with every layer dropped the weights are uniform."""
    from fusions_dwatt import ScalarMix, ScalarMixLayerDropout

    config = tiny_config("bert", "scalar_mix_dropout")
    dropping, plain = ScalarMixLayerDropout(config), ScalarMix(config)
    for fusion in (dropping, plain):
        fusion.init_weights(0.02)
    with torch.no_grad():
        dropping.scalar_parameters.copy_(torch.arange(config.num_fused_layers, dtype=torch.float))
        plain.scalar_parameters.copy_(dropping.scalar_parameters)
    layers, last = torch.randn(2, config.num_fused_layers, 5, 8), torch.randn(2, 5, 8)
    dropping.eval()
    assert torch.equal(dropping(layers, last)[0], plain(layers, last)[0])
    dropping.train()
    torch.manual_seed(0)
    seen = torch.stack([dropping(layers, last)[1][0, 0] for _ in range(400)])
    dropped = (seen == 0).float().mean(0)
    assert ((dropped > 0.03) & (dropped < 0.2)).all()  # each layer dropped about 10% of the time
    dropping.layer_dropout = 1.0
    weights = dropping(layers, last)[1][0, 0]
    assert torch.allclose(weights, torch.full_like(weights, 1 / config.num_fused_layers))


def test_scalar_mix_layer_norm_over_one_layer_is_that_layer_s_normalisation():
    """ScalarMix+LN (AllenNLP's `do_layer_norm`, per token): over one layer it is (z - mean) / sqrt(var + 1e-12)
    times gamma; over several, layers of any scale weigh alike (scaling a layer by 1e4 changes nothing), and a token's
    output does not depend on the other tokens of its batch (padding, batch-mates)."""
    from fusions_dwatt import ScalarMixLayerNorm

    config = tiny_config("bert", "scalar_mix_layer_norm")
    fusion = ScalarMixLayerNorm(config)
    fusion.init_weights(0.02)
    layer = torch.randn(2, 1, 5, 8) * 3 + 7
    by_hand = (layer - layer.mean(-1, keepdim=True)) / torch.sqrt(layer.var(-1, unbiased=False, keepdim=True) + 1e-12)
    one = ScalarMixLayerNorm(tiny_config("bert", "scalar_mix_layer_norm", fused_layers="only:1"))
    one.init_weights(0.02)
    with torch.no_grad():
        one.gamma.fill_(1.5)
    assert one.scalar_parameters.shape == (1,)
    torch.testing.assert_close(one(layer, layer[:, 0])[0], 1.5 * by_hand[:, 0])
    layers = torch.randn(2, config.num_fused_layers, 5, 8)
    scaled = layers.clone()
    scaled[:, 0] *= 1e4
    torch.testing.assert_close(fusion(scaled, scaled[:, -1])[0], fusion(layers, layers[:, -1])[0])
    torch.testing.assert_close(
        fusion(layers[:1, :, :3], layers[:1, -1, :3])[0], fusion(layers, layers[:, -1])[0][:1, :3]
    )
