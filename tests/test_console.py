"""What `dwatt train` prints: one bar, a summary (or its last line with --quiet), the Trainer's logs with --verbose."""

import json

import pytest

from dwatt.cli import main


def train(tiny_backbone, tiny_conll, output, *extra):
    return main(
        [
            "train",
            "--backbone",
            str(tiny_backbone),
            "--data-dir",
            str(tiny_conll),
            "--n-shot",
            "2",
            "--epochs",
            "3",
            "--batch-size",
            "4",
            "--output-dir",
            str(output),
            *extra,
        ]
    )


def test_default_console_is_one_bar_and_a_summary(tiny_backbone, tiny_conll, tmp_path, capsys):
    assert train(tiny_backbone, tiny_conll, tmp_path / "run", "--test") == 0
    out, err = capsys.readouterr()
    results = json.loads((tmp_path / "run/results.json").read_text())
    lines = out.strip().splitlines()
    assert lines[0] == f"dev scores at the best epoch ({results['best_epoch']:g}), 5 sentences:"
    assert lines[1].split() == ["type", "precision", "recall", "F1", "support"]
    for entity in results["entity_types"]:
        assert any(line.split()[0] == entity for line in lines)
    overall = next(line for line in lines if line.strip().startswith("all (micro)"))
    assert overall.split()[-2] == f"{100 * results['best_dev_f1']:.2f}"
    assert "test scores of the best dev model:" in lines
    assert f"results   {tmp_path / 'run/results.json'}" in lines and f"model     {tmp_path / 'run/model'}" in lines
    assert any(line.startswith("next      dwatt predict ") for line in lines)
    assert lines[-1].startswith(f"best dev F1 {100 * results['best_dev_f1']:.2f} at epoch")
    assert "test F1" in lines[-1]
    # One bar for the run; none of the Trainer's dictionaries or nested per-evaluation bars.
    assert "{'" not in out + err and "eval_" not in out + err
    assert "training: 100%" in err and "3/3" in err and "best=" in err and "dev F1=" in err and "loss=" in err
    assert "Map" not in err and "Loading weights" not in err


def test_quiet_prints_the_final_line_only(tiny_backbone, tiny_conll, tmp_path, capsys):
    assert train(tiny_backbone, tiny_conll, tmp_path / "run", "--quiet", "--no-save") == 0
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 1 and out.startswith("best dev F1 ")
    assert "training" not in err and "{'" not in err


def test_verbose_keeps_the_trainers_logs(tiny_backbone, tiny_conll, tmp_path, capsys):
    assert train(tiny_backbone, tiny_conll, tmp_path / "run", "--verbose", "--no-save") == 0
    out, err = capsys.readouterr()
    assert "'eval_f1'" in out + err and "'train_runtime'" in out + err
    assert out.strip().splitlines()[-1].startswith("best dev F1 ")
    assert "model     not saved (--no-save)" in out


def test_quiet_and_verbose_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--quiet", "--verbose"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_masked_lm_runs_summarise_perplexity_and_show_a_fill_mask_command(tiny_backbone, tmp_path, capsys):
    wikitext = tmp_path / "wikitext"
    wikitext.mkdir()
    words = ["eu", "rejects", "german", "call", "to", "boycott", "british", "lamb", "peter", "blackburn", "brussels"]
    lines = [" ".join(words[(i + j) % len(words)] for j in range(9)) for i in range(40)]
    (wikitext / "valid.txt").write_text("\n".join(lines) + "\n")
    assert (
        main(
            [
                "train",
                "--task",
                "mlm",
                "--backbone",
                str(tiny_backbone),
                "--data-dir",
                str(wikitext),
                "--epochs",
                "2",
                "--block-size",
                "8",
                "--output-dir",
                str(tmp_path / "mlm"),
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[-1].startswith("best dev perplexity ")
    assert "next      dwatt predict" in out and "[MASK]" in out
    assert "dev perplexity=" in err and "{'" not in out + err


def next_hint(out: str) -> str:
    import shlex

    line = next(line for line in out.splitlines() if line.startswith("next      dwatt predict "))
    return shlex.split(line.removeprefix("next      "))[-1]


def test_the_next_hint_is_the_runs_own_first_evaluation_example_in_its_language(tiny_backbone, tmp_path, capsys):
    """A German WikiAnn run suggests its first German dev sentence (cut to a readable length), and the command runs."""
    german = tmp_path / "wikiann" / "de"
    german.mkdir(parents=True)
    first = "Die Europäische Union lehnt den Aufruf Deutschlands zum Boykott von britischem Lammfleisch heute ab ."
    tags = ["O", "B-ORG", "I-ORG"] + ["O"] * 4 + ["B-LOC"] + ["O"] * 7
    dev = "\n".join(f"{w} {t}" for w, t in zip(first.split(), tags)) + "\n\nPeter B-PER\nlacht O\n"
    train_text = "Peter B-PER\nin O\nBerlin B-LOC\n\nEU B-ORG\nsagt O\nnein O\n\n" * 4
    for name, text in (("train.txt", train_text), ("dev.txt", dev), ("test.txt", dev)):
        (german / name).write_text(text)
    assert (
        main(
            [
                "train",
                "--backbone",
                str(tiny_backbone),
                "--dataset",
                "wikiann:de",
                "--data-dir",
                str(german.parent),
                "--n-shot",
                "1",
                "--epochs",
                "1",
                "--output-dir",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    hint = next_hint(capsys.readouterr().out)
    assert hint == "Die Europäische Union lehnt den Aufruf Deutschlands zum Boykott von britischem Lammfleisch"
    assert json.loads((tmp_path / "run/results.json").read_text())["example_input"] == hint
    assert main(["predict", str(tmp_path / "run/model"), hint]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("Die ")


def test_the_next_hint_of_a_classification_and_a_masked_lm_run_comes_from_their_data(tiny_backbone, tmp_path, capsys):
    from datasets import Dataset

    from dwatt.console import first_text, masked_prose_line

    topics = tmp_path / "topics"
    topics.mkdir()
    (topics / "train.csv").write_text(
        "text,label\npeter call,people\nbrussels lamb,places\npeter to,people\ngerman,places\n"
    )
    (topics / "dev.csv").write_text("text,label\nlamb to brussels,places\npeter,people\n")
    assert (
        main(
            [
                "train",
                "--task",
                "cls",
                "--backbone",
                str(tiny_backbone),
                "--data-dir",
                str(topics),
                "--n-shot",
                "2",
                "--epochs",
                "1",
                "--output-dir",
                str(tmp_path / "cls"),
            ]
        )
        == 0
    )
    assert next_hint(capsys.readouterr().out) == "lamb to brussels"
    lines = ["", " = Heading of an article = ", "eu rejects german call to boycott british lamb says peter blackburn"]
    assert (
        masked_prose_line(Dataset.from_dict({"text": lines}), "<mask>")
        == "eu rejects german call to boycott british lamb says peter <mask>"
    )
    pair = Dataset.from_dict({"text": ["a b"], "text_pair": [" ".join(map(str, range(20)))]})
    assert first_text(pair, "[SEP]") == "a b [SEP] " + " ".join(map(str, range(12)))


@pytest.mark.parametrize(
    "task, mode, given, used",
    [
        ("ner", "fe", None, 1e-3),
        ("cls", "fe", None, 3e-4),
        ("cls", "ft", None, 5e-5),
        ("ner", "ft", None, 5e-5),
        ("ner", "lora", None, 5e-5),
        ("ner", "fe", "5e-5", 5e-5),
    ],
)
def test_train_s_learning_rate_follows_the_task_and_mode_unless_given(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch, task, mode, given, used
):
    """FE heads default to the rate their task's fair comparison chose; LoRA and FT, which move the backbone, to the
    paper's."""
    import dwatt.training

    seen = {}
    monkeypatch.setattr(dwatt.training, "run", lambda config: seen.setdefault("config", config) and {})
    monkeypatch.setattr("dwatt.console.summary", lambda results: [])
    train(
        tiny_backbone,
        tiny_conll,
        tmp_path / "run",
        "--task",
        task,
        "--mode",
        mode,
        *(["--lr", given] if given else []),
    )
    assert seen["config"].learning_rate == used
