"""What every training run shares (dwatt.training.common): its CPU time beside its wall time, a fixed dev subset."""

import time

import pytest
import torch

from dwatt import RobertaDWAttForTokenClassification
from dwatt.data import load_conll2003
from dwatt.training import InitialModels, run_ner

from .helpers import tiny_ner_run_config


def test_a_run_records_its_cpu_time_beside_its_wall_time_so_that_waiting_for_a_core_shows(monkeypatch):
    """Which clock each figure reads, with the clocks replaced: no timing of this machine is asserted."""
    from dwatt.training import common

    fields = common.RunClock.__dataclass_fields__  # the process's CPU time counts every thread's
    assert fields["wall"].default_factory is time.perf_counter and fields["cpu"].default_factory is time.process_time
    monkeypatch.setattr(common.time, "perf_counter", lambda: 112.5)
    monkeypatch.setattr(common.time, "process_time", lambda: 9.25)
    clock = common.RunClock(wall=100.0, cpu=7.0)  # 12.5 s waited, of which 2.25 s computing
    assert clock.elapsed() == {"wall_seconds": 12.5, "cpu_seconds": 2.25}


def test_dev_sentences_scores_a_fixed_subset(tiny_backbone, tiny_conll, tmp_path):
    runs = [
        run_ner(
            tiny_ner_run_config(
                tiny_backbone, tiny_conll, tmp_path / str(seed), save_model=False, seed=seed, dev_sentences=3
            )
        )
        for seed in (0, 1)
    ]
    assert [r["num_dev_sentences"] for r in runs] == [3, 3]
    supports = [{k: v for k, v in r["best_dev_scores"].items() if k.endswith("_support")} for r in runs]
    assert supports[0] == supports[1]  # every trial is scored on the same sentences
    assert len(load_conll2003(tiny_conll)["validation"]) > 3
    with pytest.raises(ValueError, match="--dev-sentences must be > 0"):
        run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "x", dev_sentences=0))


@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix"])
def test_remembered_initial_models_equal_a_fresh_build(tiny_backbone, fusion):
    from transformers import set_seed

    memo = InitialModels()
    first = memo.build(str(tiny_backbone), fusion, 7, num_labels=5)
    again = memo.build(str(tiny_backbone), fusion, 7, num_labels=5)
    other_seed = memo.build(str(tiny_backbone), fusion, 8, num_labels=5)
    assert (memo.hits, memo.misses) == (1, 2)
    set_seed(7)
    fresh = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=5)
    for model in (first, again):
        state = model.state_dict()
        assert state.keys() == fresh.state_dict().keys()
        for name, tensor in fresh.state_dict().items():
            assert torch.equal(state[name], tensor), name
        assert not any(t.is_meta for t in (*model.parameters(), *model.buffers()))
    assert again.dwatt.backbone is not first.dwatt.backbone  # a copy: an FT run may change its own
    with torch.no_grad():
        again.classifier.weight.add_(1.0)  # training one model leaves the remembered start alone
    assert torch.equal(
        memo.build(str(tiny_backbone), fusion, 7, num_labels=5).classifier.weight, fresh.classifier.weight
    )
    if fusion != "scalar_mix":  # ScalarMix starts from constants, whatever the seed
        assert not torch.equal(other_seed.classifier.weight, fresh.classifier.weight)


def test_the_remembered_heads_stay_within_their_bytes_and_a_forgotten_one_is_built_afresh(tiny_backbone):
    """The memo keeps the latest builds' fusion and head weights within `max_head_bytes` (the latest always): with room
    for one, a second fusion's build forgets the first's, whose next build is a miss that gives the same model."""
    memo = InitialModels()
    first = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    memo.max_head_bytes = memo.head_bytes()  # room for this one head's weights, not two
    memo.build(str(tiny_backbone), "concat", 7, num_labels=5, shares_backbone=True)
    assert len(memo._heads) == 1
    again = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    assert (memo.hits, memo.misses) == (0, 3)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    unbounded = InitialModels()
    for fusion in ("dwatt", "concat", "dwatt"):
        unbounded.build(str(tiny_backbone), fusion, 7, num_labels=5, shares_backbone=True)
    assert (unbounded.hits, unbounded.misses) == (1, 2)


def test_the_remembered_backbones_stay_within_their_bytes_the_latest_always_kept(tiny_backbone):
    """Each depth a head is cut at loads a backbone of its own: with room for one backbone's weights, a build at
    another depth forgets the first backbone, and the first's next build is a miss that gives the same model."""
    memo = InitialModels()
    first = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    memo.max_backbone_bytes = memo.backbone_bytes()  # room for the whole backbone, not a second, shallower one
    cut = memo.build(
        str(tiny_backbone), "base", 7, num_labels=5, shares_backbone=True, fused_layers=[1], cache_layers=[1]
    )
    assert len(memo._backbones) == 1 and cut.dwatt.backbone in memo._backbones.values()
    again = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    assert (memo.hits, memo.misses) == (0, 3)
    assert again.dwatt.backbone is not first.dwatt.backbone
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    unbounded = InitialModels()
    for fusion, layers in (("dwatt", {}), ("base", {"fused_layers": [1], "cache_layers": [1]}), ("dwatt", {})):
        unbounded.build(str(tiny_backbone), fusion, 7, num_labels=5, shares_backbone=True, **layers)
    assert (unbounded.hits, unbounded.misses, len(unbounded._backbones)) == (1, 2, 2)


def test_fe_builds_share_one_copy_of_the_backbone_and_others_get_their_own(tiny_backbone):
    """FE never changes the backbone: its runs take the remembered one itself (a 1.5B model's weights held once, not
    once more per run), equal to a fresh build's; FT and LoRA runs get a copy, as before."""
    memo = InitialModels()
    first = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    again = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5, shares_backbone=True)
    other = memo.build(
        str(tiny_backbone), "concat", 8, num_labels=5, shares_backbone=True
    )  # a miss: loaded, then shared
    assert first.dwatt.backbone is again.dwatt.backbone is other.dwatt.backbone
    tuned = memo.build(str(tiny_backbone), "dwatt", 7, num_labels=5)
    assert tuned.dwatt.backbone is not first.dwatt.backbone
    assert all(torch.equal(a, b) for a, b in zip(tuned.state_dict().values(), again.state_dict().values()))


def test_disk_caches_are_known_by_their_contents_a_changed_backbone_tokenizer_or_data_building_new_ones(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """Caches sent to disk (a budget that keeps nothing in memory) are named by what they hold: the same backbone and
    data read the kept files again, and a backbone whose weights changed in the same folder, another tokenizer or
    other sentences each get files of their own, never the stale ones."""
    import shutil

    from transformers import BertModel, BertTokenizerFast

    from dwatt.training import FEATURE_MEMO

    monkeypatch.setattr("dwatt.features.memory.MEMORY_SHARE", 0.0)
    backbone, data = tmp_path / "backbone", tmp_path / "data"
    shutil.copytree(tiny_backbone, backbone)
    shutil.copytree(tiny_conll, data)
    caches = tmp_path / "runs" / ".feature-cache"

    def run(name):
        FEATURE_MEMO.clear()
        results = run_ner(tiny_ner_run_config(backbone, data, tmp_path / "runs" / name, save_model=False))
        assert results["cache_storage"] == "disk"
        return results, {path.name for path in caches.glob("*.bin")}

    first, files = run("first")
    again, same = run("again")
    assert same == files and again["dev_curve"] == first["dev_curve"]
    torch.manual_seed(1)
    BertModel(BertModel.config_class.from_pretrained(backbone)).save_pretrained(backbone)  # other weights, same folder
    _, grown = run("new-weights")
    assert files < grown and len(grown) == 2 * len(files)
    contents = {name: (caches / name).read_bytes() for name in grown}
    assert not {contents[name] for name in grown - files} & {contents[name] for name in files}  # other features
    tokenizer = BertTokenizerFast.from_pretrained(backbone)
    vocab = sorted(tokenizer.vocab, key=tokenizer.vocab.get)
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab[:5] + vocab[5:][::-1])}).save_pretrained(
        backbone
    )
    _, grown_again = run("new-tokenizer")
    assert grown < grown_again and len(grown_again) == 3 * len(files)
    blocks = [block for block in (data / "valid.txt").read_text().split("\n\n") if block.strip()]
    (data / "valid.txt").write_text("\n\n".join(blocks[:-1]) + "\n")  # one dev sentence fewer: other dev features
    _, last = run("new-data")
    assert grown_again < last and len(last) == len(grown_again) + 1  # the same training sample, another dev set
    FEATURE_MEMO.clear()


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
    from dwatt.training.common import backbone_placement

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


def test_caches_kept_on_disk_however_small_are_read_by_a_later_run_without_the_backbone(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """--cache-on-disk: even caches that fit in memory go to the keyed files, which a later process (here: the memo
    cleared, the backbone made to fail) reads instead of running the backbone again."""
    from dwatt.training import FEATURE_MEMO, RunConfig, run

    settings = dict(
        backbone=str(tiny_backbone),
        data_dir=str(tiny_conll),
        n_shot=2,
        epochs=2,
        cache_dtype="float32",
        progress=False,
        save_model=False,
        cache_on_disk=True,
    )
    first = run(RunConfig(**settings, output_dir=str(tmp_path / "first")))
    assert first["cache_storage"] == "disk" and len(list((tmp_path / ".feature-cache").glob("*.bin"))) == 2
    FEATURE_MEMO.clear()

    def no_backbone(self, **inputs):
        raise AssertionError("the backbone ran again")

    from dwatt import DWAttModel

    monkeypatch.setattr(DWAttModel, "run_backbone", no_backbone)
    again = run(RunConfig(**settings, output_dir=str(tmp_path / "again")))
    FEATURE_MEMO.clear()
    assert again["dev_curve"] == first["dev_curve"]
