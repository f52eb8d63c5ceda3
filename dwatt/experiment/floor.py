"""The floor under a fair grid: the majority label and a model with no backbone (`baselines`), scored on the very
samples, dev subsets and test splits the grid's runs trained on, as methods of the fair report.

A sample is what decides a run's training examples and scored splits (`sample_key`): the task, the data, N, the seed
and the dev subset; every backbone of a grid trains on the same ones (sampling reads only the data and the seed). The
floor's scores are kept in a file of their own (`scored_floor`: one entry a sample; samples it lacks are scored and
added, so a grid that grows costs only its new samples), and each becomes a results row per backbone and budget that
trained on its sample (`floor_rows`), paired by trial with that backbone's runs in the tables.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from ..atomic import write_text_atomically
from ..run_config import RunConfig
from ..tasks import TASKS

# The fusions the floor's rows carry: `baselines` returns the majority label first and the no-backbone model last.
MAJORITY_LABEL, NO_BACKBONE = "majority_label", "no_backbone"
FLOOR_FUSIONS = (MAJORITY_LABEL, NO_BACKBONE)
# What a sample is: the fields of a run's configuration that decide its training sample and its scored splits.
SAMPLE_FIELDS = (
    "task",
    "dataset",
    "data_dir",
    "n_shot",
    "seed",
    "sampling",
    "dev_sentences",
    "text_column",
    "pair_column",
    "label_column",
)


def sample_key(config: dict) -> dict:
    """The fields of a run's configuration (a results row's `config`) that decide its sample and splits."""
    return {field: config.get(field) for field in SAMPLE_FIELDS}


def _text(sample: dict) -> str:
    return json.dumps(sample, sort_keys=True)


def _sample_of(row: dict) -> dict:
    """The sample a results row trained on (its seed the row's own where it carries one, as `runs_frame` reads its
    trial)."""
    config = row["config"]
    return sample_key(config) | {"seed": row.get("seed", config.get("seed"))}


def read_floor(store: Path) -> list[dict]:
    """The samples a floor file holds (`[{"sample": ..., "baselines": [...]}, ...]`), each checked, or an error
    naming the file and the entry."""
    if not store.is_file():
        return []
    try:
        known = json.loads(store.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{store}: not a floor file ({error})") from None
    if not isinstance(known, list):
        raise ValueError(f"{store}: a floor file is a list of samples, not {type(known).__name__}")
    for number, entry in enumerate(known):
        scores = entry.get("baselines") if isinstance(entry, dict) else None
        if not isinstance(entry.get("sample") if isinstance(entry, dict) else None, dict) or not isinstance(
            scores, list
        ):
            raise ValueError(f"{store}: entry {number} needs a 'sample' and its 'baselines'")
        if len(scores) != len(FLOOR_FUSIONS) or not all({"dev", "test"} <= set(score) for score in scores):
            raise ValueError(
                f"{store}: entry {number} needs {len(FLOOR_FUSIONS)} baselines (the majority label, the model with "
                "no backbone), each with its 'dev' and 'test' score"
            )
    return known


def scored_floor(rows: list[dict], store: Path) -> list[dict]:
    """The floor of every few-shot sample `rows` (results rows) trained on: read from `store`, the samples it lacks
    scored (`baselines`: the baselines extra) and written to it one by one, so a stopped run keeps what it scored."""
    from .baselines import baselines

    known = read_floor(store)
    have = {_text(entry["sample"]) for entry in known}
    wanted = {
        _text(_sample_of(row))
        for row in rows
        if row["config"].get("n_shot") and TASKS[row["config"].get("task", RunConfig.task)].labelled
    }
    missing = sorted(wanted - have)
    for number, text in enumerate(missing, start=1):
        sample = json.loads(text)
        config = RunConfig(
            **{key: value for key, value in sample.items() if value is not None},
            evaluate_test=True,
            output_dir="runs/floor",
        )
        known.append({"sample": sample, "baselines": [asdict(score) for score in baselines(config)]})
        store.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(store, json.dumps(known, indent=1) + "\n")
        print(
            f"floor [{number}/{len(missing)}] {sample['dataset']} N = {sample['n_shot']} seed {sample['seed']}",
            file=sys.stderr,
        )
    return known


def floor_rows(rows: list[dict], floor: list[dict]) -> list[dict]:
    """Results rows of the floor (fusions `FLOOR_FUSIONS`), one per baseline and per backbone, budget and sample
    among `rows` that were scored on test: each carries its sample's dev and test score as that backbone's run would,
    so that the tables pair it by trial with the backbone's methods. A sample `floor` lacks is named."""
    scores = {_text(entry["sample"]): entry["baselines"] for entry in floor}
    made, seen = [], set()
    for row in rows:
        config = row["config"]
        task = TASKS[row.get("task", config.get("task", RunConfig.task))]
        if not (config.get("n_shot") and task.labelled and row.get("test_scores")):
            continue
        sample = _sample_of(row)
        key = _text(sample)
        setting = (key, config["backbone"], config["epochs"])
        if setting in seen:
            continue
        seen.add(setting)
        if key not in scores:
            raise ValueError(
                f"{row.get('_path', 'a results row')}: the floor has no scores of its sample ({key}); score it "
                "(dwatt report --floor FILE scores the samples its file lacks)"
            )
        for fusion, baseline in zip(FLOOR_FUSIONS, scores[key]):
            made.append(
                {
                    "task": task.name,
                    "seed": sample["seed"],
                    f"best_dev_{task.score}": baseline["dev"] / 100,
                    "test_scores": {task.score: baseline["test"] / 100},
                    "num_dev_sentences": row.get("num_dev_sentences", row.get("num_dev_examples")),
                    "floor_choice": baseline.get("chosen", ""),
                    "config": {
                        **{field: config.get(field) for field in ("backbone", "mode", "dataset", "data_dir")},
                        "task": task.name,
                        "n_shot": config["n_shot"],
                        "epochs": config["epochs"],
                        "seed": sample["seed"],
                        "fusion": fusion,
                        "learning_rate": None,
                        "layers": "all",
                    },
                }
            )
    return made


__all__ = [
    "FLOOR_FUSIONS",
    "MAJORITY_LABEL",
    "NO_BACKBONE",
    "SAMPLE_FIELDS",
    "floor_rows",
    "read_floor",
    "sample_key",
    "scored_floor",
]
