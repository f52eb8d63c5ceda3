"""NER data: CoNLL-2003 and WikiAnn as `datasets.DatasetDict`, and tokenisation with label alignment.

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
from .files import DataFormatError, is_local_path, numbered_lines

logger = logging.getLogger(__name__)

CONLL_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
WIKIANN_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
CONLL_SPLIT_FILES = {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}
WIKIANN_SPLIT_FILES = {"train": "train.txt", "validation": "dev.txt", "test": "test.txt"}


def entity_types(labels: Sequence[str]) -> list[str]:
    """The entity classes of an IOB2 tag set, in order of first appearance: ['PER', 'ORG', ...]."""
    return list(dict.fromkeys(label[2:] for label in labels if label != "O"))


def read_conll(path: str | Path, labels: Sequence[str]) -> list[dict]:
    """
    Sentences of a CoNLL-style file: one token per line, the tag in the last column (two columns as
    `TOKEN TAG`, or the original four `TOKEN POS CHUNK TAG`), blank lines between sentences, `-DOCSTART-` lines
    between documents. Returns `[{"tokens": [...], "tags": [...], "line": first_line}, ...]`.
    """
    path = Path(path)
    known = set(labels)
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
        if len(columns) not in (2, 4):
            what = "a token without a tag" if len(columns) == 1 else f"{len(columns)} columns"
            raise DataFormatError(
                f"{path}:{number}: {what} in {line!r}; expected 'TOKEN TAG' or 'TOKEN POS CHUNK TAG'"
            )
        tag = columns[-1]
        if tag not in known:
            raise DataFormatError(f"{path}:{number}: unknown tag {tag!r}; known tags: {', '.join(labels)}")
        if not tokens:
            first_line = number
        tokens.append(columns[0])
        tags.append(tag)
    close_sentence()
    if not sentences:
        raise DataFormatError(f"{path}:1: no sentences in the file (empty, or only -DOCSTART- lines)")
    return sentences


def ner_features(labels: Sequence[str]) -> Features:
    return Features(
        {
            "id": Value("int32"),
            "tokens": SequenceFeature(Value("string")),
            "ner_tags": SequenceFeature(ClassLabel(names=list(labels))),
        }
    )


def _ner_split(path: Path, labels: Sequence[str]) -> Dataset:
    sentences = read_conll(path, labels)
    index = {label: i for i, label in enumerate(labels)}
    return Dataset.from_dict(
        {
            "id": list(range(len(sentences))),
            "tokens": [s["tokens"] for s in sentences],
            "ner_tags": [[index[t] for t in s["tags"]] for s in sentences],
        },
        features=ner_features(labels),
    )


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
    """An NER dataset by its name: conll2003 (the vendored copy, or `data_dir`'s files) or wikiann:<lang>."""
    if name == "conll2003":
        return load_conll2003(data_dir)
    if name.startswith("wikiann:"):
        return load_wikiann(name.split(":", 1)[1], data_dir)
    raise ValueError(f"--dataset: unknown dataset {name!r}; expected conll2003 or wikiann:<lang>")


def tokenize_and_align(
    dataset: Dataset | DatasetDict,
    tokenizer,
    label_all_subtokens: bool = False,
    max_length: int | None = None,
    stride: int = 32,
) -> Dataset | DatasetDict:
    """
    Tokenise pre-split sentences and align word tags to sub-words: the first sub-token of a word carries its tag,
    the others -100 (ignored), or, with `label_all_subtokens`, the word's tag with B- turned into I-. Special tokens
    get -100. A sentence longer than `max_length` sub-words (default: the tokenizer's limit) is split into
    overlapping windows (see `encode_words`) that each score their own words, so no label is lost; columns
    `sentence` and `window` let scores be computed on the re-assembled sentence. Empty sentences are skipped. What
    was split, skipped or replaced is counted in a warning, never silent.
    """
    if isinstance(dataset, DatasetDict):
        return DatasetDict(
            {
                name: tokenize_and_align(split, tokenizer, label_all_subtokens, max_length, stride)
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
        rows, counts = encode_words(tokenizer, batch["tokens"], limit, stride)
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
    "load_conll2003",
    "load_ner_dataset",
    "load_wikiann",
    "ner_features",
    "read_conll",
    "tokenize_and_align",
]
