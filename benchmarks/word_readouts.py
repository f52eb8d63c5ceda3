"""What each word readout of a tagger costs to serve (`--word-readout`): `dwatt.serving.prediction.predict_tags` over
CoNLL-03 test sentences with one tagger per readout on the same backbone, timed in interleaved rounds (the first
sub-token's readout timed twice: its second copy's ratio is the measurement's own noise), with the tokens each readout
hands the backbone (an `echo-` readout gives the sentence twice) and what serves it besides `dwatt predict`: a stock
export and transformers' pipeline read a word at its first sub-token from the tokens alone, so only `first` exports
stock; every readout exports to ONNX, whose graph takes the word ids. The heads are random (speed does not depend on
their values); the head reads the last layer (`fusion="base"`, what a probe's choice of one layer exports as).

    python benchmarks/word_readouts.py --backbones models/SmolLM2-135M-Instruct-q4,models/all-MiniLM-L6-v2

Writes `results/word_readouts_cpu.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import results_files
import torch

from dwatt import DWAttForTokenClassification
from dwatt.data import encode_words, load_conll2003, load_tokenizer
from dwatt.portable import portable_path
from dwatt.serving.prediction import predict_tags
from dwatt.serving.stock_export import stock_refusal
from specs_dwatt import WORD_READOUTS

HERE = Path(__file__).resolve().parent
CONTROL = "first"


def sentences(count: int) -> list[list[str]]:
    """The first `count` non-empty CoNLL-03 test sentences, from the vendored copy."""
    test = load_conll2003()["test"]
    return [tokens for tokens in test["tokens"] if tokens][:count]


def measure(backbone: str, words: list[list[str]], rounds: int) -> dict:
    """One backbone's taggers, one per readout: the tokens each runs, its median seconds and ratio to `first`."""
    tokenizer = load_tokenizer(backbone)
    models, tokens = {}, {}
    for readout in WORD_READOUTS:
        torch.manual_seed(0)
        models[readout] = DWAttForTokenClassification.from_backbone(
            backbone, fusion="base", num_labels=9, word_readout=readout
        ).eval()
        rows, _ = encode_words(tokenizer, words, min(tokenizer.model_max_length, 512), readout=readout)
        tokens[readout] = sum(len(ids) for ids in rows["input_ids"])
    timings = results_files.interleaved_timings(
        {readout: lambda model=model: predict_tags(model, tokenizer, words) for readout, model in models.items()},
        rounds,
        CONTROL,
        warmup=1,
    )
    median = timings["median"]
    return {
        "backbone": portable_path(backbone),
        "sentences": len(words),
        "noise_control": timings["noise_control"],
        "readouts": {
            readout: {
                "backbone_tokens": tokens[readout],
                "seconds": median[readout],
                "time_vs_first": median[readout] / median[CONTROL],
                "exports_stock": stock_refusal(models[readout], "ner") is None,
            }
            for readout in WORD_READOUTS
        },
        "seconds": timings["seconds"],
    }


def markdown(results: list[dict], commands: list[str]) -> str:
    lines = [
        "| backbone | readout | backbone tokens | seconds (median) | time vs first | stock export |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        name = Path(result["backbone"]).name
        for readout, facts in result["readouts"].items():
            stock = "yes" if facts["exports_stock"] else "no (ONNX)"
            lines.append(
                f"| {name} | {readout} | {facts['backbone_tokens']} | {facts['seconds']:.2f} | "
                f"{facts['time_vs_first']:.2f}x | {stock} |"
            )
    controls = ", ".join(f"{Path(r['backbone']).name} {r['noise_control']:.2f}" for r in results)
    return (
        "\n".join(lines)
        + f"\n\n{results[0]['sentences']} CoNLL-03 test sentences through `predict_tags` (sorted batches of 32); "
        + f"noise control (`first` timed twice, its ratio): {controls}.\n\n"
        + results_files.commands_line(commands)
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", default="models/SmolLM2-135M-Instruct-q4,models/all-MiniLM-L6-v2")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    words = sentences(args.sentences)
    results = [measure(backbone, words, args.rounds) for backbone in args.backbones.split(",") if backbone]
    result = {
        "results": results,
        "environment": results_files.environment(torch.device("cpu")) | results_files.cpu_facts(),
        "command": results_files.command("word_readouts.py", argv),
    }
    results_files.write(args.output, "word_readouts_cpu", result, markdown(results, [result["command"]]))


if __name__ == "__main__":
    main()
