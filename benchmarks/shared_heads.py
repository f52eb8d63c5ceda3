"""k DWAtt heads served as k separate models against one shared backbone pass (`dwatt.serving.shared_heads.SharedBackboneHeads`).

For k = 1, 2, 4, 8 head-only DWAtt checkpoints on one backbone (MiniLM by default), one batch of real sentences
(the first `--batch` of the vendored CoNLL-03 dev split): the latency of running the k checkpoints loaded alone, one
after the other, against one `SharedBackboneHeads` forward; outputs are checked equal in the same run. For k = 4 it
also times the backbone alone and each head alone on the backbone's hidden states, whose sum is what the shared pass
should cost. Settings are timed in interleaved rounds, the order rotated every round, with one setting timed twice as
the noise control; the median is reported. Writes
`results/shared_heads_<device>.json` and `.md` next to this file.

    python benchmarks/shared_heads.py                      # MiniLM, batch 32, 15 rounds
    python benchmarks/shared_heads.py --backbone PATH --rounds 30
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from results_files import command, environment, interleaved_timings, write

from dwatt import DWAttForTokenClassification
from dwatt.data import CONLL_LABELS, load_conll2003, load_tokenizer
from dwatt.portable import backbone_folder, portable_path
from dwatt.serving.shared_heads import SharedBackboneHeads

HERE = Path(__file__).resolve().parent
HEAD_COUNTS = (1, 2, 4, 8)
CONTROL = "separate k=1"  # timed twice a round: the ratio of its two copies is the run's noise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default=None, help="default: MiniLM from the PyPI package")
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    backbone = backbone_folder(args.backbone)
    torch.set_grad_enabled(False)

    tokenizer = load_tokenizer(backbone)
    sentences = load_conll2003()["validation"]["tokens"][: args.batch]
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    batch = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}

    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for seed in range(max(HEAD_COUNTS)):
            torch.manual_seed(seed)
            model = DWAttForTokenClassification.from_backbone(backbone, fusion="dwatt", num_labels=len(CONLL_LABELS))
            path = Path(folder) / f"head{seed}"
            model.save_pretrained(path, heads_only=True)
            paths.append(str(path))
        separate_models = [DWAttForTokenClassification.from_pretrained(p).eval() for p in paths]
        shared = {k: SharedBackboneHeads.from_pretrained(paths[:k]) for k in HEAD_COUNTS}

    # Outputs equal, in this run.
    max_difference = 0.0
    for k in HEAD_COUNTS:
        together = shared[k](**batch)
        for path, model in zip(shared[k].heads, separate_models[:k]):
            alone = model(**batch).logits
            max_difference = max(max_difference, (together[path].logits - alone).abs().max().item())
    assert max_difference <= 1e-5, max_difference

    four = shared[4]
    hidden = four.runner.run_backbone(**batch)
    heads_alone = list(four.heads.values())
    stacked = torch.stack([hidden[i] for i in heads_alone[0].dwatt.fused_layer_indices], dim=1)
    settings = {f"separate k={k}": (lambda k=k: [m(**batch) for m in separate_models[:k]]) for k in HEAD_COUNTS}
    settings |= {f"shared k={k}": (lambda k=k: shared[k](**batch)) for k in HEAD_COUNTS}
    settings["backbone alone"] = lambda: four.runner.run_backbone(**batch)
    for index, head in enumerate(heads_alone):
        settings[f"head {index} alone"] = lambda head=head: head(
            backbone_hidden_states=stacked, attention_mask=batch["attention_mask"]
        )
    timings = interleaved_timings(settings, args.rounds, CONTROL, warmup=args.warmup)
    median_ms = {name: 1000 * seconds for name, seconds in timings["median"].items()}

    rows = []
    for k in HEAD_COUNTS:
        separate, together = median_ms[f"separate k={k}"], median_ms[f"shared k={k}"]
        rows.append(
            {
                "heads": k,
                "separate_ms": round(separate, 2),
                "shared_ms": round(together, 2),
                "speedup": round(separate / together, 3),
            }
        )
    parts_ms = median_ms["backbone alone"] + sum(median_ms[f"head {i} alone"] for i in range(4))
    result = {
        "command": command("shared_heads.py", argv),
        "environment": environment(torch.device("cpu")),
        "backbone": portable_path(backbone),
        "batch": {"sentences": args.batch, "tokens_per_sentence_padded": int(batch["input_ids"].shape[1])},
        "rounds": args.rounds,
        "noise_control": round(timings["noise_control"], 3),
        "max_abs_difference_to_separate_models": max_difference,
        "rows": rows,
        "k4_parts_ms": {
            "backbone": round(median_ms["backbone alone"], 2),
            "heads": [round(median_ms[f"head {i} alone"], 2) for i in range(4)],
            "sum": round(parts_ms, 2),
        },
        "k4_shared_over_parts": round(median_ms["shared k=4"] / parts_ms, 3),
        "median_ms": {name: round(value, 3) for name, value in median_ms.items()},
    }
    lines = [
        f"# Shared heads against separate models ({result['environment']['device_name']})",
        "",
        f"`{result['command']}`: {result['backbone']}, DWAtt heads, one batch of {args.batch} CoNLL-03 dev sentences "
        f"(padded to {result['batch']['tokens_per_sentence_padded']} tokens), fp32, median of {args.rounds} interleaved rounds "
        f"(the order rotated every round; `{CONTROL}` timed twice a round, the noise control: "
        f"{result['noise_control']:.3f}); outputs equal to the separate models within {max_difference:.1e}.",
        "",
        "| heads k | k separate models, ms | one shared pass, ms | speed-up |",
        "|---|---|---|---|",
        *[f"| {r['heads']} | {r['separate_ms']:.1f} | {r['shared_ms']:.1f} | {r['speedup']:.2f}x |" for r in rows],
        "",
        f"At k = 4 the shared pass takes {median_ms['shared k=4']:.1f} ms; the backbone alone "
        f"{median_ms['backbone alone']:.1f} ms plus the four heads alone "
        f"({', '.join(f'{ms:.1f}' for ms in result['k4_parts_ms']['heads'])} ms) sum to {parts_ms:.1f} ms: "
        f"ratio {result['k4_shared_over_parts']:.3f}.",
        "",
    ]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    write(HERE / "results", f"shared_heads_{device}", result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
