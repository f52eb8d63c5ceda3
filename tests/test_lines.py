"""What a line in gives out (dwatt.serving.lines): every input line gets exactly one output line in its place (blank
lines, CRLF, a lone CR, stdin as a file), for every task and for shared heads. The command around it: test_cli_predict."""

import io
import json

import pytest
import torch
from transformers import AutoTokenizer

from dwatt import DWAttForMaskedLM, DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.cli import main

from .conftest import save_tiny_backbone
from .helpers import with_random_head


def rounded(value):
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    return [rounded(item) for item in value] if isinstance(value, list) else value


@pytest.fixture(scope="module")
def saved_models(tiny_backbone, tmp_path_factory) -> dict:
    """A saved tagger (two), classifier and masked LM on the tiny backbone, with its tokenizer (read, never changed,
    by the tests of this module)."""
    folders = {}
    tmp_path = tmp_path_factory.mktemp("lines-models")
    torch.manual_seed(0)
    mlm_backbone = save_tiny_backbone(tmp_path / "mlm-backbone", "bert")
    for task, model in (
        ("ner", DWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=7)),
        ("ner-2", DWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion="concat", num_labels=7)),
        ("cls", DWAttForSequenceClassification.from_backbone(str(tiny_backbone), num_labels=3)),
        ("mlm", DWAttForMaskedLM.from_backbone(str(mlm_backbone))),
    ):
        folders[task] = tmp_path / task
        with_random_head(model).save_pretrained(folders[task])
        AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folders[task])
    return folders


LINES = ["", "peter blackburn [MASK]", "  ", "eu rejects [MASK] call", "", "brus\rsels [MASK]", "lamb [MASK]", "", " "]


RAW = "\r\n".join(LINES)


@pytest.mark.parametrize("task", ["ner", "cls", "mlm", "heads"])
@pytest.mark.parametrize("form", ["file", "jsonl"])
def test_every_input_line_gets_exactly_one_output_line_in_its_place(task, form, saved_models, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_bytes(RAW.encode())
    blank = [not line.strip() for line in LINES]
    if task == "heads":
        argv = ["predict", "--heads", f"{saved_models['ner']},{saved_models['ner-2']}"]
    else:
        argv = ["predict", str(saved_models[task])]
    assert main([*argv, f"--{form}", str(source), "--quiet"]) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert out.endswith("\n") and "\r\n" not in out  # lines end at \n; a lone \r inside a line is echoed as read
    printed = out[:-1].split("\n")
    assert len(printed) == len(LINES) == 9 and f"{sum(blank)} blank lines, each given an empty record" in err
    alone = {}  # each non-blank line run alone, in the same form
    for number, line in enumerate(LINES, start=1):
        if not blank[number - 1]:
            (tmp_path / "one.txt").write_text(line + "\n", newline="")
            assert main([*argv, f"--{form}", str(tmp_path / "one.txt"), "--quiet"]) == 0
            alone[number] = capsys.readouterr().out[:-1]
    for number, (line, output) in enumerate(zip(LINES, printed), start=1):
        if form == "file":
            assert (output == "") if blank[number - 1] else (output == alone[number]), (number, output)
            if task == "ner" and not blank[number - 1]:
                assert len(output.split()) == len(line.split())  # a tag per word
            continue
        record, expected = json.loads(output), None if blank[number - 1] else json.loads(alone[number])
        assert record["line"] == number and record["text"] == line
        if expected is None:  # an empty record: the task's fields, empty
            heads = {"ner": [], "ner-2": []}  # named by their folders
            empty = {
                "ner": {"words": [], "tags": []},
                "heads": {"words": [], "tags": heads},
                "cls": {"label": None, "scores": {}},
                "mlm": {"masks": []},
            }[task]
            assert record == {"line": number, "text": line} | empty
        else:  # as the line alone (probabilities to float rounding: the batch differs)
            assert rounded(record | {"line": 0}) == rounded(expected | {"line": 0})


def test_stdin_lines_end_at_newline_only_as_in_a_file(saved_models, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(RAW.encode()), encoding="utf-8"))
    assert main(["predict", str(saved_models["cls"]), "--jsonl", "--quiet"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [record["text"] for record in records] == LINES and [r["line"] for r in records] == list(range(1, 10))
    assert [record["label"] is None for record in records] == [not line.strip() for line in LINES]
