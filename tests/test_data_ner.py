"""NER data (dwatt.data.ner): CoNLL and WikiAnn loaders on good and malformed files, label alignment on sub-tokens, long
sentences cut into windows."""

import json

import pytest
from datasets import concatenate_datasets

from dwatt.data import (
    CONLL_LABELS,
    WIKIANN_LABELS,
    DataFormatError,
    load_conll2003,
    load_ner_dataset,
    load_tagged_folder,
    load_wikiann,
    load_wikitext2,
    read_conll,
    tokenize_and_align,
)
from dwatt.sampling import few_shot_split

GOOD_TWO_COLUMNS = "-DOCSTART- O\n\nEU B-ORG \nrejects O \nGerman B-MISC \n\nPeter B-PER\nBlackburn I-PER\n"
GOOD_FOUR_COLUMNS = "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"


def write(folder, name, text, encoding="utf-8"):
    path = folder / name
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


def test_two_and_four_column_files_read_the_same_way(tmp_path):
    two = read_conll(write(tmp_path, "a.txt", GOOD_TWO_COLUMNS), CONLL_LABELS)
    assert [s["tokens"] for s in two] == [["EU", "rejects", "German"], ["Peter", "Blackburn"]]
    assert [s["tags"] for s in two] == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"]]
    assert [s["line"] for s in two] == [3, 7]
    four = read_conll(write(tmp_path, "b.txt", GOOD_FOUR_COLUMNS), CONLL_LABELS)
    assert four[0]["tokens"] == ["EU", "rejects"] and four[0]["tags"] == ["B-ORG", "O"]


def test_windows_line_endings_are_read_like_unix_ones(tmp_path):
    path = write(tmp_path, "crlf.txt", GOOD_TWO_COLUMNS.replace("\n", "\r\n"))
    assert read_conll(path, CONLL_LABELS) == read_conll(write(tmp_path, "lf.txt", GOOD_TWO_COLUMNS), CONLL_LABELS)


BOM = "\ufeff"


@pytest.mark.parametrize(
    "text",
    [
        GOOD_TWO_COLUMNS,
        GOOD_TWO_COLUMNS.replace("-DOCSTART- O\n\n", ""),
        GOOD_TWO_COLUMNS.replace(" ", "\t").replace("\n", "\r\n"),
    ],
    ids=["docstart-first", "token-first", "tabs-and-crlf"],
)
def test_a_leading_byte_order_mark_is_read_as_nothing(tmp_path, text):
    plain = read_conll(write(tmp_path, "plain.txt", text), CONLL_LABELS)
    marked = read_conll(write(tmp_path, "marked.txt", BOM + text), CONLL_LABELS)
    assert marked == plain
    assert plain[0]["tokens"][0] == "EU" and not any(BOM in t for s in marked for t in s["tokens"])


def test_a_byte_order_mark_is_dropped_by_every_text_loader(tmp_path):
    for folder in ("conll", "wikiann/sw", "wikitext"):
        (tmp_path / folder).mkdir(parents=True)
    for conll_name, wikiann_name in (("train.txt", "train.txt"), ("valid.txt", "dev.txt"), ("test.txt", "test.txt")):
        write(tmp_path / "conll", conll_name, BOM + GOOD_TWO_COLUMNS)
        write(tmp_path / "wikiann/sw", wikiann_name, BOM + "Nairobi B-LOC\nni O\n")
        write(tmp_path / "wikitext", conll_name, BOM + " = Valkyria = \nline two\n")
    conll = load_conll2003(tmp_path / "conll")
    assert conll["train"][0]["tokens"] == ["EU", "rejects", "German"] and len(conll["train"]) == 2
    assert load_wikiann("sw", tmp_path / "wikiann")["validation"][0]["tokens"] == ["Nairobi", "ni"]
    assert load_wikitext2(tmp_path / "wikitext")["test"]["text"] == [" = Valkyria = ", "line two"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("EU B-ORG\nrejects\n", r"bad\.txt:2: a token without a tag"),
        ("EU B-ORG\nrejects O\nGerman B-FOOD\n", r"bad\.txt:3: unknown tag 'B-FOOD'"),
        ("", r"bad\.txt:1: no sentences"),
        ("-DOCSTART- O\n\n-DOCSTART- O\n", r"bad\.txt:1: no sentences"),
        (b"EU B-ORG\nM\xfcnchen B-LOC\n", r"bad\.txt:2: not UTF-8"),
    ],
)
def test_malformed_files_name_the_file_and_line(tmp_path, content, message):
    with pytest.raises(DataFormatError, match=message):
        read_conll(write(tmp_path, "bad.txt", content), CONLL_LABELS)


def test_vendored_conll_has_the_documented_sizes():
    data = load_conll2003()
    assert {k: len(v) for k, v in data.items()} == {"train": 14041, "validation": 3250, "test": 3453}
    assert data["train"].features["ner_tags"].feature.names == list(CONLL_LABELS)
    assert sum(len(t) for t in data["validation"]["tokens"]) == 51362


def test_local_folders_load_for_conll_and_wikiann(tmp_path):
    for name in ("train.txt", "valid.txt"):
        write(tmp_path, name, GOOD_TWO_COLUMNS)
    assert set(load_conll2003(tmp_path)) == {"train", "validation"}
    (tmp_path / "xx").mkdir()
    for name in ("train.txt", "dev.txt", "test.txt"):
        write(tmp_path / "xx", name, "Peter B-PER\nBlackburn I-PER\n")
    wikiann = load_wikiann("xx", tmp_path)
    assert set(wikiann) == {"train", "validation", "test"}
    with pytest.raises(DataFormatError, match=r"train\.txt:1: unknown tag 'B-MISC'"):
        write(tmp_path / "xx", "train.txt", "EU B-MISC\n")
        load_wikiann("xx", tmp_path)
    with pytest.raises(FileNotFoundError, match="no validation split"):
        (tmp_path / "valid.txt").unlink()
        load_conll2003(tmp_path)


def test_labels_sit_on_first_sub_tokens_or_on_all_of_them(tmp_path, word_piece_tokenizer):
    write(tmp_path, "train.txt", "Peter B-PER\nBlackburn I-PER\nrejects O\n\nBlackburn B-ORG\n")
    write(tmp_path, "valid.txt", "EU B-ORG\n")
    train = load_conll2003(tmp_path)["train"]
    first = tokenize_and_align(train, word_piece_tokenizer)
    # [CLS] peter black ##burn rej ##ects [SEP]
    assert first[0]["labels"] == [-100, 1, 2, -100, 0, -100, -100]
    assert first[0]["word_ids"] == [-1, 0, 1, 1, 2, 2, -1]
    every = tokenize_and_align(train, word_piece_tokenizer, label_all_subtokens=True)
    assert every[0]["labels"] == [-100, 1, 2, 2, 0, 0, -100]
    assert every[1]["labels"] == [-100, 3, 4, -100]  # B-ORG continues as I-ORG


def test_long_sentences_become_windows_reported_not_silent(tmp_path, word_piece_tokenizer, caplog):
    write(tmp_path, "train.txt", "peter B-PER\n" * 20)
    write(tmp_path, "valid.txt", "EU B-ORG\n")
    train = load_conll2003(tmp_path)["train"]
    with caplog.at_level("WARNING"):
        tokenized = tokenize_and_align(train, word_piece_tokenizer, max_length=8)
    assert all(len(ids) <= 8 for ids in tokenized["input_ids"]) and len(tokenized) > 1
    assert sum(label == 1 for row in tokenized["labels"] for label in row) == 20  # every word scored once
    assert "split 1 sentences longer than 8 sub-words into" in caplog.text


def test_any_number_of_columns_reads_the_tag_from_the_last(tmp_path):
    sentences = read_conll(write(tmp_path, "three.tsv", "EU\tNNP\tB-ORG\nrejects\tVBZ\tO\n"))
    assert sentences == [{"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"], "line": 1}]


FOOD = "Pasta B-FOOD\nwith O\nbasil B-FOOD\nleaves I-FOOD\nfrom O\nAcme B-PRODUCT\n\nAspirin B-DRUG\n"


def test_a_folder_of_ones_own_takes_its_tag_set_from_its_files(tmp_path, caplog):
    folder = tmp_path / "recipes"
    folder.mkdir()
    write(folder, "train.conll", FOOD * 3)
    write(folder, "dev.txt", "Aspirin B-DRUG\nin O\nsoup B-DISH\n")
    data = load_ner_dataset("recipes", str(folder))
    names = data["train"].features["ner_tags"].feature.names
    assert names == ["O", "B-FOOD", "I-FOOD", "B-PRODUCT", "I-PRODUCT", "B-DRUG", "I-DRUG", "B-DISH", "I-DISH"]
    assert set(data) == {"train", "validation"}
    assert "absent from the training split: B-DISH" in caplog.text  # kept, scored as an error, said


def test_json_lines_iobes_and_plain_tags_are_read_and_bad_rows_named(tmp_path):
    folder = tmp_path / "pos"
    folder.mkdir()
    rows = [{"tokens": ["Dogs", "bark"], "tags": ["NOUN", "VERB"]}, {"tokens": ["Cats"], "ner_tags": ["NOUN"]}]
    write(folder, "train.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    write(folder, "validation.jsonl", json.dumps(rows[0]) + "\n")
    assert load_tagged_folder(folder)["train"].features["ner_tags"].feature.names == ["NOUN", "VERB"]
    write(folder, "train.jsonl", json.dumps({"tokens": ["a", "b"], "tags": ["S-X"]}) + "\n")
    with pytest.raises(DataFormatError, match=r"train\.jsonl:1: 2 tokens but 1 tags"):
        load_tagged_folder(folder)
    write(folder, "train.jsonl", json.dumps({"tokens": ["a"], "tags": [3]}) + "\n")
    with pytest.raises(DataFormatError, match=r"train\.jsonl:1: tags must be tag names"):
        load_tagged_folder(folder)
    write(folder, "train.jsonl", json.dumps({"tokens": ["a", "b"], "tags": ["U-X", "O"]}) + "\n")
    with pytest.raises(DataFormatError, match=r"train\.jsonl:1: tag 'U-X' is BILOU; rename"):
        load_tagged_folder(folder)


def test_a_folder_names_the_files_it_looked_for_or_the_two_it_cannot_choose_between(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    write(folder, "train.txt", "EU B-ORG\n")
    with pytest.raises(FileNotFoundError, match=r"no validation split \(looked for dev/valid/validation with"):
        load_tagged_folder(folder)
    write(folder, "dev.txt", "EU B-ORG\n")
    write(folder, "valid.iob", "EU B-ORG\n")
    with pytest.raises(DataFormatError, match=r"2 files for the validation split \(dev\.txt, valid\.iob\)"):
        load_tagged_folder(folder)


def test_a_folder_with_conll_tags_keeps_conll_label_order_for_the_types_it_has(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    write(folder, "train.txt", "EU B-ORG\nPeter B-PER\nin O\nParis B-LOC\nand O\nGerman B-MISC\n")
    write(folder, "valid.txt", "EU B-ORG\n")
    assert load_tagged_folder(folder)["train"].features["ner_tags"].feature.names == list(CONLL_LABELS)
    write(folder, "train.txt", "EU B-ORG\nPeter B-PER\nin O\nParis B-LOC\n")
    data = load_tagged_folder(folder)
    assert data["train"].features["ner_tags"].feature.names == list(WIKIANN_LABELS)  # no MISC: none to sample
    assert few_shot_split(concatenate_datasets([data["train"]] * 9), 3, 0)[0].num_rows == 9  # 3 x 3 types
