"""Every path a user can take through `dwatt train`, generated: task (NER, masked LM, text classification) x mode
(FE, FT, LoRA) x cache x --test x --no-save x checkpointing x dataset x backbone (an encoder, a decoder LLM) x head
(DWAtt, or a Base head on one layer), each followed by `evaluate`, `predict` (alone and as `--heads`) and `push`
(Hub boundary faked) on what it saved.

Each combination either works end to end or is refused before training with a one-line error; none crashes. The
cells are generated from the axes below, so a new option is one more axis, not a new hand-written test.
"""

import itertools
import json
from pathlib import Path

import pytest

from dwatt.atomic import usual_mode
from dwatt.cli import main
from dwatt.training import BestDevCallback

from .conftest import write_tiny_datasets
from .helpers import RecordingApi

AXES = {
    "task": ("ner", "mlm", "cls"),
    "mode": ("fe", "ft", "lora"),
    "cache": ("cache", "no-cache"),
    "test": ("test", "no-test"),
    "save": ("save", "no-save"),
    "checkpoints": ("none", "every-epoch", "resume"),
    "dataset": ("conll2003", "wikiann", "wikitext", "topics"),
    "backbone": ("encoder", "decoder"),
    "head": ("dwatt", "layer-2"),  # the default fusion, or a Base head on layer 2 of 3 (`--fusion base --layers 2`)
}


def refusal(cell: dict) -> str | None:
    """The words of the error a combination is refused with before training, or None where it works: a decoder LLM
    has no masked-LM head to train, and every other path works."""
    if cell["task"] == "mlm" and cell["backbone"] == "decoder":
        return "masked LM needs an encoder"
    return None


TASK_DATASETS = {"ner": ("conll2003", "wikiann"), "mlm": ("wikitext",), "cls": ("topics",)}


def applies(cell: dict) -> bool:
    """NER reads CoNLL or WikiAnn, masked LM WikiText-2, text classification a CSV folder. Masked LM has no feature
    cache (its masks change every epoch) and always reports the test perplexity (the paper's measure), so its
    `--no-cache` and `--test` switch nothing: one cell each stands for them. Every other axis applies to every task."""
    if cell["task"] == "mlm" and (cell["cache"], cell["test"]) != ("cache", "test"):
        return False
    if cell["head"] != "dwatt" and (cell["cache"], cell["test"], cell["save"], cell["checkpoints"]) != (
        "cache",
        "test",
        "save",
        "none",
    ):
        return False  # a head on one layer goes through the same paths: once per task, mode, dataset and backbone
    return cell["dataset"] in TASK_DATASETS[cell["task"]]


CELLS = [cell for values in itertools.product(*AXES.values()) if applies(cell := dict(zip(AXES, values)))]


def cell_id(cell: dict) -> str:
    return "-".join(cell[axis] for axis in AXES)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    return write_tiny_datasets(tmp_path_factory.mktemp("path-data"))


def data_arguments(cell: dict, data: dict) -> list[str]:
    if cell["dataset"] == "wikiann":
        return ["--dataset", "wikiann:sw", "--data-dir", str(data["wikiann"])]
    return ["--data-dir", str(data[cell["dataset"]])]


def train_arguments(cell: dict, backbone: Path, data: dict, output: Path) -> list[str]:
    argv = [
        "train",
        "--backbone",
        str(backbone),
        "--task",
        cell["task"],
        "--mode",
        cell["mode"],
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--output-dir",
        str(output),
        "--quiet",
        *data_arguments(cell, data),
    ]
    argv += ["--block-size", "8"] if cell["task"] == "mlm" else ["--n-shot", "1"]
    argv += ["--no-cache"] if cell["cache"] == "no-cache" else []
    argv += ["--test"] if cell["test"] == "test" else []
    argv += ["--no-save"] if cell["save"] == "no-save" else []
    argv += ["--checkpoint-every-epoch"] if cell["checkpoints"] != "none" else []
    argv += ["--fusion", "base", "--layers", "2"] if cell["head"] == "layer-2" else []
    return argv


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_every_path_works_or_is_refused_before_training(cell, data, tmp_path, capsys, monkeypatch, request):
    output = tmp_path / "run"
    backbone = request.getfixturevalue("tiny_decoder" if cell["backbone"] == "decoder" else "tiny_backbone")
    argv = train_arguments(cell, backbone, data, output)
    refused = refusal(cell)
    if cell["checkpoints"] == "resume" and refused is None:
        code, out, err = interrupted_then_resumed(argv, output, capsys, monkeypatch)
    else:
        code = main(argv)
        out, err = capsys.readouterr()
    if refused is not None:
        assert code == 2 and refused in err and err.count("\n") == 1 and not (output / "results.json").exists()
        return
    assert code == 0, err[-2000:]
    assert len(out.strip().splitlines()) == 1  # --quiet: the final line only
    results = json.loads((output / "results.json").read_text())
    assert len(results["dev_curve"]) == 2
    if cell["task"] != "mlm":
        assert bool(results["cached_features"]) == (cell["mode"] == "fe" and cell["cache"] == "cache")
        assert ("test_scores" in results) == (cell["test"] == "test")
    else:
        assert "test_perplexity" in results
    private = [
        str(path.relative_to(output))
        for path in output.rglob("*")
        if path.is_file() and path.stat().st_mode & 0o777 != usual_mode()
    ]
    assert not private, f"written with another mode than {oct(usual_mode())}: {private}"  # a service's user reads them
    checkpoints = sorted(path.name for path in (output / "trainer").glob("checkpoint-*"))
    if cell["checkpoints"] == "every-epoch":  # the last epoch's checkpoint is kept (one at a time), to resume from
        assert len(checkpoints) == 1, checkpoints
        state = json.loads((output / "trainer" / checkpoints[0] / "trainer_state.json").read_text())
        assert state["global_step"] == state["max_steps"] == int(checkpoints[0].split("-")[1]) and state["epoch"] == 2
    elif cell["checkpoints"] == "none":
        assert checkpoints == [] and results["resumed_from"] is None
    model = output / "model"
    if cell["head"] == "layer-2":  # the head reads layer 2, as saved and as reloaded
        saved = json.loads((model / "config.json").read_text())
        assert (saved["fusion"], saved["fused_layers"]) == ("base", "2") and results["config"]["fusion"] == "base"
    if cell["save"] == "no-save":
        assert not model.exists()
        return
    evaluate = ["evaluate", str(model), *data_arguments(cell, data), "--split", "test"]
    evaluate += (
        ["--block-size", "8"]
        if cell["task"] == "mlm"
        else (["--dataset", "conll2003"] if cell["dataset"] == "conll2003" else [])
    )
    assert main(evaluate) == 0, capsys.readouterr().err[-2000:]
    scored = json.loads(capsys.readouterr().out)
    if cell["task"] == "mlm":
        assert scored["perplexity"] == pytest.approx(results["test_perplexity"], rel=1e-5)
    else:  # the test split scored from the saved model: what the run scored, where it did (--test)
        key = "accuracy" if cell["task"] == "cls" else "f1"
        assert scored["split"] == "test" and 0 <= scored[key] <= 1
        if cell["test"] == "test":
            assert scored[key] == pytest.approx(results["test_scores"][key], abs=1e-6)
    sentence = "peter [MASK] brussels" if cell["task"] == "mlm" else "Peter Blackburn rejects Brussels"
    assert main(["predict", str(model), sentence]) == 0, capsys.readouterr().err[-2000:]
    printed = capsys.readouterr().out
    if cell["task"] == "cls":
        label, probability, text = printed.rstrip("\n").split("\t")
        assert label in ("a", "b", "c") and 0 < float(probability) <= 1 and text == sentence
    else:
        assert ("mask 1:" in printed) if cell["task"] == "mlm" else (printed.split()[0::2][:4] == sentence.split())
    if cell["task"] == "ner" and cell["mode"] == "lora":  # its backbone is its own: not shared, and said so
        assert main(["predict", "--heads", str(model), sentence]) == 2
        assert "adapts its backbone with LoRA" in capsys.readouterr().err
    elif cell["task"] == "ner":  # the same checkpoint as a head on a shared backbone tags the same way
        assert main(["predict", "--heads", str(model), sentence]) == 0, capsys.readouterr().err[-2000:]
        rows = capsys.readouterr().out.strip().splitlines()[1:]
        assert [line.split() for line in rows] == [pair.split() for pair in printed.strip().splitlines()]
    recorder = RecordingApi()
    monkeypatch.setattr("dwatt.hub.HfApi", lambda *a, **k: recorder)
    assert main(["push", str(output), "someone/run", "--backbone-id", "someone/tiny-bert"]) == 0, (
        capsys.readouterr().err
    )
    files = recorder.calls[-1][2]["files"]
    assert {"config.json", "model.safetensors", "README.md", "results.json"} <= set(files)
    assert str(backbone).encode() not in files["config.json"]


def interrupted_then_resumed(argv: list[str], output: Path, capsys, monkeypatch) -> tuple[int, str, str]:
    """The resume axis: the run is stopped right after its first epoch's checkpoint (as a crash or a ^C would stop
    it), then the same command with `--resume` continues it. The resumed run must start from that checkpoint, train
    exactly the steps that were left (not all over again, none skipped) and carry the first epoch's dev score over.
    Returns what the resumed command returned and printed."""
    save, step_end = BestDevCallback.on_save, BestDevCallback.on_step_end
    stopped = {}

    def stop_after_first_checkpoint(self, args, state, control, **kwargs):
        save(self, args, state, control, **kwargs)
        stopped.update(step=state.global_step, steps=state.max_steps, curve=list(self.curve))
        raise KeyboardInterrupt("stopped after the first epoch's checkpoint")

    with monkeypatch.context() as patch:
        patch.setattr(BestDevCallback, "on_save", stop_after_first_checkpoint)
        with pytest.raises(KeyboardInterrupt):
            main(argv)
    capsys.readouterr()
    assert not (output / "results.json").exists() and 0 < stopped["step"] < stopped["steps"], stopped
    trained = []

    def count_steps(self, args, state, control, **kwargs):
        trained.append(state.global_step)
        return step_end(self, args, state, control, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(BestDevCallback, "on_step_end", count_steps)
        code = main(argv + ["--resume"])
    out, err = capsys.readouterr()
    if code == 0:
        resumed = json.loads((output / "results.json").read_text())
        assert resumed["resumed_from"] == f"checkpoint-{stopped['step']}"
        assert trained == list(range(stopped["step"] + 1, stopped["steps"] + 1)), trained  # the steps left, in order
        assert resumed["dev_curve"][: len(stopped["curve"])] == stopped["curve"] and len(stopped["curve"]) == 1
    return code, out, err


def test_the_generated_paths_cover_every_value_of_every_axis():
    for axis, values in AXES.items():
        assert {cell[axis] for cell in CELLS} == set(values), axis
    # ner: 2 datasets x cache x test, mlm: 1 dataset, cls: 1 dataset x cache x test; modes, save, checkpoints,
    # backbones
    assert len(CELLS) == (2 * 4 + 1 + 4) * 3 * 2 * 3 * 2 + (2 + 1 + 1) * 3 * 2
