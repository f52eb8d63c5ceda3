"""`dwatt export`: a checkpoint as an ONNX graph for onnxruntime, beside its tokenizer (and its int8 graph)."""

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
    from ..serving.ensemble import is_ensemble
    from ..serving.export import export_onnx

    if is_ensemble(args.checkpoint):
        raise ValueError(f"{args.checkpoint} is a probe ensemble, which dwatt does not export yet: serve it with dwatt "
                         "predict (PyTorch fp32), or export one of its members' checkpoints (layer-<k>/model)")
    config = export_onnx(args.checkpoint, args.output, quantize=args.quantize)
    graphs = ", ".join(f"{args.output}/{name}" for name in config["graphs"].values())
    print(f"exported {args.checkpoint} ({config['task']}, {config['fusion']}) to {graphs}; onnxruntime's logits within "
          f"{config['check']['max_abs_logit_difference']:.1e} of PyTorch's")
    return 0
