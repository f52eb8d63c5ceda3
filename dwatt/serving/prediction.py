"""Prediction with trained checkpoints at the model's speed: inputs in length-sorted batches, results in input order.

Each task encodes its inputs as training encodes them: pre-split words in overlapping windows for the tagger (no word
lost), texts or text pairs truncated to `MAX_TOKENS` for the classifier, texts as they are for the masked LM. The
encoded rows of a chunk of inputs are sorted by token count and cut into batches of `batch_size` rows, each padded to
its own longest row, so that padding costs little; the model skips what padding is left (its per-token work runs on
the real tokens only). Results come back chunk by chunk in input order, so a large file streams. A sentence's result
is the same as when it is run alone (tests/test_prediction.py).

Batches are numpy arrays: a PyTorch model gets them as tensors (`logits_of`), an exported graph
(`dwatt.serving.onnx_runtime`)
as they are, so that running an export imports neither torch nor transformers' models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice

import numpy as np

from ..data.targets import MULTI_LABEL, REGRESSION
from ..tokenization import MODEL_INPUTS, encode_words, model_input_names

# Rows per batch: on the 2-core CPU, 32 sorted rows ran MiniLM and MPNet taggers fastest of 8..128
# (benchmarks/results/predict_speed_cpu.md, batch-size sweep).
BATCH_SIZE = 32
# Inputs per chunk, in batches: sorted within a chunk, written when the whole chunk is done. 64 batches of 32 CoNLL
# sentences pad 5% of their tokens, 16 pad 18%.
CHUNK_BATCHES = 64


def length_sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Row indices shortest first (ties in input order), cut into batches of `batch_size`."""
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def padded(
    rows: dict[str, list], indices: list[int], pad_id: int, columns: tuple[str, ...] = MODEL_INPUTS
) -> dict[str, np.ndarray]:
    """The model inputs (`columns`) of `rows[...][i]` for `i` in `indices` as int64 arrays, padded on the right to the
    longest of them (the model handles either side; the right keeps each row's positions where the tokenizer put
    them): `input_ids` with `pad_id`, `word_ids` with -1 (no word), the others with 0."""
    longest = max(len(rows["input_ids"][i]) for i in indices)
    pad_values = {"input_ids": pad_id, "word_ids": -1}
    batch = {}
    for column in (c for c in columns if c in rows):
        array = np.full((len(indices), longest), pad_values.get(column, 0), dtype=np.int64)
        for place, row in enumerate(indices):
            array[place, : len(rows[column][row])] = rows[column][row]
        batch[column] = array
    return batch


def as_tensors(batch: dict[str, np.ndarray], device=None) -> dict:
    """A batch of arrays as the torch tensors a PyTorch model takes, on `device` (on the CPU: sharing their memory)."""
    import torch

    return {name: torch.from_numpy(array).to(device) for name, array in batch.items()}


def run_on_arrays(module, batch: dict[str, np.ndarray]):
    """A PyTorch `module`'s outputs on the tensors of `batch`, on its device (where it names one), without autograd."""
    import torch

    with torch.inference_mode():
        return module(**as_tensors(batch, getattr(module, "device", None)))


def as_array(logits) -> np.ndarray:
    """Logits as a float32 array on the CPU."""
    return logits.float().cpu().numpy()


def logits_of(model, batch: dict[str, np.ndarray]) -> np.ndarray:
    """`model`'s logits on `batch`, as a float32 array: an exported graph (`takes_arrays`) runs the arrays, a PyTorch
    model their tensors (`run_on_arrays`)."""
    if getattr(model, "takes_arrays", False):
        return model(**batch).logits
    return as_array(run_on_arrays(model, batch).logits)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities over the last axis, in float32."""
    shifted = np.exp(logits.astype(np.float32) - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def chunks(items: Iterable, size: int) -> Iterator[list]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def tag(
    run_logits: Callable[[dict], dict[str, np.ndarray]],
    id2labels: dict[str, dict],
    tokenizer,
    sentences: list[list[str]],
    batch_size: int = BATCH_SIZE,
    stride: int = 32,
    readout: str = "first",
) -> dict[str, list[list[str]]]:
    """One tag per word of each pre-split sentence, for each head: `run_logits(batch)` returns `{head: logits}` for a
    batch of arrays (`padded`, with the boolean `logits_mask` of the positions read, and `word_ids` where the heads'
    word `readout` pools sub-tokens). Long sentences go through overlapping windows (`data.encode_words`, which also
    gives the input twice for an `echo-` readout), each word tagged by the window that scores it."""
    limit = min(tokenizer.model_max_length, 512)
    sentences = [list(words) for words in sentences]  # a dataset's column, too
    rows, _ = encode_words(tokenizer, sentences, limit, stride, readout)
    tags = {name: [["O"] * len(words) for words in sentences] for name in id2labels}
    for indices in length_sorted_batches([len(ids) for ids in rows["input_ids"]], batch_size):
        batch = padded(rows, indices, pad_id(tokenizer), model_input_names(readout))
        batch["logits_mask"] = padded({"input_ids": rows["scored"]}, indices, 0)["input_ids"].astype(
            bool
        )  # words' first pieces
        for name, scores in run_logits(batch).items():
            predicted = scores.argmax(-1).tolist()
            for place, row in enumerate(indices):
                for position, (word, scored) in enumerate(zip(rows["word_ids"][row], rows["scored"][row])):
                    if scored:
                        tags[name][rows["sentence"][row]][word] = id2labels[name][predicted[place][position]]
    return tags


def predict_tags(
    model, tokenizer, sentences: list[list[str]], batch_size: int = BATCH_SIZE, stride: int = 32
) -> list[list[str]]:
    """One tag per word for pre-split sentences with a token-classification checkpoint, each word read as its
    config's `word_readout` says (a stock tagger's config has none: the first sub-token)."""
    return tag(
        lambda batch: {"": logits_of(model, batch)},
        {"": model.config.id2label},
        tokenizer,
        sentences,
        batch_size,
        stride,
        word_readout_of(model.config),
    )[""]


def word_readout_of(config) -> str:
    """Which vector of each word a tagger's config reads (`DWAttConfig.word_readout`); "first" for a stock tagger's,
    which reads each token on its own and is read at words' first sub-tokens."""
    return getattr(config, "word_readout", "first")


def encode_texts(tokenizer, texts: list[str], pairs: list[str] | None = None) -> dict[str, list]:
    """Texts (and pairs) encoded as classification training encodes them: truncated to `MAX_TOKENS`, a pair from its
    longer side first."""
    from ..data.classification import MAX_TOKENS

    pairs = list(pairs) if pairs is not None else None
    return dict(tokenizer(list(texts), pairs, truncation="longest_first", max_length=MAX_TOKENS))


def class_probabilities(
    model, tokenizer, texts: list[str], pairs: list[str] | None = None, batch_size: int = BATCH_SIZE
) -> np.ndarray:
    """`(texts, classes)` probabilities of a text checkpoint, in input order (float32): a softmax over the classes, a
    sigmoid per class (multi-label), or the one output itself (regression), as its `problem_type` says."""
    rows = encode_texts(tokenizer, texts, pairs)
    problem_type = getattr(model.config, "problem_type", None)
    probabilities = np.empty((len(texts), model.config.num_labels), dtype=np.float32)
    for indices in length_sorted_batches([len(ids) for ids in rows["input_ids"]], batch_size):
        logits = logits_of(model, padded(rows, indices, pad_id(tokenizer))).astype(np.float32)
        if problem_type == MULTI_LABEL:
            probabilities[indices] = 1 / (1 + np.exp(-logits))
        elif problem_type == REGRESSION:
            probabilities[indices] = logits
        else:
            probabilities[indices] = softmax(logits)
    return probabilities


def split_pairs(tokenizer, texts: list[str]) -> tuple[list[str], list[str] | None]:
    """Texts as `dwatt predict` reads them: one holding the tokenizer's separator token (`first [SEP] second`) is a
    sentence pair."""
    separator = f" {tokenizer.sep_token} " if tokenizer.sep_token else None
    split = [text.split(separator, 1) if separator and separator in text else [text, ""] for text in texts]
    pairs = [second for _, second in split] if any(second for _, second in split) else None
    return [first for first, _ in split], pairs


def classify(model, tokenizer, texts: list[str], batch_size: int = BATCH_SIZE) -> list[dict]:
    """What a text checkpoint says of each text: its `label` and the class probabilities (`scores`, most likely
    first); multi-label: the `labels` whose probability is above 0.5, and the scores; regression: the `score`."""
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    firsts, pairs = split_pairs(tokenizer, texts)
    probabilities = class_probabilities(model, tokenizer, firsts, pairs, batch_size)
    problem_type = getattr(model.config, "problem_type", None)
    if problem_type == REGRESSION:
        return [{"score": row[0]} for row in probabilities.tolist()]
    results = []
    for row in probabilities.tolist():
        scores = dict(sorted(zip(names, row), key=lambda item: -item[1]))
        if problem_type == MULTI_LABEL:
            results.append({"labels": [name for name, p in scores.items() if p > 0.5], "scores": scores})
        else:
            results.append({"label": next(iter(scores)), "scores": scores})
    return results


def fill_masks(
    model, tokenizer, texts: list[str], top_k: int = 5, batch_size: int = BATCH_SIZE
) -> list[list[list[tuple[str, float]]]]:
    """For each text, for each mask token in it, the `top_k` most likely tokens with their probabilities."""
    mask = tokenizer.mask_token
    missing = [text for text in texts if mask not in text]
    if missing:
        raise ValueError(
            f"a masked-LM checkpoint fills masks: write {mask} where a word should go (not in {missing[0]!r})"
        )
    rows = dict(tokenizer(texts, truncation=True))
    filled: list = [None] * len(texts)
    for indices in length_sorted_batches([len(ids) for ids in rows["input_ids"]], batch_size):
        batch = padded(rows, indices, pad_id(tokenizer))
        masks = batch["input_ids"] == tokenizer.mask_token_id
        logits = logits_of(model, {**batch, "logits_mask": masks})  # logits at the masks only
        for place, row in enumerate(indices):
            probabilities = softmax(logits[place, np.flatnonzero(masks[place])])
            top = np.argsort(-probabilities, axis=-1, kind="stable")[:, :top_k]  # ties: the lower token id first
            filled[row] = [
                [(tokenizer.decode([int(i)]).strip(), float(p[i])) for i in ids] for ids, p in zip(top, probabilities)
            ]
    return filled


__all__ = [
    "BATCH_SIZE",
    "CHUNK_BATCHES",
    "as_array",
    "as_tensors",
    "chunks",
    "class_probabilities",
    "classify",
    "fill_masks",
    "length_sorted_batches",
    "logits_of",
    "predict_tags",
    "word_readout_of",
    "run_on_arrays",
    "softmax",
    "split_pairs",
    "tag",
]
