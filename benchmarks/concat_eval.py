"""The dev pass of a Concat head trained with the stacked-heads engine: folded (`dwatt.folding.FoldedConcat`,
the classifier times the projection: one layers x hidden -> labels map a token) against running the model (the
layers x hidden -> hidden projection, then the classifier), on a real backbone's feature cache, in one process.

One copy of a Concat token classifier (FE, the grid's settings: N-shot CoNLL-03 sample, the dev sentences scored after
each epoch) is trained from the same start both ways, in interleaved rounds with the folded way timed twice a round
as the noise control (`results_files.interleaved_timings`). Recorded: the engine's own split of each run into
training and dev-pass seconds, the dev curves of both ways, and, for the folded run's last weights, how many of
the dev set's labelled positions the two ways tag differently and the largest logit difference.

    python benchmarks/concat_eval.py --backbone models/Qwen2.5-Coder-1.5B-Instruct-q4 --feature-cache CACHE_FOLDER
        # CACHE_FOLDER: a sweep's `.feature-cache` holding the backbone's dev-set cache, else it is built (an hour
        # on 2 CPU cores for this 1.5B backbone over 1000 sentences)

Writes `results/concat_eval_<backbone>.json` and `.md` next to this file (or into --output).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path
from unittest import mock

import results_files
import torch

from dwatt.defaults import default_backbone_path
from dwatt.folding import FoldedConcat
from dwatt.portable import backbone_label, portable_path
from dwatt.stacked_heads import HeadCopy, train_heads
from dwatt.training import RunConfig
from dwatt.training.probe_ensembles import predict_features
from dwatt.training.together import procedures

HERE = Path(__file__).resolve().parent
WAYS = ("folded", "model")


def model_way():
    """The dev pass as the model runs it: `FoldedConcat` declines every batch."""
    return mock.patch.object(FoldedConcat, "fits", staticmethod(lambda model, batch: False))


def agreement(parts, state: dict) -> dict:
    """Tags and logits of the two ways on the dev set, for the head with `state`: at the labelled positions."""
    parts.model.load_state_dict(state, strict=False)
    folded, labels = predict_features(parts.model, parts.dev_set, parts.collator)
    with model_way():
        ran, _ = predict_features(parts.model, parts.dev_set, parts.collator)
    scored = torch.cat([batch.flatten() for batch in labels]) != -100
    flat = lambda batches: torch.cat([batch.flatten(0, -2) for batch in batches])[scored]
    folded, ran = flat(folded), flat(ran)
    return {
        "labelled_positions": int(scored.sum()),
        "tags_differing": int((folded.argmax(-1) != ran.argmax(-1)).sum()),
        "max_abs_logit_difference": float((folded - ran).abs().max()),
        "max_abs_logit": float(ran.abs().max()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default=str(default_backbone_path()))
    parser.add_argument(
        "--feature-cache", default=None, help="a folder of on-disk feature caches to read (and add to)"
    )
    parser.add_argument("--n-shot", type=int, default=32)
    parser.add_argument("--dev-sentences", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    scratch = tempfile.TemporaryDirectory()
    config = RunConfig(
        backbone=args.backbone,
        fusion="concat",
        mode="fe",
        n_shot=args.n_shot,
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        dev_sentences=args.dev_sentences,
        cache_dtype="float16",
        cache_on_disk=True,
        feature_cache_dir=args.feature_cache or str(Path(scratch.name) / "cache"),
        output_dir=str(Path(scratch.name) / "run"),
        progress=False,
        save_model=False,
    )
    parts = procedures(config.task).prepare_together(config, None)
    runs = {way: [] for way in WAYS}

    def train(way: str):
        with model_way() if way == "model" else contextlib.nullcontext():
            outcomes, timings = train_heads(
                parts.model,
                parts.train_set,
                parts.dev_set,
                parts.collator,
                [HeadCopy(args.epochs, args.learning_rate)],
                parts.dev_metrics.score_ids,
                seed=0,
                batch_size=config.batch_size,
            )
        runs[way].append((outcomes[0], timings))

    timed = results_files.interleaved_timings(
        {way: (lambda way=way: train(way)) for way in WAYS}, args.rounds, control="folded"
    )
    per_way = {}
    for way in WAYS:
        outcomes = [outcome for outcome, _ in runs[way]]
        per_way[way] = {
            "dev_pass_seconds_per_epoch": [timings["eval_seconds"] / args.epochs for _, timings in runs[way]],
            "train_seconds_per_epoch": [timings["train_seconds"] / args.epochs for _, timings in runs[way]],
            "dev_f1_curve": [[round(point["f1"], 6) for point in outcome.curve] for outcome in outcomes],
            "wall_seconds": timed["seconds"][way],
        }
    median = lambda values: sorted(values)[len(values) // 2]
    speedup = median(per_way["model"]["dev_pass_seconds_per_epoch"]) / median(
        per_way["folded"]["dev_pass_seconds_per_epoch"]
    )
    same = runs["folded"][0][0].final_state
    result = {
        "benchmark": "concat_eval",
        "command": results_files.command("concat_eval.py", argv),
        "backbone": portable_path(args.backbone),
        "backbone_layers": parts.model.config.encoder_config.num_hidden_layers,
        "hidden_size": parts.model.config.encoder_config.hidden_size,
        "labels": parts.model.config.num_labels,
        "dev_sentences": len(parts.dev_set),
        "train_sentences": len(parts.train_set),
        "epochs": args.epochs,
        "learning_rate": args.learning_rate,
        "rounds": args.rounds,
        "environment": results_files.environment() | results_files.cpu_facts(),
        "noise_control": timed["noise_control"],
        "ways": per_way,
        "dev_pass_speedup": speedup,
        "dev_curves_equal": per_way["folded"]["dev_f1_curve"][0] == per_way["model"]["dev_f1_curve"][0],
        "agreement_at_last_epoch": agreement(parts, same),
    }
    name = backbone_label(args.backbone)
    agree = result["agreement_at_last_epoch"]
    markdown = "\n".join(
        [
            f"# Concat's dev pass, folded against the model: {name}",
            "",
            f"`{result['command']}`",
            "",
            f"{result['environment']['cpu']}, {args.threads} thread(s); {result['dev_sentences']} dev sentences, "
            f"{result['train_sentences']} training sentences, {args.epochs} epochs a run, {args.rounds} interleaved rounds; "
            f"noise control (the folded run timed twice a round) {timed['noise_control']:.2f}.",
            "",
            "| way | dev pass, s/epoch (per round) | training, s/epoch (per round) | dev F1 after each epoch (round 1) |",
            "|---|---|---|---|",
            *[
                f"| {way} | {', '.join(f'{s:.1f}' for s in per_way[way]['dev_pass_seconds_per_epoch'])} | "
                f"{', '.join(f'{s:.1f}' for s in per_way[way]['train_seconds_per_epoch'])} | "
                f"{', '.join(f'{100 * f:.2f}' for f in per_way[way]['dev_f1_curve'][0])} |"
                for way in WAYS
            ],
            "",
            f"The folded dev pass is {speedup:.1f}x as fast (medians). At the last epoch's weights the two ways tag "
            f"{agree['tags_differing']} of {agree['labelled_positions']} labelled dev positions differently; the largest "
            f"logit difference is {agree['max_abs_logit_difference']:.2e} (largest logit {agree['max_abs_logit']:.1f}).",
            "",
        ]
    )
    results_files.write(args.output, f"concat_eval_{name}", result, markdown)


if __name__ == "__main__":
    main()
