"""Tokenizers (dwatt.tokenization): pre-split words reach a byte-level BPE tokenizer as in running text, windows over long
sentences, a tokenizer without a padding token pads with end-of-sequence and says so once, and a saved tokenizer pins what
its encoding did."""

import json
import logging

import pytest

from dwatt.data import drops_running_text_spaces, encode_words, load_tokenizer
from dwatt.tokenization import as_in_running_text, encoding_settings, save_tokenizer

from .conftest import DECODER_CORPUS
from .tokenizer_families import FAMILIES, conll_sentences, write_family_tokenizer


def test_pre_split_words_reach_a_byte_level_bpe_tokenizer_as_in_running_text(tiny_decoder, tiny_backbone):
    tokenizer = load_tokenizer(tiny_decoder)
    assert drops_running_text_spaces(tokenizer)
    sentences = [line.split() for line in DECODER_CORPUS]
    rows, _ = encode_words(tokenizer, sentences, max_length=512)
    for words, ids in zip(sentences, rows["input_ids"]):
        assert ids == tokenizer(" ".join(words))["input_ids"]  # `Blackburn` is `ĠBla ck burn`, not `B la ck burn`
    # Windows over a long sentence carry the same pieces, each word scored once.
    long = " ".join(DECODER_CORPUS).split()
    windows, counts = encode_words(tokenizer, [long], max_length=24, stride=4)
    assert counts["extra_windows"] >= 2
    running = tokenizer(" ".join(long))["input_ids"]
    for ids in windows["input_ids"]:
        assert any(running[start : start + len(ids)] == ids for start in range(len(running)))
    assert sum(map(sum, windows["scored"])) == len(long)
    # A WordPiece tokenizer is left as it is.
    assert not drops_running_text_spaces(load_tokenizer(tiny_backbone))


def test_a_tokenizer_without_padding_pads_with_end_of_sequence_and_says_so_once(tiny_decoder, caplog):
    import dwatt.tokenization

    dwatt.tokenization._TOLD_ABOUT_PADDING.discard(str(tiny_decoder))
    with caplog.at_level(logging.WARNING, logger="dwatt.tokenization"):
        first, second = load_tokenizer(tiny_decoder), load_tokenizer(tiny_decoder)
    assert first.pad_token == second.pad_token == "<|endoftext|>"
    said = [r.getMessage() for r in caplog.records if "no padding token" in r.getMessage()]
    assert said == [
        f"the tokenizer of {tiny_decoder} has no padding token; padding with its end-of-sequence token "
        "'<|endoftext|>' (masked out everywhere)"
    ]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_saved_tokenizer_pins_what_its_encoding_did_and_encodes_the_same_ids_reloaded(tmp_path, family):
    """Each family's tokenizer, read by dwatt and saved as a checkpoint saves it, records in tokenizer_config.json
    whether it added its BOS and EOS tokens (read off an encoding), its sides and its prefix space; loaded back by
    `AutoTokenizer`, it encodes running text and pre-split words to the ids it did before it was saved."""
    from transformers import AutoTokenizer

    trained = load_tokenizer(write_family_tokenizer(family, tmp_path / "hub"))
    save_tokenizer(trained, tmp_path / "saved")
    pinned = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())
    added_before, added_after = FAMILIES[family][4]
    if trained.bos_token is not None:
        assert pinned["add_bos_token"] is (added_before == [trained.bos_token])
    if trained.eos_token is not None:
        assert pinned["add_eos_token"] is (added_after == [trained.eos_token])
    assert (pinned["padding_side"], pinned["truncation_side"]) == (trained.padding_side, trained.truncation_side)
    sentences = conll_sentences(count=20)
    texts = [" ".join(words) for words in sentences]
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert reloaded(texts)["input_ids"] == trained(texts)["input_ids"]
    words = as_in_running_text(trained, sentences)
    assert (
        reloaded(words, is_split_into_words=True)["input_ids"] == trained(words, is_split_into_words=True)["input_ids"]
    )


def test_what_a_gemma_tokenizer_appends_is_pinned_where_transformers_5_saves_nothing_of_it(tmp_path):
    """transformers 5 saves no `add_eos_token`; 4.x's GemmaTokenizerFast then appends no <eos> where training did
    (EmbeddingGemma's tokenizer). The flags are written as the encoding shows them."""
    trained = load_tokenizer(write_family_tokenizer("gemma", tmp_path / "hub"))
    assert trained("a")["input_ids"][-1] == trained.eos_token_id
    settings = encoding_settings(trained)
    assert settings["add_bos_token"] is True and settings["add_eos_token"] is True
    trained.save_pretrained(tmp_path / "plain")
    assert "add_eos_token" not in json.loads((tmp_path / "plain" / "tokenizer_config.json").read_text())
