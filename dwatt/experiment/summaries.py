"""Results files read into one table of runs, and its summaries over trials: what `report.py` writes as tables and
`figures.py` draws (both import this module; neither imports the other's callers).

Rows come from results stores (`results.jsonl` of `dwatt sweep`) and single-run `results.json` files; a run held twice
counts once. Scores are means over trials (seeds) with a 95% confidence interval from Student's t distribution.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from specs_dwatt import FUSION_SPECS

from ..atomic import read_text
from ..data.files import json_objects
from ..portable import backbone_label
from ..run_config import NOT_DEFINING, RunConfig
from ..schema import ENSEMBLES_FIELD
from ..tasks import TASKS

MODE_NAMES = {"fe": "FE", "lora": "LoRA", "ft": "FT"}  # in the order of how much of the backbone trains
# The fusion a head on one layer is (its runs on each layer make a probe), from the fusions' own declarations.
PROBE_FUSION = next(name for name, spec in FUSION_SPECS.items() if spec.passes_layer_through)
# Resource tiers of WikiAnn languages by the size of their training split (Rahimi et al. 2019 splits): 20k, 5-10k,
# 1k and 100 sentences, a proxy for the size of the language's Wikipedia.
TIERS = ((20_000, "high"), (5_000, "medium"), (1_000, "low"), (0, "very low"))
# A setting is what a mean is taken over trials of; runs scored on different dev subsets never pool.
SETTING = ["task", "dataset", "backbone", "mode", "fusion", "n_shot", "epochs", "num_dev_sentences", "pooling"]


def fusion_names() -> dict[str, str]:
    """Each fusion's name as tables and figures show it (`FusionSpec.display_name`), in the order of its `--fusion`
    name (tables' column order)."""
    return {name: FUSION_SPECS[name].display_name for name in sorted(FUSION_SPECS)}


def token_weighted() -> tuple[str, ...]:
    """The fusions that weigh the layers anew for each token (whose rows' layer weights the figures draw)."""
    return tuple(name for name, spec in FUSION_SPECS.items() if spec.weighs_layers and not spec.linear_in_layers)


def tier(train_pool_size: int) -> str:
    return next(name for floor, name in TIERS if train_pool_size >= floor)


# Fields of a results.json that vary from one execution to the next (timing) and are kept out of comparisons.
TIMING_FIELDS = (
    "wall_seconds",
    "cpu_seconds",
    "cache_seconds",
    "train_seconds",
    "train_examples_per_second",
    "environment",
)
# What says which runs trained beside a run on the stacked engine, which changes none of its numbers.
GROUPING_FIELDS = ("trained_together", "trained_together_runs")
PREFERRED_OVER = "_preferred_over"  # on a row kept from a preferred store: where the row it was kept over came from
# What a results store adds to a run's results.json (its row's id and spec); `_path` and `_line` are where the row
# was read (no line for a run's results.json).
STORE_FIELDS = ("run_id", "spec", "backbone_sha256", "data_sha256", "_path", "_line", PREFERRED_OVER)


def row_place(row: dict) -> str:
    """Where a row was read: `store:line`, or a results.json's path."""
    return f"{row['_path']}:{row['_line']}" if row.get("_line") is not None else str(row["_path"])


def preference(prefer: Sequence[str | Path], paths: Sequence[str | Path]):
    """Whether a row is preferred (`--prefer`): a results file among `paths`, whose every row is, or one row of it,
    `store:line` (two rows of one run in one store). Anything else is refused, naming it."""
    read = {Path(p).resolve() for p in paths}
    files, lines = set(), set()
    for entry in map(str, prefer):
        path, _, line = entry.rpartition(":")
        if Path(entry).resolve() in read:
            files.add(Path(entry).resolve())
        elif path and line.isdigit() and Path(path).resolve() in read:
            lines.add((Path(path).resolve(), int(line)))
        else:
            raise ValueError(
                f"--prefer {entry}: not among the results files read (a file, or a row of one as FILE:LINE)"
            )
    return lambda row: (
        Path(row["_path"]).resolve() in files or (Path(row["_path"]).resolve(), row.get("_line")) in lines
    )


def comparable(row: dict) -> dict:
    """A row without its timing fields: what two executions of the same run must agree on."""
    return {key: value for key, value in row.items() if key not in TIMING_FIELDS}


def run_identity(row: dict) -> str:
    """The run a row is the result of: its configuration, without what does not change results, the fields its code
    did not know yet at today's defaults (as the store reads them, `store.run_settings`): a run trained again by
    newer code is the same run."""
    config = {key: value for key, value in (_default_config() | row["config"]).items() if key not in NOT_DEFINING}
    return json.dumps([config, row.get("seed")], sort_keys=True, default=str)


@functools.cache
def _default_config() -> dict:
    return asdict(RunConfig())


def without_duplicates(rows: list[dict], prefer: Sequence[str | Path] = ()) -> list[dict]:
    """
    Each run once. The shards of a sweep (or a store and a run's own results.json) may hold the same run twice:
    identical results (timings aside) are kept once; different results for one run are refused, naming both
    places, since a report cannot tell which to believe, unless the caller says: where exactly one of the two comes
    from a store in `prefer` (a run trained again on purpose, e.g. a probe for its ensembles, its first run's float
    noise aside), that row is kept, marked `PREFERRED_OVER`. A run trained again by newer code (a probe trained again
    for its ensembles, `ENSEMBLES_FIELD`) may hold more: where the two agree on every field both hold, which runs it
    trained beside aside (`GROUPING_FIELDS`: a copy ends as it would alone), the row that holds everything the
    other does is kept.
    """
    is_preferred = preference(prefer, sorted({row["_path"] for row in rows}))
    kept: dict[str, dict] = {}
    for row in rows:
        identity = run_identity(row)
        if identity not in kept:
            kept[identity] = row
            continue
        first = kept[identity]
        mine, theirs = (
            {k: v for k, v in comparable(r).items() if k not in (*STORE_FIELDS, "config", *GROUPING_FIELDS)}
            for r in (row, first)
        )
        if mine.keys() != theirs.keys() and (mine.keys() >= theirs.keys() or theirs.keys() >= mine.keys()):
            both = mine.keys() & theirs.keys()
            if all(mine[k] == theirs[k] for k in both):
                if mine.keys() > theirs.keys():
                    kept[identity] = row
                continue
        if mine != theirs and is_preferred(row) != is_preferred(first):
            kept[identity] = (row if is_preferred(row) else first) | {
                PREFERRED_OVER: (first if is_preferred(row) else row)["_path"]
            }
            continue
        if mine != theirs:
            # the fields both hold and disagree on; else what only one holds
            differing = sorted(k for k in mine.keys() & theirs.keys() if mine[k] != theirs[k]) or sorted(
                mine.keys() ^ theirs.keys()
            )
            name = row.get("run_id") or first.get("run_id") or Path(row["config"].get("output_dir", "?")).name
            raise ValueError(
                f"run {name} appears twice with different results ({', '.join(differing[:5])}): at {row_place(first)} "
                f"and at {row_place(row)}; keep one of them, or name the one to take with --prefer "
                f"{row_place(first) if first.get('_line') is not None else first['_path']}"
            )
    return list(kept.values())


# What every row's config must say for the report to place it.
REQUIRED_CONFIG = ("backbone", "mode", "fusion", "epochs")


def whole_row(path: Path) -> dict:
    """A run's `results.json`: one JSON object."""
    try:
        row = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not a JSON results row ({error.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(f"{path}: a results row is a JSON object, got {type(row).__name__}")
    return row


def load_rows(paths: list[str | Path], prefer: Sequence[str | Path] = ()) -> list[dict]:
    """Rows of results stores (`.jsonl`, one run per line) and `results.json` files, each with its source; a run
    held by two of them counts once (`without_duplicates`, the row of a store in `prefer` where they differ). A probe's
    controls trained on shuffled labels (`RunConfig.shuffle_labels`) are left out: they are no method's runs."""
    preference(prefer, paths)  # refused before anything is read
    rows = []
    for path in map(Path, paths):
        if not path.is_file():
            raise ValueError(f"{path}: not a readable results file (no such file)")
        for number, row in (
            json_objects(path, "results row", cut_off_tail=True)
            if path.suffix == ".jsonl"
            else [(None, whole_row(path))]
        ):
            where = f"{path}:{number}" if number is not None else str(path)
            if not isinstance(row.get("config"), dict):
                raise ValueError(f"{where}: a results row needs a 'config' (is this a dwatt results file?)")
            missing = [key for key in REQUIRED_CONFIG if key not in row["config"]]
            if missing:
                raise ValueError(f"{where}: the row's config lacks {', '.join(map(repr, missing))}")
            if not row["config"].get("shuffle_labels"):  # a probe's control, no method's run
                rows.append(row | {"_path": str(path), "_line": number})
    return without_duplicates(rows, prefer)


def read_layer(row: dict) -> float:
    """The backbone layer (1..L) a Base head reads (`--layers k`, else the last), NaN for the other fusions or where
    the row does not say how deep its backbone is."""
    config = row["config"]
    if config.get("fusion") != PROBE_FUSION:
        return math.nan
    from configuration_dwatt import single_layer  # here: importing the tables imports neither torch nor transformers

    layer = single_layer(config.get("layers"))
    return float(layer) if layer is not None else float(row.get("backbone_layers", math.nan))


def few_shot_dev_columns(chosen: dict | None) -> dict:
    """A run's choice on its few-shot dev sample as columns: its dev score there and the test score of that choice
    (`sample_<score>`, `sample_test_<score>` for each few-shot task's score), the sample's size (NaN where the run
    made no such choice)."""
    chosen = chosen or {}
    columns = {}
    for task in TASKS.values():
        if task.few_shot:
            score = task.score
            columns[f"sample_{score}"] = 100 * chosen[f"best_{score}"] if f"best_{score}" in chosen else math.nan
            tested = chosen.get("test_scores", {})
            columns[f"sample_test_{score}"] = (
                100 * tested[score] if f"best_{score}" in chosen and score in tested else math.nan
            )
    columns["sample_sentences"] = next(
        (chosen[task.items] for task in TASKS.values() if task.items in chosen), math.nan
    )
    return columns


def last_epoch_columns(last: dict | None) -> dict:
    """The test score of a run's weights at the end of its budget (`no_dev_test_<score>`, for each few-shot task's
    score; NaN where the run did not keep them): what a user with no dev set to choose an epoch on gets."""
    tested = (last or {}).get("test_scores", {})
    return {
        f"no_dev_test_{task.score}": 100 * tested[task.score] if task.score in tested else math.nan
        for task in TASKS.values()
        if task.few_shot
    }


def ensemble_fusion(size: int) -> str:
    """The `fusion` column of a probe ensemble's rows (`ensemble_records`): not a fusion of the registry, a method."""
    return f"probe_top{size}"


def ensemble_records(run: dict, row: dict) -> list[dict]:
    """A probe group's ensembles (`dwatt.training.probe_ensembles`, held by the group's first run) as runs of their
    own, in the sample of `run` (that run's line): its dev and test scores those of the average of its members,
    which read the layers in `members` (`sample_members`: the layers chosen on the few-shot dev sample), each at the
    learning rate its dev score chose."""
    records = []
    for entry in row.get(ENSEMBLES_FIELD) or []:
        record = {key: math.nan for key in ("f1", "accuracy", "macro_f1", "final_f1", "test_f1", "test_accuracy")}
        record["ensemble_size"] = entry["size"]
        for task in TASKS.values():
            if task.few_shot and f"best_{task.score}" in entry:
                record[task.score] = 100 * entry[f"best_{task.score}"]
                record[f"test_{task.score}"] = 100 * entry["test_scores"][task.score]
        sample = entry.get("few_shot_dev")
        records.append(
            run
            | record
            | {
                "fusion": ensemble_fusion(entry["size"]),
                "learning_rate": math.nan,
                "layer": math.nan,
                "best_epoch": None,
                "dev_curve": [],
                "layer_weights": None,
                "wall_seconds": math.nan,
                "members": ",".join(str(m["layer"]) for m in entry["members"]),
                "ensemble_group_runs": row.get("trained_together_runs") or 1,
                "sample_members": ",".join(str(m["layer"]) for m in sample["members"]) if sample else None,
                **few_shot_dev_columns(sample),
                **last_epoch_columns(None),
            }
        )
    return records


def runs_frame(rows: list[dict]) -> pd.DataFrame:
    """One line per run (and per probe ensemble: `ensemble_records`): the setting, the trial, and its scores (F1 x
    100, perplexities)."""
    records = []
    for row in rows:
        config = row["config"]
        task = row.get("task", config.get("task", RunConfig.task))  # rows from before tasks: the default
        dataset = TASKS[task].dataset_for(config.get("dataset"), config.get("data_dir"))
        records.append(
            {
                "task": task,
                "dataset": dataset,
                "language": dataset.split(":", 1)[1] if dataset.startswith("wikiann:") else None,
                "backbone": backbone_label(config["backbone"]),
                "mode": config["mode"],
                "fusion": config["fusion"],
                "n_shot": config.get("n_shot") if TASKS[task].few_shot else None,
                "epochs": config["epochs"],
                "trial": row.get("seed", config.get("seed")),
                "f1": 100 * row["best_dev_f1"] if "best_dev_f1" in row else math.nan,
                "accuracy": 100 * row["best_dev_accuracy"] if "best_dev_accuracy" in row else math.nan,
                "macro_f1": 100 * row["best_dev_macro_f1"] if "best_dev_macro_f1" in row else math.nan,
                "final_f1": 100 * row["final_dev_f1"] if "final_dev_f1" in row else math.nan,
                "best_epoch": row.get("best_epoch"),
                "dev_perplexity": row.get("best_dev_perplexity", math.nan),
                "test_perplexity": row.get("test_perplexity", math.nan),
                "train_pool_size": row.get("train_pool_size"),
                "num_dev_sentences": row.get("num_dev_sentences", row.get("num_dev_examples")),
                "wall_seconds": row.get("wall_seconds", math.nan),
                "dev_curve": row.get("dev_curve", []),
                "layer_weights": row.get("dev_layer_weights"),
                "pooling": row.get("pooling"),  # text classification only
                "word_readout": config.get("word_readout", "first"),  # tagging; rows from before readouts: first
                "learning_rate": config.get("learning_rate"),
                "layer": read_layer(row),
                # the layers a fusion was given (a window), None where it read them all
                "fused_layers": None if config.get("layers") in (None, "all") else str(config["layers"]),
                "ensemble_size": math.nan,  # a run; a probe ensemble's line says how many heads it averages
                "backbone_layers": float(row.get("backbone_layers", math.nan)),
                "test_f1": 100 * row["test_scores"]["f1"] if "f1" in row.get("test_scores", {}) else math.nan,
                "test_accuracy": 100 * row["test_scores"]["accuracy"]
                if "accuracy" in row.get("test_scores", {})
                else math.nan,
                # the same run's choice on a few-shot dev sample (`RunConfig.few_shot_dev`), where it made one
                **few_shot_dev_columns(row.get("few_shot_dev")),
                **last_epoch_columns(row.get("last_epoch")),
            }
        )
        records += ensemble_records(records[-1], row)
    frame = pd.DataFrame.from_records(records)
    if not frame.empty:
        frame["tier"] = [
            tier(size) if size is not None and not pd.isna(size) else None for size in frame["train_pool_size"]
        ]
    return whole_grid_ensembles(frame)


# What makes one probe ensemble's sample: the trial's runs of one method in one setting.
ENSEMBLE_SAMPLE = ["task", "dataset", "backbone", "mode", "fusion", "n_shot", "epochs", "trial"]


def whole_grid_ensembles(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with, per trial and ensemble size, only the probe ensemble of the group that trained the most of the
    trial's probe heads: the one its probe's grid built. A group that trained part of that grid (a widening round's
    added rates, made by sweeps before they stopped building ensembles there) ranked only its own heads, so its
    "top-k" is not the probe's."""
    if frame.empty or "ensemble_group_runs" not in frame:
        return frame
    ensembles = frame.ensemble_size.notna()
    largest = frame[ensembles].groupby(ENSEMBLE_SAMPLE, dropna=False).ensemble_group_runs.transform("max")
    stale = ensembles & (frame.ensemble_group_runs < largest.reindex(frame.index))
    return frame[~stale].reset_index(drop=True)


def conll_fe_grid(frame: pd.DataFrame) -> pd.DataFrame:
    """
    The CoNLL-03 FE grid of each backbone (Figures 2-4 and 7, the paper comparison): its FE runs on the dev set
    that most of them were scored on, so that a side experiment on a dev subset (FE vs FT) stays out of it. The
    depth grid (`depth_grid`) has a table of its own: a backbone run only there has no paper-protocol grid.
    """
    runs = frame[(frame.dataset == "conll2003") & (frame["mode"] == "fe")]
    runs = runs.drop(depth_grid(runs).index)
    if runs.empty:
        return runs
    dev = runs.num_dev_sentences.fillna(-1)
    main_dev = dev.groupby(runs.backbone).transform(lambda sizes: sizes.value_counts().index[0])
    return runs[dev == main_dev]


def headline_budget(runs: pd.DataFrame) -> int:
    """The epoch budget of an F1-against-N figure: the largest of the budgets run at the most values of N."""
    counts = runs.groupby("epochs").n_shot.nunique()
    return int(counts[counts == counts.max()].index.max())


def confidence_interval(values, level: float = 0.95) -> float:
    """Half-width of the `level` confidence interval of the mean (Student's t); NaN for fewer than 2 values."""
    from scipy import stats

    values = [v for v in values if not pd.isna(v)]
    if len(values) < 2:
        return math.nan
    return float(stats.t.ppf((1 + level) / 2, len(values) - 1) * stats.sem(values))


def summarize(frame: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Mean, 95% CI half-width and number of trials of `value` per group `by`."""
    grouped = frame.dropna(subset=[value]).groupby(by, dropna=False)[value]
    table = grouped.agg(mean="mean", trials="count").reset_index()
    table["ci95"] = grouped.agg(confidence_interval).to_numpy()
    return table


def scored_by(frame: pd.DataFrame, score: str) -> pd.DataFrame:
    """The runs of the tasks whose record says they are scored by `score` (`Task.score`): each summary is one
    score's."""
    return frame[frame.task.isin([task.name for task in TASKS.values() if task.score == score])]


def ner_summary(frame: pd.DataFrame) -> pd.DataFrame:
    ner = scored_by(frame, "f1")
    return summarize(ner, SETTING, "f1") if not ner.empty else pd.DataFrame()


def mlm_summary(frame: pd.DataFrame) -> pd.DataFrame:
    mlm = scored_by(frame, "perplexity")
    if mlm.empty:
        return pd.DataFrame()
    test, dev = summarize(mlm, SETTING, "test_perplexity"), summarize(mlm, SETTING, "dev_perplexity")
    return test.merge(dev, on=SETTING, suffixes=("_test_ppl", "_dev_ppl"))


def classification_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Text classification per setting: accuracy and macro-F1 (x 100), mean and CI over trials."""
    runs = scored_by(frame, "accuracy")
    if runs.empty:
        return pd.DataFrame()
    return summarize(runs, SETTING, "accuracy").merge(
        summarize(runs, SETTING, "macro_f1"), on=SETTING, suffixes=("_accuracy", "_macro_f1")
    )


def tier_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """WikiAnn per resource tier: the mean of per-language means, its CI over languages, and the languages."""
    wiki = frame[frame.language.notna()]  # WikiAnn: the datasets with a language
    if wiki.empty:
        return pd.DataFrame()
    per_language = wiki.groupby(["backbone", "mode", "fusion", "epochs", "tier", "language"], as_index=False)[
        "f1"
    ].mean()
    table = summarize(per_language, ["backbone", "mode", "fusion", "epochs", "tier"], "f1").rename(
        columns={"trials": "languages"}
    )
    names = per_language.groupby(["backbone", "mode", "fusion", "epochs", "tier"])["language"].agg(
        lambda s: " ".join(sorted(s))
    )
    return table.merge(names.reset_index(), on=["backbone", "mode", "fusion", "epochs", "tier"])


# The depth comparison (the `conll-depth` sweep preset): one CoNLL-03 FE grid on backbones of different depths,
# scored on the same fixed dev sentences.
DEPTH_DEV_SENTENCES, DEPTH_EPOCHS = 1000, 25


def depth_grid(frame: pd.DataFrame) -> pd.DataFrame:
    """The CoNLL-03 FE runs of the depth comparison: 25 epochs on the fixed 1000 dev sentences, every backbone."""
    return frame[
        (frame.dataset == "conll2003")
        & (frame["mode"] == "fe")
        & (frame.epochs == DEPTH_EPOCHS)
        & (frame.num_dev_sentences == DEPTH_DEV_SENTENCES)
    ]


def backbone_layers(frame: pd.DataFrame) -> dict[str, int]:
    """Each backbone's depth, read off the layers that DWAtt's or ScalarMix's recorded weights cover."""
    depths: dict[str, int] = {}
    for backbone, weights in zip(frame.backbone, frame.layer_weights):
        if isinstance(weights, dict) and weights.get("layers"):
            depths[backbone] = max(depths.get(backbone, 0), max(weights["layers"]))
    return depths


def paired_gain(runs: pd.DataFrame, value: str, better: str, other: str) -> tuple[float, float, int]:
    """`better` minus `other` on `value`, paired by trial (a trial's fusions share a sample): mean, CI, trials."""
    by_trial = runs.pivot_table(index="trial", columns="fusion", values=value)
    if not {better, other} <= set(by_trial.columns):
        return math.nan, math.nan, 0
    gains = (by_trial[better] - by_trial[other]).dropna()
    return (float(gains.mean()) if len(gains) else math.nan), confidence_interval(gains), len(gains)
