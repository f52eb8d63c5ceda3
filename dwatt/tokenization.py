"""Tokenisation for the backbone: the tokenizer ready for pre-split words and batches, and pre-split words encoded as
in running text, in overlapping windows where a sentence is longer than the backbone reads at once.

Imports no dataset machinery, so that prediction starts quickly.
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from pathlib import Path

from specs_dwatt import word_readout_parts

from .atomic import read_json, write_json_atomically
from .auto import register_auto_classes

logger = logging.getLogger(__name__)

BYTE_LEVEL_BPE_MODELS = ("roberta", "longformer", "gpt2", "bart", "deberta")


_TOLD_ABOUT_PADDING: set[str] = set()


def load_tokenizer(name_or_path: str | Path, **kwargs):
    """
    A fast tokenizer ready for pre-split words and for batches: byte-level BPE ones of the RoBERTa and GPT-2
    families get `add_prefix_space`; one without a padding token (most decoder LLMs) pads with its end-of-sequence
    token, which is said once per tokenizer (the attention mask keeps padding out of every result).
    """
    from transformers import AutoConfig, AutoTokenizer

    register_auto_classes()  # a DWAtt checkpoint's folder holds its tokenizer: the Auto classes must know its config
    model_type = getattr(AutoConfig.from_pretrained(name_or_path, **kwargs), "model_type", "")
    if model_type in BYTE_LEVEL_BPE_MODELS:
        kwargs.setdefault("add_prefix_space", True)
    return _padding_ready(AutoTokenizer.from_pretrained(name_or_path, use_fast=True, **kwargs), name_or_path)


def load_saved_tokenizer(folder: str | Path, model_input_names: list[str] | None = None):
    """
    A tokenizer that `load_tokenizer` readied and saved (an export folder's), loaded by transformers' generic fast
    tokenizer: its `tokenizer.json` and special tokens say everything the encoding needs, and no model config is read,
    so neither torch nor transformers' models are imported. `model_input_names`: what it returns (token types only
    where the graph takes them).
    """
    from transformers import PreTrainedTokenizerFast

    kwargs = {"model_input_names": list(model_input_names)} if model_input_names else {}
    return _padding_ready(PreTrainedTokenizerFast.from_pretrained(folder, **kwargs), folder)


def save_tokenizer(tokenizer, folder: str | Path) -> None:
    """
    `tokenizer.save_pretrained(folder)`, with what the encoding did written into `tokenizer_config.json`
    (`encoding_settings`): releases read the same files differently where a setting is left to the tokenizer class's
    default. transformers 5 saves no `add_eos_token`, and 4.x's `GemmaTokenizerFast` then appends no `<eos>` where
    EmbeddingGemma's training did; 4.x's `LlamaTokenizerFast` adds `<s>` unless told not to. Pinned, the text a user
    gives a checkpoint becomes the ids it was trained on in every release. The generic tokenizer that transformers 5
    names `TokenizersBackend` (everything in `tokenizer.json`) is saved as `PreTrainedTokenizerFast`, its name in every
    release: 4.x knows no other.
    """
    tokenizer.save_pretrained(folder)
    path = Path(folder) / "tokenizer_config.json"
    config = read_json(path) | encoding_settings(tokenizer)
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    write_json_atomically(path, config)
    name_tokenizer_in_model_config(Path(folder), config.get("tokenizer_class"))


def name_tokenizer_in_model_config(folder: Path, tokenizer_class: str | None) -> None:
    """A DWAtt checkpoint's config.json names its tokenizer's class: transformers 4.x's `pipeline()` loads a
    tokenizer only for a config whose type it maps to one, or that names one (a remote-code model's type it does not
    know), and would otherwise run the model with none."""
    path = folder / "config.json"
    if tokenizer_class is None or not path.is_file():
        return
    saved = read_json(path)
    if saved.get("model_type") == "dwatt" and not saved.get("tokenizer_class"):
        write_json_atomically(path, saved | {"tokenizer_class": tokenizer_class})


def encoding_settings(tokenizer) -> dict:
    """What `tokenizer` does that a release may otherwise default differently: whether it adds its beginning- and
    end-of-sequence tokens (read off an encoding, so whatever template its files hold is what is pinned), the sides it
    pads and truncates on, what it returns (4.x's generic tokenizer returns token types, which a decoder's `forward`
    refuses) and (byte-level BPE) whether the first word gets a prefix space."""
    ids = tokenizer("a")["input_ids"]
    settings = {"padding_side": tokenizer.padding_side, "truncation_side": tokenizer.truncation_side}
    settings["model_input_names"] = list(tokenizer.model_input_names)
    if tokenizer.bos_token_id is not None:
        settings["add_bos_token"] = bool(ids) and ids[0] == tokenizer.bos_token_id
    if tokenizer.eos_token_id is not None:
        settings["add_eos_token"] = bool(ids) and ids[-1] == tokenizer.eos_token_id
    prefix_space = getattr(tokenizer, "add_prefix_space", None)
    if isinstance(prefix_space, bool):
        settings["add_prefix_space"] = prefix_space
    return settings


def _padding_ready(tokenizer, name_or_path):
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                f"the tokenizer of {name_or_path} has neither a padding nor an end-of-sequence token; "
                "give it a pad_token before batching"
            )
        tokenizer.pad_token = tokenizer.eos_token
        if str(name_or_path) not in _TOLD_ABOUT_PADDING:
            _TOLD_ABOUT_PADDING.add(str(name_or_path))
            logger.warning(
                f"the tokenizer of {name_or_path} has no padding token; padding with its end-of-sequence "
                f"token {tokenizer.eos_token!r} (masked out everywhere)"
            )
    return tokenizer


_SPACING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> drops_running_text_spaces


def drops_running_text_spaces(tokenizer) -> bool:
    """
    Whether the tokenizer, given words one by one (`is_split_into_words`), encodes a word without the space it has
    in running text: byte-level BPE without a prefix space (most decoder LLMs) turns `Blackburn` into `Black`,
    `burn` instead of `ĠBlack`, `burn`. WordPiece and SentencePiece tokenizers, and byte-level ones with
    `add_prefix_space`, do not. Probed once per tokenizer on a second word, which carries a space in running text.
    """
    if tokenizer not in _SPACING:
        words = ["Peter", "Blackburn"]
        alone = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
        running = tokenizer(" ".join(words), add_special_tokens=False)

        def second_word(encoding) -> list[int]:
            return [i for i, word in zip(encoding["input_ids"], encoding.word_ids()) if word == 1]

        _SPACING[tokenizer] = second_word(alone) != second_word(running)
    return _SPACING[tokenizer]


def as_in_running_text(tokenizer, sentences: list[list[str]]) -> list[list[str]]:
    """Pre-split sentences as the tokenizer must get them to encode each word as in running text: unchanged, or
    (`drops_running_text_spaces`) every word after the first with its leading space."""
    if not drops_running_text_spaces(tokenizer):
        return sentences
    return [[word if i == 0 else " " + word for i, word in enumerate(words)] for words in sentences]


def encode_words(
    tokenizer, sentences: list[list[str]], max_length: int, stride: int = 32, readout: str = "first"
) -> tuple[dict, dict]:
    """
    Sub-word windows of pre-split sentences. A sentence longer than `max_length` sub-words becomes several rows
    (windows), consecutive ones overlapping by `stride` sub-words, so no word is lost. Besides the tokenizer's
    outputs, each row has `word_ids` (-1 for special tokens), `sentence` (index into `sentences`), `window`
    (0, 1, ...) and `scored`: 1 at the first sub-token of each word in the one window that scores it, so every word
    is scored exactly once: the first window where its first sub-token appears or, for a `readout` that reads the
    whole word (`specs_dwatt.WORD_READOUTS`: all but "first"), the first window that holds all of its sub-tokens.
    An `echo-` readout gives each window's words twice between the special tokens (half the room each) and marks
    the words of the second copy only: the first copy's `word_ids` are -1. Each word is encoded as in running text
    (`as_in_running_text`: with its leading space, for byte-level BPE tokenizers that would drop it). Words the
    tokenizer turns into no sub-token at all (zero-width characters, say) are encoded as its unknown token, so none
    is lost.
    Returns the rows and counts of what was done (`windowed_sentences`, `extra_windows`, `unknown_words`).
    """
    echo, pooling = word_readout_parts(readout)
    specials = tokenizer.num_special_tokens_to_add()
    room = max_length - specials
    if echo:
        room //= 2
    if room < 2:
        raise ValueError(f"max_length {max_length} leaves no room for words next to the special tokens")
    stride = min(stride, room // 2)
    unknown_words = 0
    for attempt in range(2):
        encoded = tokenizer(
            as_in_running_text(tokenizer, sentences),
            is_split_into_words=True,
            truncation=True,
            max_length=room + specials,
            stride=stride,
            return_overflowing_tokens=True,
        )
        owners = encoded.pop("overflow_to_sample_mapping")
        seen_words: dict[int, set] = {}
        for row, sentence in enumerate(owners):
            seen_words.setdefault(sentence, set()).update(w for w in encoded.word_ids(row) if w is not None)
        vanished = {
            s: [w for w in range(len(words)) if w not in seen_words.get(s, set())] for s, words in enumerate(sentences)
        }
        vanished = {s: ws for s, ws in vanished.items() if ws}
        if not vanished or attempt == 1:
            break
        unknown_words = sum(len(ws) for ws in vanished.values())
        sentences = [list(words) for words in sentences]
        for sentence, words in vanished.items():
            for word in words:
                sentences[sentence][word] = tokenizer.unk_token
    rows = {key: list(values) for key, values in encoded.items()}
    word_ids_of = [encoded.word_ids(row) for row in range(len(owners))]
    if echo:
        word_ids_of = [_repeat_words(rows, row, word_ids) for row, word_ids in enumerate(word_ids_of)]
    complete = _complete_windows(owners, word_ids_of) if echo or pooling != "first" else None
    rows.update(word_ids=[], sentence=[], window=[], scored=[])
    scored_words: dict[int, set] = {}
    window_of: dict[int, int] = {}
    for row, sentence in enumerate(owners):
        word_ids = word_ids_of[row]
        done = scored_words.setdefault(sentence, set())
        scored = []
        for position, word in enumerate(word_ids):
            first_piece = word is not None and (position == 0 or word_ids[position - 1] != word)
            is_scored = first_piece and word not in done and (complete is None or (row, word) in complete)
            if is_scored:
                done.add(word)
            scored.append(int(is_scored))
        window_of[sentence] = window_of.get(sentence, -1) + 1
        rows["word_ids"].append([-1 if w is None else w for w in word_ids])
        rows["sentence"].append(sentence)
        rows["window"].append(window_of[sentence])
        rows["scored"].append(scored)
    counts = {
        "windowed_sentences": sum(1 for n in window_of.values() if n > 0),
        "extra_windows": sum(window_of.values()),
        "unknown_words": unknown_words,
    }
    return rows, counts


def _repeat_words(rows: dict[str, list], row: int, word_ids: list) -> list:
    """Row `row` of the tokenizer's outputs with its words given twice between its special tokens (in place), and
    the word ids of the new row: None in the first copy, so that only the second is read."""
    inside = [position for position, word in enumerate(word_ids) if word is not None]
    start, end = inside[0], inside[-1] + 1
    for values in rows.values():
        values[row] = values[row][:end] + values[row][start:end] + values[row][end:]
    return word_ids[:start] + [None] * (end - start) + word_ids[start:]


def _complete_windows(owners: list[int], word_ids_of: list[list]) -> set[tuple[int, int]]:
    """The `(row, word)` pairs whose window holds all of the word's sub-tokens: as many as any window of its sentence
    holds (a window's edge can cut a word that the overlap of the next one holds whole)."""
    counts = [Counter(word for word in word_ids if word is not None) for word_ids in word_ids_of]
    most: dict[tuple[int, int], int] = {}
    for sentence, held in zip(owners, counts):
        for word, pieces in held.items():
            most[sentence, word] = max(most.get((sentence, word), 0), pieces)
    return {
        (row, word)
        for row, (sentence, held) in enumerate(zip(owners, counts))
        for word, pieces in held.items()
        if pieces == most[sentence, word]
    }


MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""The tokenizer's outputs a DWAtt model takes (a backbone without token types ignores them)."""


def model_input_names(word_readout: str = "first") -> tuple[str, ...]:
    """The encoded columns a tagger with this word readout (`DWAttConfig.word_readout`) takes: `MODEL_INPUTS`, and
    `word_ids` where it pools a word's sub-tokens (all readouts but the first sub-token's)."""
    echo, pooling = word_readout_parts(word_readout)
    return MODEL_INPUTS if not echo and pooling == "first" else (*MODEL_INPUTS, "word_ids")


__all__ = [
    "BYTE_LEVEL_BPE_MODELS",
    "MODEL_INPUTS",
    "as_in_running_text",
    "drops_running_text_spaces",
    "encode_words",
    "encoding_settings",
    "load_saved_tokenizer",
    "load_tokenizer",
    "model_input_names",
    "save_tokenizer",
]
