"""`dwatt rank-layers`: every layer of a backbone ranked by label-free measures, from one pass over a data set's
texts with its labels ignored (`dwatt.layer_ranking`); prints each measure by layer and each one's pick, writes them
as JSON and draws them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tqdm.auto import tqdm

from .options import (
    add_backbone_and_task_arguments,
    add_backbone_dtype_argument,
    add_budget_argument,
    add_column_arguments,
    add_threads_argument,
    columns_of,
)


def register(commands) -> None:
    parser = commands.add_parser(
        "rank-layers",
        help="rank a backbone's layers from unlabelled text in one pass (label-free measures; no head trained)",
    )
    add_backbone_and_task_arguments(parser, "whose texts: ner (sentences of words) or cls (texts or text pairs)")
    parser.add_argument("--dataset", default=None, help="as for dwatt probe (default: the task's)")
    parser.add_argument("--data-dir", default=None, help="folder of the dataset's files (its train split is read)")
    add_column_arguments(parser)
    parser.add_argument(
        "--texts", type=int, default=256, help="texts of the train split drawn for the pass (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="which texts are drawn (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help="texts per backbone batch (default: %(default)s)")
    add_backbone_dtype_argument(parser)
    add_budget_argument(parser, "refused up front where the backbone, one batch and the pooled states would not fit")
    parser.add_argument(
        "--output",
        default="runs/rank-layers",
        help="where rank_layers.json and rank_layers.png go (default: %(default)s)",
    )
    parser.add_argument("--quiet", action="store_true")
    add_threads_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.texts < 3:
        raise ValueError(f"--texts {args.texts}: the measures across texts need at least 3")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size}: expected at least 1")
    from ..run_config import check_backbone_folder

    check_backbone_folder(args.backbone)
    from ..layer_ranking import draw_ranking, measures_table, rank_layers

    with tqdm(total=args.texts, desc="backbone pass", unit="text", disable=args.quiet, leave=False) as bar:
        ranking = rank_layers(
            args.backbone,
            task=args.task,
            dataset=args.dataset,
            data_dir=args.data_dir,
            texts=args.texts,
            seed=args.seed,
            batch_size=args.batch_size,
            backbone_dtype=args.backbone_dtype,
            max_memory=args.max_memory,
            columns=columns_of(args),
            progress=lambda done: bar.update(done - bar.n),
        )
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "rank_layers.json").write_text(json.dumps(ranking.as_json(), indent=1) + "\n")
    figure = draw_ranking(ranking, output / "rank_layers.png")
    peak = f"; peak memory {ranking.peak_memory_bytes / 2**30:.2f} GiB" if ranking.peak_memory_bytes else ""
    print(
        "\n".join(
            [
                f"{ranking.backbone} on {ranking.dataset}: {ranking.texts} texts ({ranking.tokens} tokens), no labels",
                *measures_table(ranking),
                f"the pass and the measures took {ranking.seconds:.0f} s{peak}",
                f"values in {output / 'rank_layers.json'}" + (f"; figure {figure}" if figure else ""),
                "how far each pick agrees with a labelled probe: docs/guides/which-layer.md",
            ]
        )
    )
    return 0
