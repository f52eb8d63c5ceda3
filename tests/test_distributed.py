"""Data-parallel training under torchrun: 2 CPU processes over gloo against one process with the same global batch."""

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dwatt.training import RunConfig, run

from .helpers import config_for, launch


@pytest.mark.slow
def test_two_processes_train_one_run_like_one_process_with_the_same_global_batch(tiny_backbone, tiny_conll, tmp_path):
    alone = run(config_for(tiny_backbone, tiny_conll, tmp_path / "alone"))
    alone_weights = load_file(str(tmp_path / "alone" / "model" / "model.safetensors"))
    output = tmp_path / "together"
    ranks = launch(config_for(tiny_backbone, tiny_conll, output), tmp_path)

    assert [r["world_size"] for r in ranks] == [2, 2]
    # One writer: rank 0 wrote results.json and the checkpoint; rank 1 wrote nothing.
    assert ranks[1]["written"] == []
    # (the checkpoint is written into a scratch folder beside `model` and swapped in: `run_results.save_checkpoint`)
    assert sorted(re.sub(r"^\.(\w+)\.\d+\.tmp$", r"\1", Path(p).name) for p in ranks[0]["written"]) == [
        "model",
        "model",
        "results.json",
    ]
    saved = json.loads((output / "results.json").read_text())
    assert saved["environment"]["processes"] == 2
    # Both processes end with the same weights, and those are the one-process run's.
    assert ranks[0]["weights"].keys() == ranks[1]["weights"].keys() and ranks[0]["weights"]
    for name, tensor in ranks[0]["weights"].items():
        assert torch.equal(tensor, ranks[1]["weights"][name]), name
        assert torch.allclose(tensor, alone_weights[name], atol=1e-5, rtol=0), name
    # Dev and test are scored on the whole split, gathered: the seqeval scores are a one-process run's. (The
    # Trainer's `loss` is not compared: accelerate tops the last evaluation batch up with repeated sentences.)
    for rank in ranks:
        result = rank["results"]
        assert result["sampled_sentence_ids"] == alone["sampled_sentence_ids"]
        assert [p["step"] for p in result["dev_curve"]] == [p["step"] for p in alone["dev_curve"]] == [1, 2, 3]
        assert [p["f1"] for p in result["dev_curve"]] == pytest.approx([p["f1"] for p in alone["dev_curve"]], abs=1e-5)
        scores = {key: value for key, value in result["test_scores"].items() if key != "loss"}
        assert len(scores) > 10
        assert scores == pytest.approx({key: alone["test_scores"][key] for key in scores}, abs=1e-5)
    assert saved["best_dev_f1"] == pytest.approx(alone["best_dev_f1"], abs=1e-5)


@pytest.mark.slow
def test_fine_tuning_without_the_cache_keeps_every_process_in_step(tiny_backbone, tiny_conll, tmp_path):
    ranks = launch(
        config_for(
            tiny_backbone,
            tiny_conll,
            tmp_path / "ft",
            mode="ft",
            batch_size=4,
            epochs=2,
            save_model=False,
            evaluate_test=False,
        ),
        tmp_path,
    )
    assert ranks[1]["written"] == [] and [Path(p).name for p in ranks[0]["written"]] == ["results.json"]
    weights = ranks[0]["weights"]
    assert any(name.startswith("dwatt.backbone.") for name in weights)  # FT: the backbone trained
    for name, tensor in weights.items():
        assert torch.equal(tensor, ranks[1]["weights"][name]), name
    assert ranks[0]["results"]["dev_curve"] == ranks[1]["results"]["dev_curve"]


@pytest.mark.slow
def test_a_masked_lm_run_under_two_processes_writes_once_and_stays_in_step(tiny_backbone, tmp_path):
    words = ["eu", "rejects", "german", "call", "to", "boycott", "british", "lamb", "peter", "blackburn", "brussels"]
    lines = [" ".join(words[(i + j) % len(words)] for j in range(9)) for i in range(60)]
    wikitext = tmp_path / "wikitext"
    wikitext.mkdir()
    (wikitext / "valid.txt").write_text("\n".join(lines) + "\n")
    config = RunConfig(
        backbone=str(tiny_backbone),
        task="mlm",
        data_dir=str(wikitext),
        n_shot=None,
        epochs=2,
        batch_size=4,
        block_size=16,
        mode="ft",
        output_dir=str(tmp_path / "mlm"),
        progress=False,
        save_model=False,
    )
    ranks = launch(config, tmp_path)
    assert ranks[1]["written"] == [] and [Path(p).name for p in ranks[0]["written"]] == ["results.json"]
    for name, tensor in ranks[0]["weights"].items():
        assert torch.equal(tensor, ranks[1]["weights"][name]), name
    assert ranks[0]["results"]["dev_curve"] == ranks[1]["results"]["dev_curve"]
    assert json.loads((tmp_path / "mlm" / "results.json").read_text())["best_dev_perplexity"] > 1


@pytest.mark.slow
def test_two_processes_cache_into_one_keyed_file_that_a_single_process_reads_as_it_is(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """Under a launcher, a cache sent to disk is one file named by its contents, each process writing its share of
    the batches in place: the files are those a single process writes (byte for byte), and a single process's run
    afterwards reads them without changing them, with the launch's scores."""
    from dwatt.training import FEATURE_MEMO

    ranks = launch(
        config_for(tiny_backbone, tiny_conll, tmp_path / "together" / "run", save_model=False),
        tmp_path,
        caches_on_disk=True,
    )
    assert all(rank["results"]["cache_storage"] == "disk" for rank in ranks)
    shared = tmp_path / "together" / ".feature-cache"
    written = {path.name: path.read_bytes() for path in sorted(shared.iterdir())}
    assert len(written) == 6 and {name.split(".", 1)[1] for name in written} == {"bin", "bin.json"}  # train, dev, test
    assert all(
        json.loads(written[name])["batches_done"] == json.loads(written[name])["batches"]
        for name in written
        if name.endswith(".json")
    )
    monkeypatch.setattr("dwatt.features.memory.MEMORY_SHARE", 0.0)
    FEATURE_MEMO.clear()
    alone = run(config_for(tiny_backbone, tiny_conll, tmp_path / "alone" / "run", save_model=False))
    assert {path.name: path.read_bytes() for path in (tmp_path / "alone" / ".feature-cache").glob("*.bin")} == {
        name: data for name, data in written.items() if name.endswith(".bin")
    }
    FEATURE_MEMO.clear()
    stamps = {path.name: path.stat().st_mtime_ns for path in shared.iterdir()}
    again = run(config_for(tiny_backbone, tiny_conll, tmp_path / "together" / "again", save_model=False))
    assert {path.name: path.stat().st_mtime_ns for path in shared.iterdir()} == stamps  # read, not written
    assert again["dev_curve"] == alone["dev_curve"]
    assert [p["f1"] for p in ranks[0]["results"]["dev_curve"]] == pytest.approx(
        [p["f1"] for p in alone["dev_curve"]], abs=1e-5
    )
    FEATURE_MEMO.clear()


def test_the_global_batch_must_divide_among_the_processes():
    from dwatt.distributed import per_device_batch_size

    assert per_device_batch_size(16, 2) == 8 and per_device_batch_size(16, 1) == 16
    with pytest.raises(ValueError, match="--batch-size 16 is the global batch.*3 processes"):
        per_device_batch_size(16, 3)
