"""What several commands share (dwatt.cli.options): comma-separated values, the batch size checked, and the model
`predict` and `evaluate` run, in the runtime its folder was written for (a `--runtime` naming the other is refused)."""

import argparse

import pytest
from torch.ao.nn.quantized import dynamic as dynamic_quantized

from dwatt.cli.options import csv_of, inference_model, positive_batch_size, runtime


def test_comma_separated_values_skip_empty_items():
    assert csv_of(float)("3e-4,,1e-2,") == (3e-4, 1e-2) and csv_of(str)("") == ()


def test_a_batch_size_below_one_is_refused_with_the_option_named():
    positive_batch_size(argparse.Namespace(batch_size=1))
    with pytest.raises(ValueError, match="--batch-size must be >= 1, got 0"):
        positive_batch_size(argparse.Namespace(batch_size=0))


def test_a_folder_runs_where_it_was_written_for_and_the_other_runtime_is_refused(checkpoints, exported_ner):
    def args(folder, chosen=None, quantize=None):
        return argparse.Namespace(checkpoint=str(folder), runtime=chosen, quantize=quantize)

    assert runtime(args(checkpoints["ner"])) == runtime(args(checkpoints["ner"], "torch")) == "torch"
    assert runtime(args(exported_ner)) == runtime(args(exported_ner, "onnx")) == "onnx"
    with pytest.raises(ValueError, match=r"--runtime onnx: .* is not an ONNX export; write one with `dwatt export`"):
        runtime(args(checkpoints["ner"], "onnx"))
    with pytest.raises(ValueError, match=r"--runtime torch: .* is an ONNX export"):
        runtime(args(exported_ner, "torch"))
    model, _, task = inference_model(args(checkpoints["cls"], quantize="int8"))
    assert task == "cls" and any(isinstance(m, dynamic_quantized.Linear) for m in model.dwatt.modules())
    assert not isinstance(model.out_proj, dynamic_quantized.Linear)  # the head stays fp32
