"""`dwatt export`: a checkpoint (or a probe ensemble) as an ONNX graph for onnxruntime, beside its tokenizer (and its
int8 graph)."""

from __future__ import annotations

import argparse

from ..serving.schemes import EXPORT_QUANTIZATIONS
from .options import add_budget_argument, add_threads_argument


def register(commands) -> None:
    parser = commands.add_parser(
        "export",
        help="write a checkpoint as an ONNX graph for onnxruntime, beside its tokenizer, or a head on one layer as a "
        "stock transformers model",
    )
    parser.add_argument("checkpoint")
    parser.add_argument("output", help="the folder to write (model.onnx, the tokenizer, dwatt_export.json)")
    parser.add_argument(
        "--format",
        choices=("onnx", "transformers"),
        default="onnx",
        help="onnx: a graph for onnxruntime (`dwatt predict` runs it); transformers: a head on one layer as its "
        "family's stock <Family>ForTokenClassification (a tagger) or <Family>ForSequenceClassification (a text "
        "classifier pooling as the stock class does: an encoder's first token, a decoder's last through its final "
        "norm), cut to that layer, which loads without remote code (other heads are refused, saying why)",
    )
    parser.add_argument(
        "--quantize",
        choices=EXPORT_QUANTIZATIONS,
        default=None,
        help="also write model_int8.onnx, checked against the fp32 graph on --calibration: int8 tries the "
        "schemes that may keep the backbone family's answers and keeps the fastest on this CPU of those that keep "
        "98%% of them (int8-dynamic: one activation scale per tensor, encoders only; int8-weights: weights per "
        "block, activations per token's block; int8-smooth: per token, SmoothQuant-calibrated, standard ONNX "
        "operators); int8-<scheme> forces one",
    )
    parser.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="inputs to calibrate and check the int8 graph on, one a line (default: 128 dev sentences "
        "of CoNLL-03, or AG News texts for a classifier)",
    )
    parser.add_argument(
        "--allow-lossy",
        action="store_true",
        help="keep an int8 graph that gives the fp32 graph's answer on under 98%% of the calibration "
        "sample's words (texts, tokens)",
    )
    add_budget_argument(
        parser,
        "an export that would take more (the model's weights in float32, 2.35 times them with --quantize, twice them "
        "with --format transformers, and 1 GiB) is refused before it begins (default: the memory available)",
    )
    add_threads_argument(parser)
    parser.set_defaults(handler=run)


def run_stock(args: argparse.Namespace) -> int:
    from ..serving.stock_export import export_stock

    if args.quantize or args.calibration or args.allow_lossy:
        raise ValueError("--quantize, --calibration and --allow-lossy are for --format onnx")
    record = export_stock(args.checkpoint, args.output, max_memory=args.max_memory)
    print(
        f"exported {args.checkpoint} to {args.output} as a stock {record['architecture']} (layer {record['layer']} of "
        f"{record['backbone_layers']}; no remote code); logits within {record['check']['max_abs_logit_difference']:.1e} "
        "of the checkpoint's"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.format == "transformers":
        return run_stock(args)
    from ..serving.export import export_onnx

    config = export_onnx(
        args.checkpoint,
        args.output,
        quantize=args.quantize,
        calibration=args.calibration,
        allow_lossy=args.allow_lossy,
        max_memory=args.max_memory,
    )
    graphs = ", ".join(f"{args.output}/{name}" for name in config["graphs"].values())
    what = (
        f"a probe ensemble of {len(config['ensemble']['members'])} heads" if "ensemble" in config else config["fusion"]
    )
    print(
        f"exported {args.checkpoint} ({config['task']}, {what}) to {graphs}; onnxruntime's logits within "
        f"{config['check']['max_abs_logit_difference']:.1e} of PyTorch's"
    )
    if "int8" in config:
        int8 = config["int8"]
        tried = "; ".join(
            f"{c['scheme']} {100 * c['agreement']:.1f}% at {c['time_vs_fp32']:.2f}x" for c in int8["candidates"]
        )
        slower = (
            "; slower than fp32 here: serve the fp32 graph on this CPU (dwatt predict without --quantize)"
            if int8["time_vs_fp32"] >= 1
            else ""
        )
        print(
            f"int8 ({int8['scheme']}): {100 * int8['agreement']:.1f}% of {int8['unit']} as fp32 on "
            f"{int8['calibration']}, {int8['time_vs_fp32']:.2f}x fp32's time on this CPU (tried: {tried}){slower}"
        )
    return 0
