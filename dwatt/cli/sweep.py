"""`dwatt sweep`: a grid of runs (a preset, options over it) into one resumable results store, or one shard of it."""

from __future__ import annotations

import argparse

from ..experiment.grid import ENGINE_ALIASES, ENGINES, PRESETS, WINDOW_RADIUS, engine_named
from ..run_config import CACHE_DTYPES, SAMPLINGS
from ..tasks import task_named
from .options import (
    add_backbone_dtype_argument,
    add_max_memory_argument,
    add_threads_argument,
    add_through_final_norm_argument,
    add_train_in_parts_argument,
    add_word_readout_argument,
    check_grid_arguments,
    csv_of,
)

GRID_OPTIONS = (
    "fusions",
    "modes",
    "n_shots",
    "epochs",
    "trials",
    "datasets",
    "backbones",
    "sampling",
    "dev_sentences",
    "learning_rates",
    "probe_layers",
    "through_final_norm",
    "word_readouts",
)  # the options that override a preset's `grid` arguments


def register(commands) -> None:
    parser = commands.add_parser("sweep", help="a grid of runs into one resumable results file")
    parser.add_argument("--preset", choices=tuple(PRESETS), default=None)
    parser.add_argument("--fusions", type=csv_of(str), default=None, help="comma-separated, e.g. base,dwatt")
    parser.add_argument("--modes", type=csv_of(str), default=None, help="fe,ft")
    parser.add_argument("--n-shots", type=csv_of(int), default=None, dest="n_shots", help="e.g. 8,16,32,64,128")
    parser.add_argument("--epochs", type=csv_of(int), default=None, help="epoch budgets, e.g. 25,50,75,100")
    parser.add_argument("--trials", type=int, default=None, help="seeds 0..trials-1 (default 5)")
    parser.add_argument(
        "--datasets", "--dataset", type=csv_of(str), default=None, help="conll2003, wikiann:<lang>, wikitext2"
    )
    parser.add_argument(
        "--backbones",
        "--backbone",
        type=csv_of(str),
        default=None,
        help="Hub ids or folders, comma-separated",
    )
    parser.add_argument("--sampling", choices=SAMPLINGS, default=None, help="sentences: exactly --n-shots sentences")
    parser.add_argument("--dev-sentences", type=int, default=None, help="score a fixed random subset of the dev split")
    parser.add_argument(
        "--data-dir", default=None, help="folder of the dataset (WikiAnn: the folder of <lang>/ folders)"
    )
    parser.add_argument("--cache-dtype", default="float16", choices=CACHE_DTYPES)
    add_max_memory_argument(parser)
    add_backbone_dtype_argument(parser)
    add_through_final_norm_argument(parser)
    add_word_readout_argument(parser, several=True)
    parser.add_argument(
        "--engine",
        choices=(*ENGINES, *ENGINE_ALIASES),
        default="auto",
        help="stacked: train the runs of one FE sample together as stacked copies of one head "
        "(budgets, its old name, still works); auto: where a sample has several runs",
    )
    parser.add_argument("--results", default="runs/sweep/results.jsonl")
    parser.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="run shard I of N (0-based, e.g. $SLURM_ARRAY_TASK_ID/4) into its own results.shard-I-of-N.jsonl",
    )
    parser.add_argument("--output-root", default=None, help="per-run folders (default: runs/ beside the results)")
    parser.add_argument(
        "--learning-rates",
        type=csv_of(float),
        default=None,
        dest="learning_rates",
        help="every run at each of these peak learning rates, e.g. 5e-5,3e-4,1e-3,3e-3",
    )
    parser.add_argument(
        "--probe-layers",
        default=None,
        dest="probe_layers",
        metavar="LAYERS",
        help="the Base head once on each of these layers (all: 1..L, every:k, a-b, a list; 0: the embedding "
        "output): a probe",
    )
    parser.add_argument(
        "--window-around-probe",
        nargs="+",
        default=None,
        dest="window_around_probe",
        metavar="STORE",
        help=f"each fusion on the layers within ±{WINDOW_RADIUS} of the one each trial's probe (in these results "
        "files) chose on dev, and with --few-shot-dev on its few-shot dev sample too",
    )
    parser.add_argument(
        "--prefer",
        nargs="+",
        default=(),
        metavar="STORE",
        help="where two --window-around-probe files hold one run with different results (a probe "
        "trained again: float noise), take the row of these (among them) instead of refusing",
    )
    parser.add_argument(
        "--window-alone",
        action="store_true",
        dest="window_alone",
        help="the window's layers alone (--layers only:a-b): no last layer, a backbone cut below the window",
    )
    parser.add_argument(
        "--done-in",
        nargs="+",
        default=(),
        dest="done_in",
        metavar="STORE",
        help="other results files, only read: a run one of them holds (same settings) is not trained "
        "again, e.g. a probe trained again into its own store",
    )
    add_train_in_parts_argument(parser)
    parser.add_argument("--test", action="store_true", help="score every run's best epoch on the test split too")
    parser.add_argument(
        "--few-shot-dev",
        action="store_true",
        help="also choose each run's epoch on a dev sample as large as its training sample (NER, "
        "--engine stacked), and score that choice on test too",
    )
    parser.add_argument(
        "--widen",
        type=int,
        default=0,
        metavar="K",
        help="where dev chooses a method's learning rate (per setting, trial and probe layer) at an edge of the "
        "rates it tried, train the next rate past that edge and choose again, at most K rates past each edge of "
        "--learning-rates (default 0: the grid as asked); after the grid has run, and not with --shard (widen "
        "in one sweep that reads the shards' stores with --done-in)",
    )
    parser.add_argument("--quiet", action="store_true")
    add_threads_argument(parser)
    parser.set_defaults(handler=run)


def widen(specs: list, args: argparse.Namespace, results, overrides: dict, sweep) -> tuple[list, list[dict]]:
    """The grid widened (`sweep_widening.widened_specs`) and the added runs trained by `sweep`, round after round
    until no choice stands at an edge; says what was added and where a limit stopped it."""
    from ..experiment.store import ResultsStore
    from ..experiment.sweep import done_elsewhere
    from ..experiment.sweep_widening import widened_specs

    asked, rows = {spec.learning_rate for spec in specs}, []

    def held(specs: list) -> dict[str, dict]:
        found = done_elsewhere(specs, tuple(args.done_in), overrides, args.engine)
        return found | ResultsStore(results).finished(specs, overrides, args.engine)

    while True:
        added, limits = widened_specs(specs, asked, held(specs), args.widen)
        if not added:
            break
        done = held(added)  # a widened sweep run again holds them already
        to_train = [spec for spec in added if spec.run_id not in done]
        if to_train:
            rates = sorted({spec.learning_rate for spec in to_train})
            print(f"widening: {len(to_train)} runs at {', '.join(f'{r:g}' for r in rates)}, past an edge dev chose")
        specs = specs + added
        rows = sweep(added, build_ensembles=False)  # added rates are part of a probe's grid: no ensembles
    for group, why in limits.items():
        print(f"{group}: {why}; the optimum may lie beyond it")
    return specs, rows


def run(args: argparse.Namespace) -> int:
    from ..experiment.grid import grid, parse_shard, shard
    from ..experiment.store import ResultsStore, shard_results_path
    from ..experiment.sweep import held_elsewhere, run_sweep, runs_done

    check_grid_arguments(args)
    args.engine = engine_named(args.engine)  # its old name, in older scripts, is the same engine
    settings = dict(PRESETS[args.preset]) if args.preset else {}
    settings |= {key: getattr(args, key) for key in GRID_OPTIONS if getattr(args, key) is not None}
    if "fusions" not in settings:
        raise ValueError("sweep: give --preset or --fusions")
    if settings.get("probe_layers") and "base" not in settings["fusions"]:
        raise ValueError("--probe-layers trains a Base head on each layer: add base to --fusions")
    task = task_named(settings.get("task", "ner"))
    if args.data_dir and task.folder_is_dataset and args.datasets is None:  # the user's own files: their folder's name
        settings["datasets"] = (task.dataset_for(None, args.data_dir),)
    specs = grid(**settings, data_dir=args.data_dir)
    if args.window_around_probe:  # the second stage of a two-stage grid: its windows follow the probe's choices
        from ..experiment.selection import around_chosen_layers
        from ..experiment.summaries import load_rows, runs_frame

        specs = around_chosen_layers(
            specs,
            runs_frame(load_rows(args.window_around_probe, args.prefer)),
            args.few_shot_dev,
            alone=args.window_alone,
        )
    elif args.window_alone or args.prefer:
        raise ValueError(
            f"{'--window-alone' if args.window_alone else '--prefer'} shapes the windows of "
            "--window-around-probe: give that too"
        )
    results = args.results
    if args.widen < 0:
        raise ValueError(f"--widen {args.widen}: give the most rates to add past each edge (0: none)")
    if args.widen and args.shard:
        raise ValueError(
            "--widen with --shard: a shard holds part of a method's rates; widen once the shards are done, in one "
            "sweep that reads their stores (--done-in)"
        )
    if args.shard:
        index, count = parse_shard(args.shard)
        whole = len(specs)
        specs = shard(specs, index, count)
        results = shard_results_path(args.results, index, count)
        print(f"shard {index}/{count}: {len(specs)} of the grid's {whole} runs, into {results}")
    overrides = {
        "cache_dtype": args.cache_dtype,
        "backbone_dtype": args.backbone_dtype,
        "max_memory": args.max_memory,
        "device_map": args.device_map,
        "cache_on_disk": args.cache_on_disk,
        **({"evaluate_test": True} if args.test else {}),
        **({"few_shot_dev": True} if args.few_shot_dev else {}),
    }

    def sweep(specs: list, build_ensembles: bool = True) -> list[dict]:
        from ..training import EXECUTION  # here, so that a sweep refused for its options imports no torch

        return run_sweep(
            specs,
            results,
            args.output_root,
            execution=EXECUTION,
            progress=not args.quiet,
            engine=args.engine,
            done_in=tuple(args.done_in),
            train_in_parts=args.train_in_parts,
            build_ensembles=build_ensembles,
            **overrides,
        )

    rows = sweep(specs)
    if args.widen:
        specs, widened = widen(specs, args, results, overrides, sweep)
        rows = widened or rows
    finished, elsewhere = runs_done(specs, results, tuple(args.done_in), overrides, args.engine)
    held = held_elsewhere(ResultsStore(results), [spec for spec in specs if spec.run_id not in finished | elsewhere])
    print(
        f"{len(finished) + len(elsewhere)} of the grid's {len(specs)} runs done"
        + (f" ({len(elsewhere)} of them in --done-in stores)" if args.done_in else "")
        + (f", {held} still training in other sweeps on this store" if held else "")
        + f"; {len(rows)} rows in {results}"
    )
    return 0
