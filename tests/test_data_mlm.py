"""Masked-LM data (dwatt.data.mlm): WikiText-2 under its standard file names, fixed-length blocks."""

import pytest

from dwatt.data import group_texts_for_mlm, load_wikitext2


def test_wikitext_accepts_standard_names_and_reports_missing_files(tmp_path):
    (tmp_path / "wiki.train.raw").write_text(" = Title = \nSome text .\n")
    (tmp_path / "wiki.valid.tokens").write_text("valid line\n")
    data = load_wikitext2(tmp_path)
    assert data["train"]["text"] == [" = Title = ", "Some text ."] and set(data) == {"train", "validation"}
    with pytest.raises(FileNotFoundError, match="no WikiText-2 files"):
        load_wikitext2(tmp_path / "nothing")


def test_mlm_blocks_have_fixed_length(word_piece_tokenizer):
    from datasets import Dataset

    lines = Dataset.from_dict({"text": ["eu rejects german", "peter blackburn", "eu"] * 5})
    blocks = group_texts_for_mlm(lines, word_piece_tokenizer, block_size=8)
    assert len(blocks) > 0 and all(len(ids) == 8 for ids in blocks["input_ids"])
