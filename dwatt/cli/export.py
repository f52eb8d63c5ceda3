"""`dwatt export`: a checkpoint (or a probe ensemble) as an ONNX graph for onnxruntime, beside its tokenizer (and its
int8 graph)."""

from __future__ import annotations

import argparse

from ..choices import QUANTIZATIONS
from .options import add_threads_argument


def register(commands) -> None:
    parser = commands.add_parser("export", help="write a checkpoint as an ONNX graph for onnxruntime, beside its tokenizer")
    parser.add_argument("checkpoint")
    parser.add_argument("output", help="the folder to write (model.onnx, the tokenizer, dwatt_export.json)")
    parser.add_argument("--format", choices=("onnx",), default="onnx")
    parser.add_argument("--quantize", choices=QUANTIZATIONS, default=None,
                        help="also write model_int8.onnx, onnxruntime's dynamic int8 quantization of the graph")
    add_threads_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..serving.export import export_onnx

    config = export_onnx(args.checkpoint, args.output, quantize=args.quantize)
    graphs = ", ".join(f"{args.output}/{name}" for name in config["graphs"].values())
    what = (f"a probe ensemble of {len(config['ensemble']['members'])} heads" if "ensemble" in config
            else config["fusion"])
    print(f"exported {args.checkpoint} ({config['task']}, {what}) to {graphs}; onnxruntime's logits within "
          f"{config['check']['max_abs_logit_difference']:.1e} of PyTorch's")
    return 0
