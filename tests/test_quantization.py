"""int8 on a CPU (dwatt.serving.quantization): the backbone's and fusion's linear maps quantized, the head kept in
fp32, and the probe that tells whether the machine's int8 kernels keep 8-bit activations exact."""

import pytest
import torch
from torch.ao.nn.quantized import dynamic as dynamic_quantized

from dwatt import DWAttForTokenClassification
from dwatt.serving import quantization
from dwatt.serving.quantization import FullRangeDynamicLinear, full_range_activations_exact, quantize_int8

from .helpers import padded_batch
from .helpers import with_random_head as trained_like


@pytest.mark.parametrize("full_range", [True, False], ids=["8-bit-activations", "7-bit-activations"])
@pytest.mark.parametrize("chosen", [True, False], ids=["chosen", "by-the-probe"])
def test_int8_quantizes_the_backbone_and_fusion_linear_maps_and_keeps_the_head(
    tiny_backbone, monkeypatch, full_range, chosen
):
    monkeypatch.setattr(quantization, "full_range_activations_exact", lambda: full_range)
    torch.manual_seed(0)
    model = trained_like(DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="dwatt", num_labels=5))
    batch = padded_batch(2, 7, seed=4)
    batch["input_ids"] = batch["input_ids"] % 16
    with torch.no_grad():
        fp32 = model(**batch).logits
        quantize_int8(model, full_range if chosen else None)
        int8 = model(**batch).logits
    linear = (torch.nn.Linear, dynamic_quantized.Linear)
    kinds = {name: type(module) for name, module in model.named_modules() if isinstance(module, linear)}
    up = {name for name in kinds if name.endswith("intermediate.dense")}  # the feed-forward up-projections
    assert len(up) == 3
    quantized = FullRangeDynamicLinear if full_range else dynamic_quantized.Linear
    assert all(kinds[name] is (quantized if full_range else torch.nn.Linear) for name in up)  # fp32 with 7 bits
    assert all(kind is quantized for name, kind in kinds.items() if name.startswith("dwatt.") and name not in up)
    assert any(name.startswith("dwatt.fusion.") for name in kinds) and kinds["classifier"] is torch.nn.Linear
    real = batch["attention_mask"].bool()
    assert 0 < (int8 - fp32)[real].abs().max() < 0.05 * fp32[real].abs().max()  # int8, and close to fp32
    with pytest.raises(ValueError, match="takes a DWAtt task model"):
        quantize_int8(torch.nn.Linear(2, 2))


def emulated_linear_dynamic(saturating: bool):
    """x86 int8 kernels emulated: uint8 activations times int8 weights, the products added in pairs, in 16 bits with
    saturation (`saturating`, AVX2/AVX-512 without VNNI) or exactly (VNNI), then in 32 bits."""

    def linear_dynamic(x, packed, reduce_range=False):
        weight, _ = torch.ops.quantized.linear_unpack(packed)
        top = 127 if reduce_range else 255
        scale = max(float(x.max()), 0.0) / top or 1.0
        products = torch.clamp(torch.round(x / scale), 0, top)[:, None, :] * weight.int_repr().float()[None]
        pairs = products[..., 0::2] + products[..., 1::2]
        if saturating:
            pairs = torch.clamp(pairs, -(2**15), 2**15 - 1)
        return pairs.sum(-1) * scale * weight.q_per_channel_scales().float()

    return linear_dynamic


@pytest.mark.parametrize("saturating", [True, False])
def test_the_full_range_probe_tells_a_saturating_kernel_from_an_exact_one(monkeypatch, saturating):
    unpack = torch.ops.quantized.linear_unpack
    monkeypatch.setattr(torch.ops.quantized, "linear_unpack", unpack, raising=False)  # kept as it is
    monkeypatch.setattr(torch.ops.quantized, "linear_dynamic", emulated_linear_dynamic(saturating), raising=False)
    full_range_activations_exact.cache_clear()
    try:
        assert full_range_activations_exact() is not saturating
    finally:
        full_range_activations_exact.cache_clear()


def test_int8_in_pytorch_refuses_a_decoder_llm_and_names_the_export_that_keeps_its_tags(
    tiny_decoder, tmp_path, capsys
):
    from dwatt.cli import main

    from .helpers import saved_with_tokenizer

    model = DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=3)
    with pytest.raises(
        ValueError, match=r"loses a decoder LLM's answers: .*dwatt export CHECKPOINT OUT --quantize int8"
    ):
        quantize_int8(model)
    quantized = quantize_int8(model, allow_lossy=True)  # the benchmark's measurement of it
    assert any(isinstance(module, dynamic_quantized.Linear) for module in quantized.dwatt.modules())
    folder = saved_with_tokenizer(
        DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=3), tmp_path / "decoder", tiny_decoder
    )
    assert main(["predict", str(folder), "peter", "--quantize", "int8"]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # the load's progress aside
    assert len(error) == 1 and "% of words (benchmarks/results/int8_decoders_cpu.md)" in error[0]
