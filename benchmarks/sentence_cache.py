"""What the pooled sentence cache of text classification saves: memory and per-epoch time against the per-token cache.

For a fusion linear in the layers (Concat here; Base and ScalarMix alike) with mean pooling, the FE cache can hold
one mean vector per layer per sentence instead of every token's layers (`dwatt.training.cls.cache_pooling`). On the
AG News evaluation split of the vendored offline copy (2000 title + description pairs) with MiniLM, this builds both
caches, checks that the model gives the same logits on each (fp32), and times one evaluation pass over each
(what every epoch costs), median of interleaved rounds with the order rotated and the pooled epoch timed twice as the
noise control. Writes `results/sentence_cache_cpu.json` and `.md`.

    python benchmarks/sentence_cache.py                    # MiniLM, Concat, mean pooling, 2000 sentences, 7 rounds
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from results_files import command, environment, interleaved_timings, write
from torch.utils.data import DataLoader

from dwatt import RobertaDWAttForSequenceClassification
from dwatt.data import load_tokenizer
from dwatt.data.classification import load_classification_dataset, tokenize_texts
from dwatt.features.build import build_feature_cache
from dwatt.features.cache import FeatureCollator
from dwatt.portable import backbone_folder, portable_path

HERE = Path(__file__).resolve().parent
CONTROL = "pooled"  # timed twice a round: the ratio of its two copies is the run's noise


def evaluation_pass(model, cache, batch_size: int = 32) -> torch.Tensor:
    logits = [
        model(**batch).logits for batch in DataLoader(cache, batch_size=batch_size, collate_fn=FeatureCollator())
    ]
    return torch.cat(logits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default=None, help="default: MiniLM from the PyPI package")
    parser.add_argument("--fusion", default="concat", choices=("base", "concat", "scalar_mix"))
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    backbone = backbone_folder(args.backbone)
    torch.set_grad_enabled(False)
    data = load_classification_dataset("ag_news")["validation"].select(range(args.sentences))
    tokens = tokenize_texts(data, load_tokenizer(backbone))
    by_length = sorted(range(len(tokens)), key=lambda i: len(tokens[i]["input_ids"]))
    tokens = tokens.select(by_length)  # as the runs do: batches of similar length pad little
    torch.manual_seed(0)
    model = RobertaDWAttForSequenceClassification.from_backbone(
        backbone, fusion=args.fusion, num_labels=4, pooling="mean"
    )
    model.eval()
    caches, build_seconds = {}, {}
    for name, pooled in (("per-token", None), ("pooled", "mean")):
        started = time.perf_counter()
        caches[name] = build_feature_cache(model, tokens, dtype=torch.float32, progress=False, pooled=pooled)
        build_seconds[name] = time.perf_counter() - started
    difference = (
        (evaluation_pass(model, caches["per-token"]) - evaluation_pass(model, caches["pooled"])).abs().max().item()
    )
    assert difference <= 1e-5, difference
    passes = {name: (lambda cache=cache: evaluation_pass(model, cache)) for name, cache in caches.items()}
    timings = interleaved_timings(passes, args.rounds, CONTROL, warmup=1)
    rows = [
        {
            "cache": name,
            "rows": int(cache.features.shape[0]),
            "megabytes": round(cache.nbytes / 2**20, 2),
            "build_seconds": round(build_seconds[name], 2),
            "epoch_ms": round(1000 * timings["median"][name], 1),
        }
        for name, cache in caches.items()
    ]
    saving = {
        "memory": round(rows[0]["megabytes"] / rows[1]["megabytes"], 1),
        "epoch_time": round(rows[0]["epoch_ms"] / rows[1]["epoch_ms"], 1),
    }
    result = {
        "backbone": portable_path(backbone),
        "fusion": args.fusion,
        "pooling": "mean",
        "sentences": args.sentences,
        "rounds": args.rounds,
        "max_logit_difference": difference,
        "rows": rows,
        "saving": saving,
        "noise_control": round(timings["noise_control"], 3),
        "environment": environment(torch.device("cpu")),
        "command": command("sentence_cache.py", argv),
    }
    lines = [
        f"# Sentence feature cache, pooled against per-token ({result['environment']['device_name']})\n",
        f"{result['backbone']}, {args.fusion} with mean pooling, the first {args.sentences} sentences of the AG News "
        f"evaluation split (vendored offline split), fp32 cache. An epoch: one pass of the model over the cache "
        f"(batch 32), median of {args.rounds} interleaved rounds (the order rotated every round; the {CONTROL} epoch "
        f"timed twice a round, the noise control: {result['noise_control']:.3f}). Build s: each cache built once. Largest logit difference between the two: "
        f"{difference:.1e}. Command: `{result['command']}`\n",
        "| cache | rows (tokens or sentences) | MiB | build s | epoch ms |",
        "|---|---|---|---|---|",
        *(f"| {r['cache']} | {r['rows']} | {r['megabytes']} | {r['build_seconds']} | {r['epoch_ms']} |" for r in rows),
        f"\nThe pooled cache is {saving['memory']}x smaller and an epoch over it {saving['epoch_time']}x faster.",
    ]
    write(args.output, "sentence_cache_cpu", result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
