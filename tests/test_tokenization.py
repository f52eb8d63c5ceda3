"""Tokenizers (dwatt.tokenization): pre-split words reach a byte-level BPE tokenizer as in running text, windows over long
sentences, and a tokenizer without a padding token pads with end-of-sequence and says so once."""

import logging

from dwatt.data import drops_running_text_spaces, encode_words, load_tokenizer

from .conftest import DECODER_CORPUS


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
