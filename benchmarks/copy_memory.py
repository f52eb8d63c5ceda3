"""What one more stacked copy of a wide fusion takes to train: the peak anonymous memory of a sweep group (`dwatt sweep
--engine budgets`, FE, cached features, `--few-shot-dev`) trained as 1 copy and as 3 (three learning rates), on a
  random
BERT 1536 wide and 8 layers deep whose Concat and DWAtt have about 20M weights a copy; the difference over 2 copies,
per trained weight (the largest over rounds: when the kept states are replaced varies from run to run), is what
`dwatt.training.together.TRAINING_BYTES_PER_WEIGHT` must cover (the weight, its gradient,
AdamW's two moments and the step's temporaries, over the stacked copies at once; the three states kept of each copy:
best, few-shot best and last epoch).

    python benchmarks/copy_memory.py

Writes `results/copy_memory.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIB = 2**30
WORDS = ["the", "city", "of", "paris", "visited", "john", "smith", "and", "acme", "corp", "in", "march", "."]
SENTENCE = [
    ("john", "B-PER"),
    ("smith", "I-PER"),
    ("visited", "O"),
    ("paris", "B-LOC"),
    ("and", "O"),
    ("acme", "B-ORG"),
    ("corp", "I-ORG"),
    ("in", "O"),
    ("march", "O"),
    (".", "O"),
]


def memory_module():
    spec = importlib.util.spec_from_file_location("memory_benchmark", HERE / "memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wide_backbone(folder: Path, hidden: int, layers: int) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            intermediate_size=64,
        )
    ).save_pretrained(folder)
    return folder


def conll_folder(folder: Path, sentences: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = "\n".join(f"{word} {tag}" for word, tag in SENTENCE) + "\n"
    for name in ("train.txt", "valid.txt", "test.txt"):
        (folder / name).write_text("-DOCSTART- O\n\n" + "\n".join([text] * sentences))
    return folder


def trained_weights(backbone: Path, fusion: str) -> int:
    from dwatt.training.initial_models import INITIAL_MODELS
    from dwatt.training.together import trained_weights as copy_weights

    return copy_weights(INITIAL_MODELS.build(str(backbone), fusion, 42))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fusions", default="concat,dwatt")
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    import results_files

    from dwatt.training.together import TRAINING_BYTES_PER_WEIGHT

    memory = memory_module()
    work = Path(tempfile.mkdtemp(prefix="dwatt-copy-memory-"))
    backbone = wide_backbone(work / "bert", args.hidden, args.layers)
    data = conll_folder(work / "conll", 40)
    records = []
    for fusion in args.fusions.split(","):
        peaks = {1: [], 3: []}
        for round_, rates in [
            (r, rates) for r in range(args.rounds) for rates in (["1e-3"], ["1e-3", "3e-3", "1e-2"])
        ]:
            out = work / f"{fusion}-{len(rates)}-{round_}"
            command = [
                sys.executable,
                "-m",
                "dwatt.cli",
                "sweep",
                "--fusions",
                fusion,
                "--learning-rates",
                ",".join(rates),
                "--n-shots",
                "2",
                "--epochs",
                "3",
                "--trials",
                "1",
                "--backbones",
                str(backbone),
                "--data-dir",
                str(data),
                "--engine",
                "budgets",
                "--few-shot-dev",
                "--cache-dtype",
                "float32",
                "--threads",
                "1",
                "--quiet",
                "--results",
                str(out / "results.jsonl"),
                "--output-root",
                str(out),
            ]
            record = memory.measured(command, interval=0.005)
            if record["exit_code"]:
                raise SystemExit(f"{fusion}, {len(rates)} copies: {record.get('error')}")
            peaks[len(rates)].append(record["peak_anon_gib"])
        weights = trained_weights(backbone, fusion)
        per_copy = [(three - one) * GIB / 2 for one, three in zip(peaks[1], peaks[3])]
        records.append(
            {
                "fusion": fusion,
                "trained_weights": weights,
                "peak_anon_gib_1_copy": peaks[1],
                "peak_anon_gib_3_copies": peaks[3],
                "bytes_per_weight_by_round": [round(b / weights, 1) for b in per_copy],
                "bytes_per_weight": round(max(per_copy) / weights, 1),
            }
        )
        print(records[-1], file=sys.stderr, flush=True)
    result = {
        "benchmark": "copy_memory",
        "command": results_files.command("copy_memory.py", argv),
        **results_files.cpu_facts(),
        "environment": results_files.environment(),
        "hidden": args.hidden,
        "layers": args.layers,
        "training_bytes_per_weight": TRAINING_BYTES_PER_WEIGHT,
        "records": records,
    }
    gibs = lambda values: ", ".join(f"{value:.3f}" for value in values)
    lines = [
        "| fusion | trained weights a copy | peak anonymous, 1 copy (GiB) | 3 copies (GiB) | bytes a weight, "
        "by round | the largest |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['fusion']} | {r['trained_weights']:,} | {gibs(r['peak_anon_gib_1_copy'])} | "
        f"{gibs(r['peak_anon_gib_3_copies'])} | {', '.join(map(str, r['bytes_per_weight_by_round']))} | "
        f"{r['bytes_per_weight']:.1f} |"
        for r in records
    ]
    markdown = (
        f"# What a stacked copy takes to train\n\n`{result['command']}`; {result['cpu']}. A random BERT "
        f"{args.hidden} wide, {args.layers} layers; `TRAINING_BYTES_PER_WEIGHT` = {TRAINING_BYTES_PER_WEIGHT}.\n\n"
        + "\n".join(lines)
        + "\n"
    )
    results_files.write(args.output, "copy_memory", result, markdown)


if __name__ == "__main__":
    main()
