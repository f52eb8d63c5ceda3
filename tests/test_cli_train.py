"""dwatt train (dwatt.cli.train): a run end to end through evaluate and predict, and the arguments it refuses."""

import json

import pytest

from dwatt.cli import main


def test_cli_train_evaluate_predict_end_to_end(tiny_backbone, tiny_conll, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--backbone",
            str(tiny_backbone),
            "--data-dir",
            str(tiny_conll),
            "--n-shot",
            "2",
            "--epochs",
            "2",
            "--batch-size",
            "4",
            "--output-dir",
            str(out),
            "--quiet",
            "--test",
        ]
    )
    assert code == 0
    assert "best dev F1" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    for key in (
        "best_dev_f1",
        "best_epoch",
        "final_dev_f1",
        "best_dev_scores",
        "wall_seconds",
        "cpu_seconds",
        "train_examples_per_second",
        "sampled_sentence_ids",
        "dev_curve",
        "test_scores",
        "seed",
    ):
        assert key in results, key
    assert len(results["sampled_sentence_ids"]) == 8 and len(results["dev_curve"]) == 2
    assert results["config"]["fusion"] == "dwatt" and "PER_f1" in results["best_dev_scores"]
    assert main(["evaluate", str(out / "model"), "--data-dir", str(tiny_conll)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["f1"] == pytest.approx(results["best_dev_f1"], abs=1e-6)
    assert main(["predict", str(out / "model"), "Peter Blackburn rejects"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert [line.split()[0] for line in lines[:3]] == ["Peter", "Blackburn", "rejects"]


def test_minilm_cast_to_bf16_trains_dwatt_and_serves_in_either_dtype(minilm_path, tiny_conll, tmp_path, capsys):
    """`--backbone-dtype bfloat16` on the real MiniLM (saved in fp32): the backbone runs in bf16 beside an fp32 DWAtt
    fusion and head; the checkpoint stores the backbone's bf16 weights and records fp32, so it loads whole in fp32;
    `evaluate --backbone-dtype bfloat16` gives the run's own dev F1 back (its bf16 cache held the backbone's outputs
    exactly)."""
    from safetensors import safe_open

    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--backbone",
                str(minilm_path),
                "--data-dir",
                str(tiny_conll),
                "--fusion",
                "dwatt",
                "--n-shot",
                "2",
                "--epochs",
                "2",
                "--backbone-dtype",
                "bfloat16",
                "--cache-dtype",
                "bfloat16",
                "--output-dir",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["backbone_dtype"] == "bfloat16"
    assert json.loads((out / "model" / "config.json").read_text())["dtype"] == "float32"
    with safe_open(out / "model" / "model.safetensors", "pt") as stored:
        dtypes = {(name.startswith("dwatt.backbone."), stored.get_slice(name).get_dtype()) for name in stored.keys()}
    assert dtypes == {(True, "BF16"), (False, "F32")}
    capsys.readouterr()
    assert main(["evaluate", str(out / "model"), "--data-dir", str(tiny_conll), "--backbone-dtype", "bfloat16"]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(results["best_dev_f1"], abs=1e-6)
    for dtype in ("auto", "bfloat16"):
        assert main(["predict", str(out / "model"), "Peter Blackburn rejects", "--backbone-dtype", dtype]) == 0
        assert [line.split()[0] for line in capsys.readouterr().out.split("\n")[:3]] == [
            "Peter",
            "Blackburn",
            "rejects",
        ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--n-shot", "1000"], "cannot sample 1000 x 4"),
        (["--epochs", "0"], "--epochs must be > 0"),
        (["--backbone", "/no/such/model"], "--backbone: no model folder"),
        (["--mode", "ft", "--backbone-dtype", "bfloat16"], "--backbone-dtype bfloat16 with --mode ft"),
    ],
)
def test_cli_refuses_bad_arguments(tiny_backbone, tiny_conll, tmp_path, capsys, argv, message):
    base = [
        "train",
        "--backbone",
        str(tiny_backbone),
        "--data-dir",
        str(tiny_conll),
        "--output-dir",
        str(tmp_path),
        "--quiet",
    ]
    assert main(base + argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "probe"])
def test_a_memory_budget_keeps_the_caches_out_of_anonymous_memory(tmp_path, command):
    """`dwatt train` (FE, DWAtt on every layer, through the `Trainer`) and `dwatt probe` (a head on every layer, through
    the stacked-heads engine, which once kept the dev set's batches, cast to fp32, for all its epochs) with
    `--max-memory`, their dev split 10x larger: their caches go to files, and the peak of anonymous memory (RssAnon,
    what the budget bounds; polled as benchmarks/memory.py polls it, every
    10 ms) grows by less than one batch's worth (what a caching batch holds at once: its hidden states and their
    stacked copy) and the sentences' own bookkeeping (their words, encodings, labels and predictions as Python
    objects; measured at about 270 bytes a token, 10 MB a thousand sentences here, against 14 KB a token of features),
    allowed 1 KiB a token. The same 10x run without a budget keeps its caches in memory and grows by about their size
    (at least half of it): what the budget saves, and proof the measure sees a cache."""
    import importlib.util
    import sys
    from pathlib import Path

    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from .conftest import SENTENCES, WORDS

    if not Path("/proc/self/status").exists():
        pytest.skip("reads /proc: Linux only")
    spec = importlib.util.spec_from_file_location(
        "memory_benchmark", Path(__file__).parents[1] / "benchmarks" / "memory.py"
    )
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    backbone = tmp_path / "bert"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True).save_pretrained(backbone)
    torch.manual_seed(0)
    hidden, layers = 512, 6  # wide enough that features, not the sentences' bookkeeping, are what grows
    BertModel(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            intermediate_size=64,
        )
    ).save_pretrained(backbone)
    longest = 40
    sentence = "\n".join(f"{word} {tag}" for word, tag in (SENTENCES[0] * 10)[:longest]) + "\n"

    def data(dev_sentences: int) -> Path:
        folder = tmp_path / f"conll-{dev_sentences}"
        folder.mkdir()
        short = "\n".join("\n".join(f"{w} {t}" for w, t in s) + "\n" for s in SENTENCES)
        for name, text in (
            ("train.txt", short * 4),
            ("test.txt", short),
            ("valid.txt", "\n".join([sentence] * dev_sentences)),
        ):
            (folder / name).write_text("-DOCSTART- O\n\n" + text)
        return folder

    def peak(dev_sentences: int, budget: list[str], attempt: int = 0) -> dict:
        # Each attempt in a folder of its own: its caches are built, not read from an earlier attempt's files.
        output = tmp_path / f"attempt-{attempt}" / f"run-{dev_sentences}-{len(budget)}"
        argv = [
            sys.executable,
            "-m",
            "dwatt.cli",
            command,
            "--backbone",
            str(backbone),
            "--data-dir",
            str(data_dirs[dev_sentences]),
            "--n-shot",
            "2",
            "--epochs",
            "1",
            "--cache-dtype",
            "float32",
            "--quiet",
            "--no-save",
            "--threads",
            "1",
            *(
                ["--output-dir", str(output)]
                if command == "train"
                else [
                    "--output-root",
                    str(output),
                    "--results",
                    str(output / "results.jsonl"),
                    "--learning-rates",
                    "1e-3",
                ]
            ),
            *budget,
        ]
        record = memory.measured(argv, interval=0.01)
        assert record["exit_code"] == 0, record.get("error")
        return record

    def lowest_peak(dev_sentences: int, budget: list[str]) -> dict:
        """The lower of two attempts' peaks: what else the machine runs can raise a peak, never lower it (a suite
        beside a 9 GB benchmark once measured 0.87 GiB where 0.55-0.60 is usual)."""
        return min((peak(dev_sentences, budget, attempt) for attempt in range(2)), key=lambda r: r["peak_anon_gib"])

    data_dirs = {count: data(count) for count in (100, 1000)}  # full caching batches of 64 in both
    budget = ["--max-memory", "2.04GiB"]  # the model (0.03 GiB) and 2 GiB of working margin leave no room for a cache
    small, large, unbounded = lowest_peak(100, budget), lowest_peak(1000, budget), peak(1000, [])
    tokens = longest + 2
    batch = 2 * 64 * tokens * (layers + 1) * hidden * 4
    bookkeeping = (1000 - 100) * tokens * 1024
    cache = 1000 * longest * (layers + 1) * hidden * 4  # the dev cache keeps the labelled positions
    assert large["peak_anon_gib"] - small["peak_anon_gib"] <= (batch + bookkeeping) / 2**30, (small, large)
    assert unbounded["peak_anon_gib"] - large["peak_anon_gib"] >= 0.5 * cache / 2**30, (large, unbounded)
