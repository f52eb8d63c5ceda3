"""Where a run's model goes (dwatt.training.placement): a backbone spread by a device_map, within the memory budget."""

import pytest


def test_a_backbone_spread_by_device_map_trains_from_its_cache_like_one_loaded_whole_and_saves_head_only(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """FE with a backbone larger than one device: accelerate spreads its layers (here two of three read from disk as
    it runs), it computes the cache, and the run trains, scores and chooses as with the backbone loaded whole; the
    checkpoint is head-only (it names the backbone) and loads whole again."""
    import json

    from dwatt import DWAttForTokenClassification
    from dwatt.training import FEATURE_MEMO, RunConfig, run

    settings = dict(
        backbone=str(tiny_backbone),
        data_dir=str(tiny_conll),
        n_shot=2,
        epochs=2,
        cache_dtype="float32",
        progress=False,
        evaluate_test=True,
    )
    whole = run(RunConfig(**settings, output_dir=str(tmp_path / "whole"), save_model=False))
    FEATURE_MEMO.clear()
    spread_map = {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "encoder.layer.2": "disk"}
    monkeypatch.setattr(
        "dwatt.training.ner.backbone_placement",
        lambda config: {"device_map": spread_map, "offload_folder": str(tmp_path / "offload")},
    )
    spread = run(RunConfig(**settings, output_dir=str(tmp_path / "spread"), device_map="auto"))
    FEATURE_MEMO.clear()
    assert spread["dev_curve"] == whole["dev_curve"] and spread["test_scores"] == whole["test_scores"]
    assert json.loads((tmp_path / "spread" / "model" / "config.json").read_text())["heads_only"] is True
    reloaded = DWAttForTokenClassification.from_pretrained(str(tmp_path / "spread" / "model"))
    assert not any(p.is_meta for p in reloaded.parameters())


def test_device_map_places_the_backbone_within_the_memory_budget_and_is_refused_where_the_backbone_runs_each_step(
    tmp_path, monkeypatch
):
    from dwatt.features.memory import WORKING_MARGIN
    from dwatt.training import RunConfig
    from dwatt.training.placement import backbone_placement

    config = RunConfig(output_dir=str(tmp_path / "run"), device_map="auto", max_memory=WORKING_MARGIN + (4 << 30))
    placement = backbone_placement(config)
    assert placement["device_map"] == "auto" and placement["max_memory"]["cpu"] == 3 << 30  # a quarter left beside it
    assert placement["offload_folder"] == str(tmp_path / ".feature-cache" / "offload")
    assert backbone_placement(RunConfig(output_dir=str(tmp_path / "run"))) == {}
    for refused in (dict(mode="lora"), dict(mode="ft"), dict(use_cache=False)):
        with pytest.raises(ValueError, match="--device-map spreads a frozen backbone"):
            RunConfig(device_map="auto", **refused).validate()
    with pytest.raises(ValueError, match="--device-map: expected one of auto"):
        RunConfig(device_map="everywhere").validate()
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="run it as one process"):
        backbone_placement(config)
