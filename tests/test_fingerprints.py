"""What a run read, known by content (dwatt.fingerprints): stores, kept heads and feature caches are never reused
across data folders of one name, nor across a backbone whose weights changed in place."""

import shutil

import pytest
import torch

from dwatt.experiment.grid import grid
from dwatt.experiment.store import ResultsStore
from dwatt.experiment.sweep import run_sweep
from dwatt.fingerprints import backbone_fingerprint, data_fingerprint

from .helpers import executing, recording_runner, stopped_while_scoring_test


def relabelled_copy(source, target):
    """A copy of a CoNLL folder whose dev split tags every entity as a location."""
    shutil.copytree(source, target)
    valid = target / "valid.txt"
    relabel = lambda word, tag: f"{word} {'B-LOC' if tag != 'O' and word != '-DOCSTART-' else tag}"
    valid.write_text(
        "\n".join(relabel(*line.split(" ")) if " " in line else line for line in valid.read_text().splitlines()) + "\n"
    )
    return target


def test_data_folders_of_one_name_are_two_datasets(tiny_conll, tmp_path):
    """`d1/conll2003` then `d2/conll2003` (other dev labels) into one store: the second is refused, naming the data's
    fingerprints, not reported done; a fingerprint changes with any file's bytes, not with the folder's place."""
    first = shutil.copytree(tiny_conll, tmp_path / "d1" / "conll2003")
    second = relabelled_copy(tiny_conll, tmp_path / "d2" / "conll2003")
    assert data_fingerprint(first) != data_fingerprint(second)
    assert data_fingerprint(shutil.copytree(first, tmp_path / "d3" / "conll2003")) == data_fingerprint(first)
    assert data_fingerprint(None) is None and data_fingerprint("some/hub-dataset") is None
    calls, store = [], tmp_path / "r.jsonl"
    for folder in (first, second):
        specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1, data_dir=str(folder))
        if folder == second:
            with pytest.raises(
                ValueError, match=r"r\.jsonl:1: run .* other settings \(data_sha256: '\w+' there, '\w+' here\)"
            ):
                run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
        else:
            run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    assert len(calls) == 1 and ResultsStore(store).rows()[0]["data_sha256"] == data_fingerprint(first)
    specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1, data_dir=str(tmp_path / "d3" / "conll2003"))
    run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    assert len(calls) == 1  # the same files elsewhere: the same data, done


def test_a_row_from_before_data_fingerprints_is_judged_by_the_rest(tiny_conll, tmp_path):
    calls, store = [], tmp_path / "r.jsonl"
    specs = grid(fusions=("base",), n_shots=(1,), epochs=(1,), trials=1, data_dir=str(tiny_conll))
    run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    import json

    row = ResultsStore(store).rows()[0]
    del row["data_sha256"]
    store.write_text(json.dumps(row) + "\n")
    run_sweep(specs, store, execution=executing(recording_runner(calls)), progress=False, engine="trainer")
    assert len(calls) == 1


def test_a_second_probe_on_other_data_of_the_same_name_is_refused_not_shown_the_first_table(
    tiny_backbone, tiny_conll, tmp_path, capsys
):
    from dwatt.cli import main

    first = shutil.copytree(tiny_conll, tmp_path / "d1" / "conll2003")
    second = relabelled_copy(tiny_conll, tmp_path / "d2" / "conll2003")

    def probe(data):
        return main(
            [
                "probe",
                "--backbone",
                str(tiny_backbone),
                "--data-dir",
                str(data),
                "--n-shot",
                "1",
                "--epochs",
                "1",
                "--learning-rates",
                "1e-2",
                "--results",
                str(tmp_path / "probe" / "r.jsonl"),
                "--quiet",
                "--no-save",
            ]
        )

    assert probe(first) == 0
    capsys.readouterr()
    assert probe(second) == 2
    assert "data_sha256" in capsys.readouterr().err


def test_kept_heads_are_not_reused_once_the_backbone_changed_in_place(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch, capsys
):
    """A probe stopped after its heads were kept, run again after the backbone folder's weights changed in place,
    trains its heads again (the kept ones hold the old backbone's scores)."""
    from safetensors.torch import load_file, save_file

    from dwatt.cli import main
    from dwatt.stacked_heads import train_heads

    backbone = shutil.copytree(tiny_backbone, tmp_path / "bb")

    def probe():
        return main(
            [
                "probe",
                "--backbone",
                str(backbone),
                "--data-dir",
                str(tiny_conll),
                "--n-shot",
                "1",
                "--epochs",
                "1",
                "--learning-rates",
                "1e-2",
                "--results",
                str(tmp_path / "p" / "r.jsonl"),
                "--quiet",
                "--test",
                "--no-save",
                "--no-baselines",
            ]
        )

    stopped_while_scoring_test(monkeypatch, probe)
    assert list((tmp_path / "p").rglob("dwatt_trained.json"))
    before = backbone_fingerprint(str(backbone))
    weights = load_file(str(backbone / "model.safetensors"))
    save_file(
        {key: value + 0.5 if value.is_floating_point() else value for key, value in weights.items()},
        str(backbone / "model.safetensors"),
    )
    assert backbone_fingerprint(str(backbone)) != before
    trained = []
    monkeypatch.setattr(
        "dwatt.training.together.train_heads", lambda *a, **k: trained.append(len(a[4])) or train_heads(*a, **k)
    )
    assert probe() == 0
    assert sum(trained) == 3  # every layer's head trained again
    capsys.readouterr()


def test_the_feature_memo_tells_a_backbone_changed_in_place_apart(tiny_backbone, tmp_path, monkeypatch):
    from safetensors.torch import load_file, save_file

    from dwatt.training.run_caches import feature_key

    backbone = shutil.copytree(tiny_backbone, tmp_path / "bb")

    class Model(torch.nn.Module):  # what feature_key reads of a model
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))
            self.dwatt = torch.nn.Module()
            self.dwatt.backbone = torch.nn.Linear(1, 1)  # its device and dtype are part of the key
            self.config = type(
                "Config", (), {"backbone_revision": None, "through_final_norm": False, "word_readout": "first"}
            )()

    from datasets import Dataset

    tokens = Dataset.from_dict({"input_ids": [[1, 2, 3]], "labels": [[0, 0, 0]]})
    model = Model()
    monkeypatch.setattr("dwatt.training.run_caches.cached_layers", lambda model, wanted: [3])
    before = feature_key(model, str(backbone), tokens, torch.float16)
    weights = load_file(str(backbone / "model.safetensors"))
    save_file({key: value * 2 for key, value in weights.items()}, str(backbone / "model.safetensors"))
    assert feature_key(model, str(backbone), tokens, torch.float16) != before
    changed = feature_key(model, str(backbone), tokens, torch.float16)
    model.config.through_final_norm = True  # other hidden states: the layers read through the final norm
    assert feature_key(model, str(backbone), tokens, torch.float16) != changed
