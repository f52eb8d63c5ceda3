"""Batched, length-sorted prediction (dwatt.serving.prediction): every output equals the sentence run alone (tags,
labels, scores, mask fills, long sentences in windows). Lines in and out of `dwatt predict`: test_lines."""

import pytest
import torch
from transformers import AutoTokenizer

from configuration_dwatt import FUSIONS
from dwatt import DWAttForMaskedLM, DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.data import load_tokenizer
from dwatt.serving.prediction import classify, fill_masks, length_sorted_batches, predict_tags

from .conftest import DECODER_CORPUS, save_tiny_backbone
from .helpers import SENTENCES, with_random_head


def short_tokenizer(folder):
    tokenizer = load_tokenizer(folder)
    tokenizer.model_max_length = 16  # the long sentence needs three windows
    return tokenizer


@pytest.mark.parametrize("fusion", FUSIONS)
def test_batched_tags_equal_each_sentence_alone_windows_included(fusion, tiny_backbone):
    torch.manual_seed(0)
    model = with_random_head(
        DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=7)
    )
    tokenizer = short_tokenizer(tiny_backbone)
    alone = [predict_tags(model, tokenizer, [words], batch_size=1)[0] for words in SENTENCES]
    for batch_size in (2, 3, 32):
        assert predict_tags(model, tokenizer, SENTENCES, batch_size=batch_size) == alone
    assert len(alone[3]) == 37 and len(set(map(tuple, alone))) > 1


def test_batched_tags_on_a_decoder_equal_each_sentence_alone(tiny_decoder):
    torch.manual_seed(0)
    model = with_random_head(DWAttForTokenClassification.from_backbone(str(tiny_decoder), num_labels=7))
    tokenizer = load_tokenizer(tiny_decoder)
    sentences = [line.split() for line in DECODER_CORPUS]
    alone = [predict_tags(model, tokenizer, [words], batch_size=1)[0] for words in sentences]
    assert predict_tags(model, tokenizer, sentences, batch_size=4) == alone


@pytest.mark.parametrize("backbone", ["tiny_backbone", "tiny_decoder"])
def test_batched_class_probabilities_equal_each_text_alone(backbone, request):
    folder = request.getfixturevalue(backbone)
    torch.manual_seed(0)
    model = with_random_head(DWAttForSequenceClassification.from_backbone(str(folder), num_labels=4))
    tokenizer = load_tokenizer(folder)
    texts = [" ".join(words) for words in SENTENCES] + DECODER_CORPUS
    alone = [classify(model, tokenizer, [text], batch_size=1)[0] for text in texts]
    together = classify(model, tokenizer, texts, batch_size=3)
    for one, many in zip(alone, together):
        assert one["label"] == many["label"]
        assert list(one["scores"]) == list(many["scores"])  # the same labels in the same order
        assert list(one["scores"].values()) == pytest.approx(list(many["scores"].values()), abs=1e-5)


def test_batched_mask_fills_equal_each_text_alone(tmp_path, tiny_backbone):
    folder = save_tiny_backbone(tmp_path / "mlm", "bert", vocab_size=16)
    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folder)
    torch.manual_seed(0)
    model = with_random_head(DWAttForMaskedLM.from_backbone(str(folder)))
    tokenizer = load_tokenizer(folder)
    texts = ["peter [MASK]", "eu rejects [MASK] call to boycott british [MASK] lamb", "[MASK]"]
    alone = [fill_masks(model, tokenizer, [text], batch_size=1)[0] for text in texts]
    together = fill_masks(model, tokenizer, texts, batch_size=2)
    assert [[[token for token, _ in mask] for mask in text] for text in together] == [
        [[token for token, _ in mask] for mask in text] for text in alone
    ]
    flat = [p for text in together for mask in text for _, p in mask]
    assert flat == pytest.approx([p for text in alone for mask in text for _, p in mask], abs=1e-5)


def test_batches_are_sorted_by_length_and_cut_to_size():
    assert length_sorted_batches([5, 1, 3, 1, 9], 2) == [[1, 3], [2, 0], [4]]
    with pytest.raises(ValueError, match="--batch-size must be >= 1"):
        length_sorted_batches([1], 0)


# Blank lines at the start, in the middle (empty and whitespace only) and at the end (an empty one, then one of
# spaces with no newline after it), CRLF line ends, a lone CR inside a line (part of it, as for `wc -l` and `paste`).
