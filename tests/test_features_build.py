"""The backbone's pass into a cache (dwatt.features.build): float16 overflow refused naming the layer, a stopped disk
build resumed, processes building one file together, a backbone spread by device_map, other contents built anew."""

import json

import pytest
import torch
from transformers import BertTokenizerFast

from dwatt import RobertaDWAttForTokenClassification
from dwatt.data import load_conll2003, tokenize_and_align
from dwatt.features.build import build_feature_cache

from .helpers import counting_backbone_runs


def test_hidden_states_beyond_float16_are_refused_naming_the_layer_and_cached_as_bfloat16(tiny_backbone, tiny_conll):
    """LLMs carry a few huge activations; a float16 cache would hold infinities where bf16 holds them."""
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    tokens = tokens.select_columns(["input_ids", "token_type_ids", "attention_mask", "labels"])
    model = RobertaDWAttForTokenClassification.from_backbone(
        str(tiny_backbone), fusion="base", fused_layers="1", num_labels=9
    )
    with torch.no_grad():
        model.dwatt.backbone.encoder.layer[0].output.LayerNorm.weight.fill_(1e5)  # layer 1's output reaches ~1e5
    with pytest.raises(
        ValueError,
        match=r"--cache-dtype float16: the backbone's hidden states of layer 1 reach .* beyond "
        r"float16's 65504; cache them as bfloat16",
    ):
        build_feature_cache(model, tokens, progress=False)
    cache = build_feature_cache(model, tokens, dtype=torch.bfloat16, progress=False)
    assert torch.isfinite(cache.features).all() and cache.features.abs().max() > 65504


def test_a_stopped_disk_cache_build_resumes_where_it_stopped_and_a_finished_one_is_read_without_the_backbone(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    straight = build_feature_cache(model, tokens, batch_size=1, progress=False)
    batches = len(tokens)
    key, path = {"backbone": "tiny", "data": "validation"}, tmp_path / "features.bin"
    monkeypatch.setattr("dwatt.features.build.RECORD_EVERY_SECONDS", -1.0)  # a record after every batch
    runs = counting_backbone_runs(model, monkeypatch, stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        build_feature_cache(model, tokens, batch_size=1, progress=False, path=path, key=key)
    monkeypatch.undo()
    runs = counting_backbone_runs(model, monkeypatch)
    resumed = build_feature_cache(model, tokens, batch_size=1, progress=False, path=path, key=key)
    assert batches == 5 and len(runs) == batches - 2 and torch.equal(resumed.features, straight.features)
    again = build_feature_cache(model, tokens, batch_size=1, progress=False, path=path, key=key)
    assert len(runs) == batches - 2 and torch.equal(again.features, straight.features)  # read, not computed


def test_processes_building_one_disk_cache_together_write_the_one_file_and_resume_each_after_its_own_batches(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """Two builders (threads standing for a launch's processes, a barrier for its `wait`) each run the backbone over
    every other batch into the one keyed file: the file equals a single process's build. Stopped part-way, each
    resumes after its own recorded batches; the finished file is read by a single process without the backbone, and
    a part-built one under another number of processes is built anew."""
    import threading

    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    straight = build_feature_cache(model, tokens, batch_size=1, progress=False)
    key, path = {"backbone": "tiny", "data": "validation"}, tmp_path / "features.bin"
    monkeypatch.setattr("dwatt.features.build.RECORD_EVERY_SECONDS", -1.0)  # a record after every batch
    runs, run_backbone = {}, model.dwatt.run_backbone
    stop_rank_after = {}

    def counted(**inputs):
        rank = threading.current_thread().name
        if stop_rank_after.get(rank) == len(runs.setdefault(rank, [])):
            raise KeyboardInterrupt
        runs[rank].append(inputs["input_ids"].shape[0])
        return run_backbone(**inputs)

    monkeypatch.setattr(model.dwatt, "run_backbone", counted)

    def together(processes: int = 2) -> list:
        barrier, built = threading.Barrier(processes, timeout=60), [None] * processes

        def build(rank):
            try:
                built[rank] = build_feature_cache(
                    model,
                    tokens,
                    batch_size=1,
                    progress=False,
                    path=path,
                    key=key,
                    share=(rank, processes),
                    wait=barrier.wait,
                )
            except KeyboardInterrupt:
                barrier.abort()  # as a launcher ends the other processes of a stopped one
            except threading.BrokenBarrierError:
                pass

        threads = [threading.Thread(target=build, args=(rank,), name=str(rank)) for rank in range(processes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return built

    stop_rank_after["1"] = 1  # rank 1 stops after its first batch; rank 0 writes its 3 of the 5
    assert together() == [None, None] and runs == {"0": [1, 1, 1], "1": [1]}
    assert not json.loads((tmp_path / "features.bin.json").read_text())["batches_done"]
    runs.clear(), stop_rank_after.clear()
    built = together()
    assert runs == {"1": [1]}  # rank 0 had all its batches; rank 1 resumed after its first
    assert all(torch.equal(cache.features, straight.features) for cache in built)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features.bin", "features.bin.json"]  # the ranks' records go
    runs.clear()
    alone = build_feature_cache(model, tokens, batch_size=1, progress=False, path=path, key=key)
    assert runs == {} and torch.equal(alone.features, straight.features)  # read as it is by a single process
    (tmp_path / "features.bin.json").write_text(
        json.dumps(
            {
                "holds": json.loads((tmp_path / "features.bin.json").read_text())["holds"],
                "batches_done": 0,
                "batches": 5,
                "processes": 3,
            }
        )
    )  # part-built by 3 processes
    assert torch.equal(together()[0].features, straight.features) and sum(map(len, runs.values())) == 5


def test_a_backbone_spread_by_device_map_with_layers_offloaded_to_disk_caches_the_same_features(
    tiny_backbone, tiny_conll, tmp_path
):
    """A backbone larger than one device loads with `device_map` (accelerate): here its embeddings and first layer on
    the CPU, the other layers offloaded to disk, read back layer by layer as it runs. Its cache equals the one of the
    backbone loaded whole, and is keyed alike (the device it takes inputs on, not the offloaded weights' meta)."""
    from dwatt.features.build import input_device

    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    whole = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    spread_map = {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "encoder.layer.2": "disk"}
    spread = RobertaDWAttForTokenClassification.from_backbone(
        str(tiny_backbone),
        num_labels=9,
        load_kwargs={"device_map": spread_map, "offload_folder": str(tmp_path / "offload")},
    ).eval()
    backbone = spread.dwatt.backbone
    assert {p.device.type for p in backbone.encoder.layer[2].parameters()} == {"meta"}  # read from disk as it runs
    assert input_device(backbone) == torch.device("cpu")
    expected = build_feature_cache(whole, tokens, dtype=torch.float32, progress=False)
    assert torch.equal(
        build_feature_cache(spread, tokens, dtype=torch.float32, progress=False).features, expected.features
    )


def test_a_disk_cache_made_for_other_contents_is_built_anew_and_says_so(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch, capsys
):
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    path = tmp_path / "features.bin"
    build_feature_cache(model, tokens, batch_size=4, progress=False, path=path, key={"backbone": "a", "data": "d"})
    runs = counting_backbone_runs(model, monkeypatch)
    build_feature_cache(model, tokens, batch_size=4, progress=False, path=path, key={"backbone": "b", "data": "d"})
    assert len(runs) == -(-len(tokens) // 4)
    assert (
        f"feature cache {path}: written for other contents (differing: backbone); building it anew"
        in capsys.readouterr().err
    )
    (tmp_path / "features.bin.json").write_text("{not json")
    build_feature_cache(model, tokens, batch_size=4, progress=False, path=path, key={"backbone": "b", "data": "d"})
    assert "does not parse; building it anew" in capsys.readouterr().err and len(runs) == 2 * -(-len(tokens) // 4)
