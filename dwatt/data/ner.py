"""Token-labelling data: CoNLL-2003, WikiAnn and a folder of the user's own files (any tag set: `tag_sets`) as
`datasets.DatasetDict`, and tokenisation with label alignment.

Every loader reads local files (the usual formats) or, given a Hub dataset name instead of a folder, calls
`datasets.load_dataset` (online only). A malformed file raises `DataFormatError` naming the file and the line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from datasets import ClassLabel, Dataset, DatasetDict, Features, Value, load_dataset
from datasets import Sequence as SequenceFeature

from ..defaults import default_conll_dir
from ..tokenization import encode_words
from .files import DataFormatError, is_local_path, json_objects, numbered_lines
from .tag_sets import describe, entity_types, label_list, refuse_bilou

logger = logging.getLogger(__name__)

CONLL_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
WIKIANN_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
CONLL_SPLIT_FILES = {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}
WIKIANN_SPLIT_FILES = {"train": "train.txt", "validation": "dev.txt", "test": "test.txt"}


# The files of a folder of one's own: each split under any of its names, with any of the usual extensions.
SPLIT_NAMES = {"train": ("train",), "validation": ("dev", "valid", "validation"), "test": ("test",)}
TAGGED_EXTENSIONS = (".txt", ".conll", ".iob", ".tsv", ".jsonl")


def read_conll(path: str | Path, labels: Sequence[str] | None = None) -> list[dict]:
    """
    Sentences of a CoNLL-style file: one token per line, the tag in the last column (`TOKEN TAG`, the original
    `TOKEN POS CHUNK TAG`, or any columns between; spaces or tabs), blank lines between sentences, `-DOCSTART-`
    lines between documents. `labels`: the tags allowed (None: any). Returns
    `[{"tokens": [...], "tags": [...], "line": first_line}, ...]`.
    """
    path = Path(path)
    known = None if labels is None else set(labels)
    sentences: list[dict] = []
    tokens: list[str] = []
    tags: list[str] = []
    first_line = 0

    def close_sentence() -> None:
        if tokens:
            sentences.append({"tokens": list(tokens), "tags": list(tags), "line": first_line})
            tokens.clear()
            tags.clear()

    for number, line in numbered_lines(path):
        line = line.strip()
        if not line:
            close_sentence()
            continue
        columns = line.split()
        if columns[0] == "-DOCSTART-":
            close_sentence()
            continue
        if len(columns) < 2:
            raise DataFormatError(
                f"{path}:{number}: a token without a tag in {line!r}; expected 'TOKEN TAG' or 'TOKEN POS CHUNK TAG'"
            )
        tag = columns[-1]
        if known is not None and tag not in known:
            raise DataFormatError(f"{path}:{number}: unknown tag {tag!r}; known tags: {', '.join(labels)}")
        if not tokens:
            first_line = number
        tokens.append(columns[0])
        tags.append(tag)
    close_sentence()
    if not sentences:
        raise DataFormatError(f"{path}:1: no sentences in the file (empty, or only -DOCSTART- lines)")
    return sentences


def read_tagged_jsonl(path: str | Path) -> list[dict]:
    """Sentences of a JSON-lines file, one object per line: `{"tokens": [...], "tags": [...]}` (or `ner_tags`),
    the tags as strings, as many as the tokens. Returns what `read_conll` returns."""
    sentences = []
    for number, row in json_objects(path, "sentence"):
        key = next((key for key in ("tags", "ner_tags") if key in row), None)
        tokens, tags = row.get("tokens"), row.get(key)
        if not isinstance(tokens, list) or key is None or not isinstance(tags, list):
            raise DataFormatError(
                f'{path}:{number}: expected {{"tokens": [...], "tags": [...]}}, got keys {sorted(row)}'
            )
        if len(tokens) != len(tags):
            raise DataFormatError(f"{path}:{number}: {len(tokens)} tokens but {len(tags)} tags")
        if not all(isinstance(tag, str) for tag in tags):
            raise DataFormatError(
                f"{path}:{number}: {key} must be tag names (strings such as 'B-PER'), got {tags[:3]!r}: "
                "write the names, not their ids"
            )
        if tokens:
            sentences.append({"tokens": [str(token) for token in tokens], "tags": tags, "line": number})
    if not sentences:
        raise DataFormatError(f"{path}:1: no sentences in the file")
    return sentences


def read_tagged(path: Path) -> list[dict]:
    """A split file of either format, by its extension (`.jsonl`: JSON lines; else CoNLL columns)."""
    sentences = read_tagged_jsonl(path) if path.suffix == ".jsonl" else read_conll(path)
    for sentence in sentences:
        refuse_bilou(sentence["tags"], f"{path}:{sentence['line']}")
    return sentences


def tagged_split_files(folder: Path) -> dict[str, Path]:
    """`{split: file}` of a folder of one's own (`SPLIT_NAMES` x `TAGGED_EXTENSIONS`); two files for one split, or
    none for train or dev, are refused naming what was looked for."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no data folder {folder}")
    found = {}
    for split, names in SPLIT_NAMES.items():
        files = [
            folder / f"{name}{ext}"
            for name in names
            for ext in TAGGED_EXTENSIONS
            if (folder / f"{name}{ext}").is_file()
        ]
        if len(files) > 1:
            raise DataFormatError(
                f"{folder}: {len(files)} files for the {split} split ({', '.join(f.name for f in files)}); keep one"
            )
        if files:
            found[split] = files[0]
        elif split != "test":
            wanted = "/".join(names)
            raise FileNotFoundError(
                f"{folder}: no {split} split (looked for {wanted} with {', '.join(TAGGED_EXTENSIONS)})"
            )
    return found


def load_tagged_folder(folder: str | Path) -> DatasetDict:
    """
    A folder of one's own token-labelled files (`tagged_split_files`) as `train/validation/test` with `ner_tags`
    whose names are the data's own tag set (`tag_sets.label_list`: the training split's tags first; a tag found only
    in dev or test is kept, warned about, and can only be scored as an error). Data whose tags are all CoNLL-2003's
    keeps CoNLL-2003's label order (`CONLL_LABELS`, as models trained on it have) for the types it has: a copy of
    CoNLL-2003 gets its nine labels, a folder of PER, ORG and LOC alone WikiAnn's seven (no MISC to sample for).
    """
    files = tagged_split_files(Path(folder))
    sentences = {split: read_tagged(path) for split, path in files.items()}
    every_tag = [tag for split in sentences.values() for sentence in split for tag in sentence["tags"]]
    labels = label_list(every_tag)
    if set(every_tag) <= set(CONLL_LABELS):  # CoNLL-2003's tags: in its order, for the types the data has
        labels = [label for label in CONLL_LABELS if label in labels]
    trained = {tag for sentence in sentences["train"] for tag in sentence["tags"]}
    for split, rows in sentences.items():
        unseen = sorted({tag for sentence in rows for tag in sentence["tags"]} - trained)
        if split != "train" and unseen:
            logger.warning(
                f"{files[split]}: tags absent from the training split: {', '.join(unseen)}; their tokens stay in the "
                "scores and count as errors"
            )
    logger.info(f"{folder}: {describe(labels)}")
    return DatasetDict({split: _tagged_dataset(rows, labels) for split, rows in sentences.items()})


def _tagged_dataset(sentences: list[dict], labels: Sequence[str]) -> Dataset:
    index = {label: i for i, label in enumerate(labels)}
    return Dataset.from_dict(
        {
            "id": list(range(len(sentences))),
            "tokens": [s["tokens"] for s in sentences],
            "ner_tags": [[index[t] for t in s["tags"]] for s in sentences],
        },
        features=ner_features(labels),
    )


def ner_features(labels: Sequence[str]) -> Features:
    return Features(
        {
            "id": Value("int32"),
            "tokens": SequenceFeature(Value("string")),
            "ner_tags": SequenceFeature(ClassLabel(names=list(labels))),
        }
    )


def _ner_split(path: Path, labels: Sequence[str]) -> Dataset:
    return _tagged_dataset(read_conll(path, labels), labels)


def _load_ner_folder(folder: Path, split_files: dict[str, str], labels: Sequence[str]) -> DatasetDict:
    if not folder.is_dir():
        raise FileNotFoundError(f"no data folder {folder}")
    splits = {}
    for split, filename in split_files.items():
        candidates = [folder / filename, folder / f"{split}.txt"]
        found = next((p for p in candidates if p.is_file()), None)
        if found is not None:
            splits[split] = _ner_split(found, labels)
    for needed in ("train", "validation"):
        if needed not in splits:
            raise FileNotFoundError(f"{folder}: no {needed} split (looked for {split_files[needed]})")
    return DatasetDict(splits)


def load_conll2003(source: str | Path | None = None) -> DatasetDict:
    """
    CoNLL-2003 as `train/validation/test` with IOB2 `ner_tags` (labels `CONLL_LABELS`). `source` is a folder with
    `train.txt`, `valid.txt`, `test.txt` (default: the copy vendored in this package), or a Hub dataset name such
    as `"conll2003"` (needs network access).
    """
    if is_local_path(source):
        return _load_ner_folder(Path(source) if source else default_conll_dir(), CONLL_SPLIT_FILES, CONLL_LABELS)

    return load_dataset(str(source)).select_columns(["id", "tokens", "ner_tags"])


def load_wikiann(language: str, source: str | Path | None = None) -> DatasetDict:
    """
    WikiAnn (Rahimi et al. 2019 splits) for one language: a folder holding `<language>/{train,dev,test}.txt`
    (`token tag` lines), or, without a folder, the Hub dataset `wikiann` (needs network access).
    """
    if source is not None and is_local_path(source):
        return _load_ner_folder(Path(source) / language, WIKIANN_SPLIT_FILES, WIKIANN_LABELS)

    return load_dataset(str(source or "wikiann"), language).select_columns(["tokens", "ner_tags"])


def load_ner_dataset(name: str, data_dir: str | None):
    """A token-labelling dataset by its name: conll2003 (the vendored copy, or `data_dir`'s files with CoNLL-2003's
    tags), wikiann:<lang>, a folder of one's own (`data_dir`, or the name written as a path: `load_tagged_folder`),
    or a Hub dataset with `tokens` and `ner_tags` (online)."""
    if name == "conll2003":
        return load_conll2003(data_dir)
    if name.startswith("wikiann:"):
        return load_wikiann(name.split(":", 1)[1], data_dir)
    if data_dir is not None or is_local_path(name):
        return load_tagged_folder(data_dir if data_dir is not None else name)
    try:
        data = load_dataset(name)
    except Exception as error:  # offline, unknown or malformed: the Hub's errors come in many classes
        raise ValueError(
            f"--dataset: unknown dataset {name!r}: not conll2003, wikiann:<lang>, a folder of your files (--data-dir) "
            f"or a Hub dataset that loads here ({str(error).splitlines()[0] if str(error) else type(error).__name__})"
        ) from None
    if "validation" not in data and "test" in data:
        data["validation"] = data.pop("test")
    return data.select_columns(["tokens", "ner_tags"])


def tokenize_and_align(
    dataset: Dataset | DatasetDict,
    tokenizer,
    label_all_subtokens: bool = False,
    max_length: int | None = None,
    stride: int = 32,
    readout: str = "first",
) -> Dataset | DatasetDict:
    """
    Tokenise pre-split sentences and align word tags to sub-words: the first sub-token of a word carries its tag,
    the others -100 (ignored), or, with `label_all_subtokens`, the word's tag with B- turned into I-. Special tokens
    get -100. A sentence longer than `max_length` sub-words (default: the tokenizer's limit) is split into
    overlapping windows (see `encode_words`) that each score their own words, so no label is lost; columns
    `sentence` and `window` let scores be computed on the re-assembled sentence; `readout` (a word readout,
    `DWAttConfig.word_readout`) says which window scores a word and whether the input is given twice (`encode_words`).
    Empty sentences are skipped. What
    was split, skipped or replaced is counted in a warning, never silent.
    """
    if isinstance(dataset, DatasetDict):
        return DatasetDict(
            {
                name: tokenize_and_align(split, tokenizer, label_all_subtokens, max_length, stride, readout)
                for name, split in dataset.items()
            }
        )
    names = dataset.features["ner_tags"].feature.names
    continuation = [
        names.index("I-" + n[2:]) if n.startswith("B-") and "I-" + n[2:] in names else i for i, n in enumerate(names)
    ]
    limit = max_length or min(tokenizer.model_max_length, 512)
    empty = [i for i, tokens in enumerate(dataset["tokens"]) if not tokens]
    if empty:
        skip = set(empty)
        dataset = dataset.select([i for i in range(len(dataset)) if i not in skip])
    totals = {"windowed_sentences": 0, "extra_windows": 0, "unknown_words": 0}

    def encode(batch: dict, indices: list[int]) -> dict:
        rows, counts = encode_words(tokenizer, batch["tokens"], limit, stride, readout)
        for key, value in counts.items():
            totals[key] += value
        rows["labels"] = []
        for word_ids, scored, local in zip(rows["word_ids"], rows["scored"], rows["sentence"]):
            tags = batch["ner_tags"][local]
            labels = []
            for word, is_scored in zip(word_ids, scored):
                if word < 0:
                    labels.append(-100)
                elif is_scored:
                    labels.append(tags[word])
                else:
                    labels.append(continuation[tags[word]] if label_all_subtokens else -100)
            rows["labels"].append(labels)
        owners = rows["sentence"]
        if "id" in batch:
            rows["id"] = [batch["id"][local] for local in owners]
        rows["sentence"] = [indices[local] for local in owners]
        del rows["scored"]
        return rows

    tokenized = dataset.map(encode, batched=True, with_indices=True, remove_columns=dataset.column_names)
    said = []
    if empty:
        said.append(f"skipped {len(empty)} empty sentences")
    if totals["windowed_sentences"]:
        said.append(
            f"split {totals['windowed_sentences']} sentences longer than {limit} sub-words into "
            f"{totals['extra_windows']} extra overlapping windows (no label lost)"
        )
    if totals["unknown_words"]:
        said.append(f"encoded {totals['unknown_words']} words that have no sub-token as {tokenizer.unk_token}")
    if said:
        logger.warning("tokenize_and_align: " + "; ".join(said))
    return tokenized


__all__ = [
    "CONLL_LABELS",
    "WIKIANN_LABELS",
    "entity_types",
    "load_tagged_folder",
    "read_tagged_jsonl",
    "load_conll2003",
    "load_ner_dataset",
    "load_wikiann",
    "ner_features",
    "read_conll",
    "tokenize_and_align",
]
