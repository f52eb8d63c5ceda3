"""Text-classification data: CSV, TSV and JSONL files, Hub datasets, and the vendored AG News split.

Every split becomes a `datasets.Dataset` with `text`, an optional `text_pair` (sentence-pair tasks), a
`ClassLabel` `label` and, for a split read from a file, `source` (`file:line` of each row, for messages). Column names
are detected from common ones (`text`/`sentence`/..., `label`/`class`/...) or
given. A malformed file raises `DataFormatError` naming the file and the line.

AG News offline: only the 7600-row test split of AG News is available (`../shared/data/ag_news/test.csv`, see its
SOURCES.md). `split_ag_news` divides it once, per class with seed 0, into a pool of 1400 examples per class to
sample training examples from (`train`, 5600 rows) and 500 per class to score on (`validation`, 2000 rows); the
package ships that split. Numbers on it are not comparable to published AG News results, which train on the
120k-row train split.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value, load_dataset
from datasets import Sequence as SequenceFeature

from .files import DataFormatError, is_local_path, json_objects, numbered_lines
from .targets import MULTI_LABEL, REGRESSION, SINGLE_LABEL, check_single_label, multi_label_rows, regression_targets

logger = logging.getLogger(__name__)

TEXT_COLUMNS = ("text", "sentence", "sentence1", "content", "review", "document", "question", "premise", "title")
PAIR_COLUMNS = ("text_pair", "sentence2", "hypothesis", "description", "question2")
LABEL_COLUMNS = ("label", "labels", "class", "category", "target", "intent", "score", "rating")
SPLIT_NAMES = {"train": ("train",), "validation": ("validation", "valid", "dev"), "test": ("test",)}
FORMATS = {".csv": ",", ".tsv": "\t", ".jsonl": None, ".json": None}
AG_NEWS_LABELS = ("World", "Sports", "Business", "Sci/Tech")  # labels 1..4 of the original corpus
AG_NEWS_DIR = Path(__file__).resolve().parents[1] / "resources" / "ag_news"
MAX_TOKENS = 256  # longer texts (or pairs) are truncated, in training and in prediction alike


def _csv_rows(path: Path, delimiter: str) -> Iterator[tuple[int, dict]]:
    """(line number, row) of a CSV/TSV file with a header; a quoted field may span lines (the number is where
    the row starts)."""
    lines = numbered_lines(path)
    first = next(lines, None)
    if first is None:
        raise DataFormatError(f"{path}: empty file (expected a header row)")
    header = next(csv.reader([first[1]], delimiter=delimiter))
    if len(set(header)) != len(header) or not all(name.strip() for name in header):
        raise DataFormatError(f"{path}:1: the header needs distinct, non-empty column names, got {header}")
    pending, start = [], None
    for number, line in lines:
        if not pending and not line.strip():
            continue
        pending.append(line)
        start = start or number
        try:
            fields = next(csv.reader(["\n".join(pending)], delimiter=delimiter, strict=True))
        except csv.Error:  # an open quote: the row goes on on the next line
            continue
        if len(fields) != len(header):
            raise DataFormatError(
                f"{path}:{start}: {len(fields)} fields where the header has {len(header)} ({header})"
            )
        yield start, dict(zip(header, fields))
        pending, start = [], None
    if pending:
        raise DataFormatError(f"{path}:{start}: a quoted field is never closed")


def read_rows(path: str | Path) -> list[tuple[int, dict]]:
    """(line number, row dict) of every row of a `.csv`, `.tsv` or `.jsonl` file."""
    path = Path(path)
    if path.suffix not in FORMATS:
        raise DataFormatError(f"{path}: unknown format {path.suffix!r}; expected one of {', '.join(FORMATS)}")
    rows = list(json_objects(path) if FORMATS[path.suffix] is None else _csv_rows(path, FORMATS[path.suffix]))
    if not rows:
        raise DataFormatError(f"{path}: no rows")
    return rows


def detect_columns(
    path: Path,
    columns: Sequence[str],
    text: str | None,
    pair: str | None,
    label: str | None,
    label_needed: bool = True,
) -> tuple[str, str | None, str | None]:
    """The text, pair and label columns: the given ones (checked), else the first common name present (no label
    where none is `label_needed` and none is found)."""

    def pick(given, candidates, role, required=True, taken=()):
        if given is not None:
            if given not in columns:
                raise DataFormatError(f"{path}: no {role} column {given!r}; the columns are {list(columns)}")
            return given
        found = next((c for c in candidates if c in columns and c not in taken), None)
        if found is None and required:
            raise DataFormatError(
                f"{path}: cannot tell which column is the {role} (looked for {', '.join(candidates)}; the columns "
                f"are {list(columns)}); name it with --{role.replace(' ', '-')}-column"
            )
        return found

    label_column = pick(label, LABEL_COLUMNS, "label", required=label_needed)
    text_column = pick(text, TEXT_COLUMNS, "text", taken=(label_column,))
    pair_column = pick(pair, PAIR_COLUMNS, "pair", required=False, taken=(label_column, text_column))
    return text_column, pair_column, label_column


def _label_names(values: list[str]) -> list[str]:
    """Class names in a stable order: numerically when every label is an integer, else alphabetically."""
    unique = sorted(set(values))
    try:
        return sorted(unique, key=int)
    except ValueError:
        return unique


def label_values(path: Path, rows: list[tuple[int, dict]], label_column: str, problem_type: str) -> list:
    """Each row's label as `problem_type` reads it: a class name, a list of class names, or a number."""
    numbered = [(number, row.get(label_column)) for number, row in rows]
    if problem_type == REGRESSION:
        return regression_targets(path, numbered)
    if problem_type == MULTI_LABEL:
        return multi_label_rows(numbered)
    check_single_label(path, numbered)
    return [str(value) for _, value in numbered]


def _names_in(values: list, problem_type: str) -> list[str]:
    """The class names `label_values` found, in `_label_names`' order (none for regression)."""
    if problem_type == REGRESSION:
        return []
    flat = [name for names in values for name in names] if problem_type == MULTI_LABEL else values
    return _label_names(flat)


def read_classification_file(
    path: str | Path,
    text_column: str | None = None,
    pair_column: str | None = None,
    label_column: str | None = None,
    label_names: Sequence[str] | None = None,
    problem_type: str = SINGLE_LABEL,
) -> Dataset:
    """One split from a CSV/TSV/JSONL file: `text`, `text_pair` (when a pair column exists) and `label`: a class id
    (single-label), a list of class ids (multi-label; an empty cell is a text with none) or a float (regression)."""
    path = Path(path)
    rows = read_rows(path)
    columns = list(rows[0][1])
    text_column, pair_column, label_column = detect_columns(path, columns, text_column, pair_column, label_column)
    required = (text_column, pair_column) + ((label_column,) if problem_type != MULTI_LABEL else ())
    texts, pairs = [], []
    for number, row in rows:
        for column in filter(None, required):
            value = row.get(column)
            if value is None or (isinstance(value, str) and not value.strip()):
                raise DataFormatError(f"{path}:{number}: empty or missing {column!r}")
        if row.get(label_column) is None:  # a multi-label cell may be empty (a text with no label), never absent
            raise DataFormatError(f"{path}:{number}: missing {label_column!r}")
        texts.append(str(row[text_column]))
        if pair_column:
            pairs.append(str(row[pair_column]))
    values = label_values(path, rows, label_column, problem_type)
    names = list(label_names) if label_names is not None else _names_in(values, problem_type)
    index = {name: i for i, name in enumerate(names)}
    if problem_type == REGRESSION:
        labels, label_feature = values, Value("float32")
    else:
        each = (lambda names_of_row: names_of_row) if problem_type == MULTI_LABEL else (lambda name: [name])
        unknown = next(((n, v) for (n, _), row in zip(rows, values) for v in each(row) if v not in index), None)
        if unknown:
            raise DataFormatError(f"{path}:{unknown[0]}: unknown label {unknown[1]!r}; the labels are {names}")
        if problem_type == MULTI_LABEL:
            labels, label_feature = (
                [[index[v] for v in row] for row in values],
                SequenceFeature(ClassLabel(names=names)),
            )
        else:
            labels, label_feature = [index[v] for v in values], ClassLabel(names=names)
    columns = {"text": texts} | ({"text_pair": pairs} if pair_column else {}) | {"label": labels}
    columns["source"] = [f"{path}:{number}" for number, _ in rows]
    features = {"text": Value("string")} | ({"text_pair": Value("string")} if pair_column else {})
    features |= {"label": label_feature, "source": Value("string")}
    return Dataset.from_dict(columns, features=Features(features))


def _split_files(folder: Path) -> dict[str, Path]:
    found = {}
    for split, names in SPLIT_NAMES.items():
        for name in names:
            matches = [folder / f"{name}{suffix}" for suffix in FORMATS if (folder / f"{name}{suffix}").is_file()]
            if matches:
                found[split] = matches[0]
                break
    return found


def read_unlabelled_texts(folder: str | Path, text_column: str | None = None, pair_column: str | None = None) -> list:
    """The texts (or `(text, pair)` tuples) of a folder's `train` file, labelled or not: a label column is neither
    needed nor read. The text column is the one given, else the first common name present, else the file's only
    column; the pair column only where given or found among the common names."""
    files = _split_files(Path(folder))
    if "train" not in files:
        raise FileNotFoundError(
            f"{folder}: no train file ({', '.join(SPLIT_NAMES['train'])} with {', '.join(FORMATS)})"
        )
    path = files["train"]
    rows = read_rows(path)
    columns = list(rows[0][1])
    only = columns[0] if len(columns) == 1 else None  # a file of texts alone, under any name
    text, pair, _ = detect_columns(path, columns, text_column or only, pair_column, None, label_needed=False)
    for number, row in rows:
        for column in (text, pair) if pair else (text,):
            if not isinstance(row.get(column), str):
                raise DataFormatError(f"{path}:{number}: no text in the column {column!r}")
    return [(row[text], row[pair]) if pair else row[text] for _, row in rows]


def load_classification_folder(
    folder: str | Path, label_names: Sequence[str] | None = None, problem_type: str = SINGLE_LABEL, **columns
) -> DatasetDict:
    """A folder of `train` and `validation` (or `dev`) files, optionally `test`, in one of the formats. All splits
    share the label names of the training split (plus any the others add, after them), or `label_names`."""
    folder = Path(folder)
    files = _split_files(folder)
    if "train" not in files or "validation" not in files:
        raise FileNotFoundError(
            f"{folder}: expected train and validation (or dev) files ({'/'.join(FORMATS)}), found {sorted(files) or 'none'}"
        )
    read = lambda split, names: read_classification_file(  # noqa: E731
        files[split], **columns, label_names=names, problem_type=problem_type
    )
    train = read("train", label_names)
    names = class_names(train)
    splits = {"train": train}
    for split in ("validation", "test"):
        if split in files:
            rows = read_rows(files[split])
            label = detect_columns(
                files[split],
                list(rows[0][1]),
                columns.get("text_column"),
                columns.get("pair_column"),
                columns.get("label_column"),
            )[2]
            values = label_values(files[split], rows, label, problem_type)
            names += [name for name in _names_in(values, problem_type) if name not in names]
            splits[split] = read(split, names or None)
    if len(names) > len(class_names(train)):
        splits["train"] = read("train", names)
    return DatasetDict(splits)


def class_names(dataset: Dataset) -> list[str]:
    """The class names of a split's `label` feature (a class id, or a list of them); none for a number."""
    feature = dataset.features["label"]
    feature = getattr(feature, "feature", feature)
    return list(getattr(feature, "names", []))


def load_classification_dataset(
    name: str, data_dir: str | None = None, problem_type: str = SINGLE_LABEL, **columns
) -> DatasetDict:
    """
    `ag_news`: the vendored offline split (or, with `data_dir`, a folder of split files); a folder path or
    `data_dir`: its split files (`load_classification_folder`); anything else: a Hub dataset (online),
    `name:config` for one with configurations (e.g. `glue:sst2`), its validation split (else test) for scoring.
    """
    if data_dir is not None:
        return load_classification_folder(data_dir, problem_type=problem_type, **columns)
    if name == "ag_news":
        if problem_type != SINGLE_LABEL:
            raise ValueError(f"ag_news holds one topic per text, not a {problem_type} task: give --data-dir")
        return load_classification_folder(AG_NEWS_DIR, label_names=AG_NEWS_LABELS)
    if is_local_path(name):
        return load_classification_folder(name, problem_type=problem_type, **columns)

    hub_name, _, config = name.partition(":")
    data = load_dataset(hub_name, config or None)
    if "validation" not in data and "test" in data:
        data["validation"] = data.pop("test")
    first = data["train"]
    text, pair, label = detect_columns(
        Path(name),
        first.column_names,
        columns.get("text_column"),
        columns.get("pair_column"),
        columns.get("label_column"),
    )
    renames = {text: "text", label: "label"} | ({pair: "text_pair"} if pair else {})
    keep = set(renames)
    return DatasetDict(
        {
            split: dataset.remove_columns([c for c in dataset.column_names if c not in keep]).rename_columns(
                {k: v for k, v in renames.items() if k != v}
            )
            for split, dataset in data.items()
            if split in SPLIT_NAMES
        }
    )


def split_ag_news(source: str | Path, output: str | Path, eval_per_class: int = 500, seed: int = 0) -> dict[str, int]:
    """
    Divide AG News's test CSV (`label,title,description`, labels 1..4) once into `train.csv` (the pool to sample
    from) and `validation.csv` (`eval_per_class` per class, scored on), per class with a generator seeded by
    `seed`; both keep the source's rows and columns, in source order, with the label named (`World`, ...).
    """
    rows = read_rows(source)
    labels = np.asarray([int(row["label"]) for _, row in rows])
    rng = np.random.default_rng(seed)
    held_out = set()
    for label in sorted(set(labels.tolist())):
        members = np.flatnonzero(labels == label)
        held_out |= {int(i) for i in rng.choice(members, size=eval_per_class, replace=False)}
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, keep in (("train", lambda i: i not in held_out), ("validation", lambda i: i in held_out)):
        with open(output / f"{split}.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(["label", "title", "description"])
            chosen = [row for i, (_, row) in enumerate(rows) if keep(i)]
            writer.writerows([AG_NEWS_LABELS[int(r["label"]) - 1], r["title"], r["description"]] for r in chosen)
            counts[split] = len(chosen)
    return counts


def _ids(label) -> list[int]:
    """The class ids of one row's label: a class id, or a multi-label row's list of them."""
    return list(label) if isinstance(label, list) else [label]


def warn_about_unseen_labels(
    train_labels: Iterable, splits: dict[str, Dataset], what: str = "the training split"
) -> dict[str, dict]:
    """
    One warning per label that an evaluation split holds but the training examples (`train_labels`, after any
    sampling; `what` names them) lack: the model never sees an example of it, so it is a class in name only. The
    rows stay in the scores, where the model can only get them wrong. The warning names the label, the file and
    line of its first row (its row number, for a Hub split) and how many rows carry it in each split. Returns
    `{label: {"first": where, "rows": {split: count}}}`. Multi-label rows count once per label they carry; a
    regression's numbers have no labels to miss.
    """
    seen = {i for label in train_labels for i in _ids(label)}
    unseen: dict[str, dict] = {}
    for split, dataset in splits.items():
        names = class_names(dataset)
        if not names:
            continue
        sources = dataset["source"] if "source" in dataset.column_names else None
        for row, label in enumerate(dataset["label"]):
            for missing in (i for i in _ids(label) if i not in seen):
                first = sources[row] if sources else f"row {row + 1} of the {split} split"
                entry = unseen.setdefault(names[missing], {"first": first, "rows": {}})
                entry["rows"][split] = entry["rows"].get(split, 0) + 1
    for label, entry in unseen.items():
        counts = ", ".join(f"{count} in {split}" for split, count in entry["rows"].items())
        logger.warning(
            f"{entry['first']}: the label {label!r} ({counts}) is absent from {what}; its rows stay in the scores "
            "and count as errors (the model never sees an example of it)"
        )
    return unseen


def to_model_labels(tokens: Dataset, model_ids: Sequence[int] | None) -> Dataset:
    """A tokenised split whose `labels` are dataset class ids, relabelled to the model's: `model_ids[k]` is the
    dataset id of the model's class k (the classes its training examples hold); a row of any other class gets
    -100 (no loss; scored as an error, see `metrics.classification_scores`). A multi-label row becomes a 0/1 vector
    over the model's classes (a class it lacks is dropped there and counted apart: `unseen`); `model_ids` None (a
    regression's numbers) keeps the labels as they are."""
    if model_ids is None:
        return tokens
    position = {dataset_id: k for k, dataset_id in enumerate(model_ids)}
    if tokens.num_rows and isinstance(tokens[0]["labels"], list):

        def multi_hot(ids: list[int]) -> list[float]:
            row = [0.0] * len(position)
            for i in ids:
                if i in position:
                    row[position[i]] = 1.0
            return row

        features = tokens.features.copy()
        features["labels"] = SequenceFeature(Value("float32"))  # the loss's targets (datasets keeps ints otherwise)
        return tokens.map(
            lambda batch: {"labels": [multi_hot(ids) for ids in batch["labels"]]}, batched=True, features=features
        )
    if list(position) == list(range(len(position))) and set(tokens["labels"]) <= set(position):
        return tokens
    return tokens.map(lambda batch: {"labels": [position.get(label, -100) for label in batch["labels"]]}, batched=True)


def tokenize_texts(dataset: Dataset, tokenizer, max_length: int = MAX_TOKENS) -> Dataset:
    """`input_ids`/`attention_mask` (and token types) of each text or text pair, truncated to `max_length` tokens
    (a pair loses from its longer side first), with the `labels` the model reads."""
    has_pair = "text_pair" in dataset.column_names

    def encode(batch):
        pairs = batch["text_pair"] if has_pair else None
        encoded = tokenizer(batch["text"], pairs, truncation="longest_first", max_length=max_length)
        return dict(encoded) | {"labels": batch["label"]}

    return dataset.map(encode, batched=True, remove_columns=dataset.column_names)


__all__ = [
    "AG_NEWS_LABELS",
    "class_names",
    "label_values",
    "load_classification_dataset",
    "load_classification_folder",
    "read_classification_file",
    "read_rows",
    "split_ag_news",
    "to_model_labels",
    "tokenize_texts",
    "warn_about_unseen_labels",
]
