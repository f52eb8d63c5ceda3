"""Reading data files (dwatt.data.files): numbered UTF-8 lines (a byte-order mark read as nothing, Windows line ends
dropped, bad bytes named by file, line and byte), JSON lines (each bad line named), folders told from Hub ids."""

import json

import pytest

from dwatt.data.files import DataFormatError, is_local_path, json_objects, numbered_lines


def test_numbered_lines_drop_a_leading_mark_and_line_ends_and_name_bad_bytes(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("\ufefffirst\r\nsecond \ufeff\n\nfourth".encode())
    assert list(numbered_lines(path)) == [
        (1, "first"),
        (2, "second \ufeff"),
        (3, ""),
        (4, "fourth"),
    ]  # a mark mid-file stays
    path.write_bytes(b"fine\nM\xfcnchen\n")
    with pytest.raises(DataFormatError, match=r"a\.txt:2: not UTF-8 \(invalid start byte at byte 1\)"):
        list(numbered_lines(path))


def test_json_lines_skip_blank_lines_keep_a_line_separator_inside_a_string_and_name_bad_lines(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"text": "a\u2028b"}, ensure_ascii=False) + "\n\n" + json.dumps({"text": "c"}) + "\n")
    assert list(json_objects(path)) == [(1, {"text": "a\u2028b"}), (3, {"text": "c"})]
    for text, message in (
        ('{"text": "a"}\n{"text"\n', r"rows\.jsonl:2: not a JSON row \("),
        ('{"text": "a"}\n["a"]\n', r"rows\.jsonl:2: expected a JSON object per line, got list"),
    ):
        path.write_text(text)
        with pytest.raises(DataFormatError, match=message):
            list(json_objects(path, "row"))


def test_hub_ids_are_not_mistaken_for_folders(tmp_path):
    assert not is_local_path("conll2003") and not is_local_path("eriktks/conll2003")
    assert is_local_path(None) and is_local_path(tmp_path) and is_local_path(str(tmp_path))
    assert is_local_path("./data/conll") and is_local_path("/no/such/folder")
