"""Masked-LM data: WikiText-2 lines, cut into blocks of tokens, and the masking collator."""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset, DatasetDict, load_dataset

from .files import is_local_path, read_text_lines

WIKITEXT_SPLITS = {"train": "train", "validation": "valid", "test": "test"}


def load_wikitext2(source: str | Path) -> DatasetDict:
    """
    WikiText-2 lines as `{"text": ...}` per split, from a folder of `wiki.{train,valid,test}.{raw,tokens}` or
    `{train,valid,test}.txt`, or a Hub name such as `"wikitext"` (config `wikitext-2-raw-v1`, online only).
    Splits missing from the folder are left out; an empty folder is an error.
    """
    if not is_local_path(source):
        return load_dataset(str(source), "wikitext-2-raw-v1")
    folder = Path(source)
    splits = {}
    for split, stem in WIKITEXT_SPLITS.items():
        for name in (f"wiki.{stem}.raw", f"wiki.{stem}.tokens", f"{stem}.txt"):
            path = folder / name
            if path.is_file():
                splits[split] = Dataset.from_dict({"text": list(read_text_lines(path))})
                break
    if not splits:
        raise FileNotFoundError(f"{folder}: no WikiText-2 files (wiki.train.raw, wiki.valid.tokens, valid.txt, ...)")
    return DatasetDict(splits)


def group_texts_for_mlm(
    dataset: Dataset | DatasetDict, tokenizer, block_size: int = 128, split: str = "the"
) -> Dataset | DatasetDict:
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
        raise ValueError(
            f"masked LM: the {split} split has {tokens} tokens, fewer than one block of {block_size}: "
            "give it more text, or a smaller --block-size"
        )
    return blocks


def mlm_collator(tokenizer, mlm_probability: float = 0.15):
    """The standard masking collator (80% [MASK], 10% random, 10% kept)."""
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)


__all__ = ["group_texts_for_mlm", "load_wikitext2", "mlm_collator"]
