"""Datasets: CoNLL-2003, WikiAnn and WikiText-2 as `datasets.DatasetDict`, tokenisation with label alignment.

Every loader reads local files (the usual formats) or, given a Hub dataset name instead of a folder, calls
`datasets.load_dataset` (online only). A malformed file raises `DataFormatError` naming the file and the line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence as SequenceFeature, Value

from .defaults import default_conll_dir
from .tokenization import (  # noqa: F401  (re-exported: data's API tokenises too)
    BYTE_LEVEL_BPE_MODELS,
    as_in_running_text,
    drops_running_text_spaces,
    encode_words,
    load_tokenizer,
)

logger = logging.getLogger(__name__)

CONLL_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
WIKIANN_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
CONLL_SPLIT_FILES = {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}
WIKIANN_SPLIT_FILES = {"train": "train.txt", "validation": "dev.txt", "test": "test.txt"}
WIKITEXT_SPLITS = {"train": "train", "validation": "valid", "test": "test"}


class DataFormatError(ValueError):
    """A data file that cannot be read as it claims to be; the message starts with `file:line:`."""


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

    for number, line in _numbered_lines(path):
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
            raise DataFormatError(f"{path}:{number}: {what} in {line!r}; expected 'TOKEN TAG' or 'TOKEN POS CHUNK TAG'")
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


def is_local_path(source: str | Path | None) -> bool:
    """A folder on disk rather than a Hub id: `None` (the vendored default), a `Path`, an existing path, or a name
    written as a path (`./x`, `/x`, `~/x`). Hub ids such as `conll2003` or `org/name` are not."""
    return source is None or isinstance(source, Path) or Path(str(source)).exists() or str(source).startswith((".", "/", "~"))


def load_conll2003(source: str | Path | None = None) -> DatasetDict:
    """
    CoNLL-2003 as `train/validation/test` with IOB2 `ner_tags` (labels `CONLL_LABELS`). `source` is a folder with
    `train.txt`, `valid.txt`, `test.txt` (default: the copy vendored in this package), or a Hub dataset name such
    as `"conll2003"` (needs network access).
    """
    if is_local_path(source):
        return _load_ner_folder(Path(source) if source else default_conll_dir(), CONLL_SPLIT_FILES, CONLL_LABELS)
    from datasets import load_dataset

    return load_dataset(str(source)).select_columns(["id", "tokens", "ner_tags"])


def load_wikiann(language: str, source: str | Path | None = None) -> DatasetDict:
    """
    WikiAnn (Rahimi et al. 2019 splits) for one language: a folder holding `<language>/{train,dev,test}.txt`
    (`token tag` lines), or, without a folder, the Hub dataset `wikiann` (needs network access).
    """
    if source is not None and is_local_path(source):
        return _load_ner_folder(Path(source) / language, WIKIANN_SPLIT_FILES, WIKIANN_LABELS)
    from datasets import load_dataset

    return load_dataset(str(source or "wikiann"), language).select_columns(["tokens", "ner_tags"])


def load_wikitext2(source: str | Path) -> DatasetDict:
    """
    WikiText-2 lines as `{"text": ...}` per split, from a folder of `wiki.{train,valid,test}.{raw,tokens}` or
    `{train,valid,test}.txt`, or a Hub name such as `"wikitext"` (config `wikitext-2-raw-v1`, online only).
    Splits missing from the folder are left out; an empty folder is an error.
    """
    if not is_local_path(source):
        from datasets import load_dataset

        return load_dataset(str(source), "wikitext-2-raw-v1")
    folder = Path(source)
    splits = {}
    for split, stem in WIKITEXT_SPLITS.items():
        for name in (f"wiki.{stem}.raw", f"wiki.{stem}.tokens", f"{stem}.txt"):
            path = folder / name
            if path.is_file():
                splits[split] = Dataset.from_dict({"text": list(_read_text_lines(path))})
                break
    if not splits:
        raise FileNotFoundError(f"{folder}: no WikiText-2 files (wiki.train.raw, wiki.valid.tokens, valid.txt, ...)")
    return DatasetDict(splits)


def _numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """`(line number, text without its line end)` of a UTF-8 file. A leading byte-order mark is read as nothing
    (editors on Windows write one), so it never sticks to the first token; other bytes that are not UTF-8 fail
    with the file and line."""
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataFormatError(f"{path}:{number}: not UTF-8 ({error.reason} at byte {error.start})") from None
            yield number, text.rstrip("\r\n")


def _read_text_lines(path: Path) -> Iterator[str]:
    for _, line in _numbered_lines(path):
        yield line


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
            {name: tokenize_and_align(split, tokenizer, label_all_subtokens, max_length, stride) for name, split in dataset.items()}
        )
    names = dataset.features["ner_tags"].feature.names
    continuation = [names.index("I-" + n[2:]) if n.startswith("B-") and "I-" + n[2:] in names else i for i, n in enumerate(names)]
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


def group_texts_for_mlm(dataset: Dataset | DatasetDict, tokenizer, block_size: int = 128,
                        split: str = "the") -> Dataset | DatasetDict:
    """Tokenise lines of text, concatenate them and cut fixed-length blocks (the remainder is dropped). A split too
    short for one block is refused, naming it."""
    if isinstance(dataset, DatasetDict):
        return DatasetDict({k: group_texts_for_mlm(v, tokenizer, block_size, k) for k, v in dataset.items()})
    tokenized = dataset.map(
        lambda batch: tokenizer(batch["text"], return_special_tokens_mask=True),
        batched=True,
        remove_columns=dataset.column_names,
    )

    def group(batch: dict) -> dict:
        joined = {key: sum(batch[key], []) for key in batch}
        total = len(joined["input_ids"]) // block_size * block_size
        return {key: [v[i : i + block_size] for i in range(0, total, block_size)] for key, v in joined.items()}

    blocks = tokenized.map(group, batched=True)
    if len(blocks) == 0:
        tokens = sum(len(ids) for ids in tokenized["input_ids"])
        raise ValueError(f"masked LM: the {split} split has {tokens} tokens, fewer than one block of {block_size}: "
                         "give it more text, or a smaller --block-size")
    return blocks


def load_ner_dataset(name: str, data_dir: str | None):
    """An NER dataset by its name: conll2003 (the vendored copy, or `data_dir`'s files) or wikiann:<lang>."""
    if name == "conll2003":
        return load_conll2003(data_dir)
    if name.startswith("wikiann:"):
        return load_wikiann(name.split(":", 1)[1], data_dir)
    raise ValueError(f"--dataset: unknown dataset {name!r}; expected conll2003 or wikiann:<lang>")


def mlm_collator(tokenizer, mlm_probability: float = 0.15):
    """The standard masking collator (80% [MASK], 10% random, 10% kept)."""
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)
