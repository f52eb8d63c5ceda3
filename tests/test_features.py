"""The feature cache (dwatt.features): cached layers give exactly the uncached logits (fp32), memory-mapped equals in
memory, a dev cache of the scored positions only scores the same, and runs of one process share the backbone's
features, a run of fewer layers taking them from a remembered cache of more."""

import json

import pytest
import torch
from transformers import BertTokenizerFast, DataCollatorForTokenClassification

from dwatt import RobertaDWAttForTokenClassification
from dwatt.data import load_conll2003, tokenize_and_align
from dwatt.features import FeatureCollator, build_feature_cache
from dwatt.training import run_ner

from .helpers import tiny_ner_run_config


@pytest.mark.parametrize("fusion", ["dwatt", "base_plus_n", "scalar_mix"])
def test_cached_features_give_exactly_the_uncached_logits_in_fp32(tiny_backbone, tiny_conll, fusion):
    data = load_conll2003(tiny_conll)["validation"]
    tokenizer = BertTokenizerFast.from_pretrained(tiny_backbone)
    tokens = tokenize_and_align(data, tokenizer)
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]["input_ids"]))
    tokens = tokens.select(order).select_columns(["input_ids", "token_type_ids", "attention_mask", "labels"])
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), fusion=fusion, num_labels=9).eval()
    cache = build_feature_cache(model, tokens, batch_size=len(tokens), dtype=torch.float32, progress=False)
    cached_batch = FeatureCollator()([cache[i] for i in range(len(cache))])
    direct_batch = DataCollatorForTokenClassification(tokenizer)([tokens[i] for i in range(len(tokens))])
    assert torch.equal(cached_batch["labels"], direct_batch["labels"])
    with torch.no_grad():
        cached = model(
            backbone_hidden_states=cached_batch["backbone_hidden_states"],
            attention_mask=cached_batch["attention_mask"],
        ).logits
        direct = model(**{k: v for k, v in direct_batch.items() if k != "labels"}).logits
    real = direct_batch["attention_mask"].bool()  # padded positions hold zeros in the cache, by design
    assert torch.equal(cached[real], direct[real])
    assert cache[0]["backbone_hidden_states"].shape[0] == len(model.dwatt.fused_layer_indices)


def test_memory_mapped_cache_equals_the_in_memory_one(tiny_backbone, tiny_conll, tmp_path):
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9)
    in_memory = build_feature_cache(model, tokens, progress=False)
    mapped = build_feature_cache(model, tokens, path=tmp_path / "features.bin", progress=False)
    assert (tmp_path / "features.bin").stat().st_size == in_memory.nbytes
    assert torch.equal(in_memory.features, mapped.features) and in_memory.features.dtype == torch.float16


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


def test_dev_cache_of_scored_positions_gives_the_same_scores(tiny_backbone, tiny_conll):
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    full = build_feature_cache(model, tokens, dtype=torch.float32, progress=False)
    scored = build_feature_cache(model, tokens, dtype=torch.float32, progress=False, scored_positions_only=True)
    assert (
        scored.features.shape[0]
        == sum(label != -100 for row in tokens["labels"] for label in row)
        < full.features.shape[0]
    )
    for index in range(len(tokens)):
        whole, compact = full[index], scored[index]
        keep = whole["labels"] != -100
        assert torch.equal(compact["labels"], whole["labels"][keep])
        with torch.no_grad():
            a = model(backbone_hidden_states=whole["backbone_hidden_states"][None]).logits[0][keep]
            b = model(backbone_hidden_states=compact["backbone_hidden_states"][None]).logits[0]
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    base_plus = RobertaDWAttForTokenClassification.from_backbone(
        str(tiny_backbone), fusion="base_plus_n", num_labels=9
    )
    with pytest.raises(ValueError, match="needs a per-token fusion; 'base_plus_n' mixes positions"):
        build_feature_cache(base_plus, tokens, scored_positions_only=True)


def test_runs_of_one_process_share_backbone_features_and_agree_with_fresh_ones(tiny_backbone, tiny_conll, tmp_path):
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    first = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "a", save_model=False, fusion="concat"))
    misses = FEATURE_MEMO.misses
    second = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "b", save_model=False, fusion="dwatt"))
    assert FEATURE_MEMO.misses == misses and FEATURE_MEMO.hits >= 2  # same layers, sample and dev: no new features
    FEATURE_MEMO.clear()
    fresh = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "c", save_model=False, fusion="dwatt"))
    assert fresh["dev_curve"] == second["dev_curve"] and first["dev_curve"] != second["dev_curve"]
    run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "d", save_model=False, fusion="dwatt", seed=1))
    assert FEATURE_MEMO.misses == 3  # another trial draws another sample: its training features are new


def test_a_run_reading_fewer_layers_takes_them_from_a_remembered_cache_of_more(tiny_backbone, tiny_conll, tmp_path):
    from dwatt.experiment.grid import grid, widest_first
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    run_ner(
        tiny_ner_run_config(
            tiny_backbone, tiny_conll, tmp_path / "all", save_model=False, fusion="dwatt", cache_dtype="float32"
        )
    )
    misses = FEATURE_MEMO.misses
    derived = run_ner(
        tiny_ner_run_config(
            tiny_backbone, tiny_conll, tmp_path / "base", save_model=False, fusion="base", cache_dtype="float32"
        )
    )
    assert FEATURE_MEMO.misses == misses  # z_L of the sample and of the dev split, out of DWAtt's caches
    FEATURE_MEMO.clear()
    fresh = run_ner(
        tiny_ner_run_config(
            tiny_backbone, tiny_conll, tmp_path / "fresh", save_model=False, fusion="base", cache_dtype="float32"
        )
    )
    assert fresh["dev_curve"] == derived["dev_curve"] and fresh["best_dev_scores"] == derived["best_dev_scores"]
    # A sweep runs each sample's all-layer fusions first, so that Base and Base+n find their layer remembered.
    order = [
        spec.fusion
        for spec in widest_first(
            grid(["base", "base_plus_n", "concat", "dwatt"], n_shots=(2, 4), epochs=(1,), trials=1)
        )
    ]
    assert order == ["concat", "dwatt", "base", "base_plus_n"] * 2
    FEATURE_MEMO.clear()


def _counting_backbone_runs(model, monkeypatch, stop_after: int | None = None) -> list:
    """Count the backbone runs of `model`'s feature cache builds; with `stop_after`, the run after that many stops
    the build as Ctrl-C would."""
    runs, run_backbone = [], model.dwatt.run_backbone

    def counted(**inputs):
        if stop_after is not None and len(runs) == stop_after:
            raise KeyboardInterrupt
        runs.append(inputs["input_ids"].shape[0])
        return run_backbone(**inputs)

    monkeypatch.setattr(model.dwatt, "run_backbone", counted)
    return runs


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
    monkeypatch.setattr("dwatt.features.RECORD_EVERY_SECONDS", -1.0)  # a record after every batch
    runs = _counting_backbone_runs(model, monkeypatch, stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        build_feature_cache(model, tokens, batch_size=1, progress=False, path=path, key=key)
    monkeypatch.undo()
    runs = _counting_backbone_runs(model, monkeypatch)
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
    monkeypatch.setattr("dwatt.features.RECORD_EVERY_SECONDS", -1.0)  # a record after every batch
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
    from dwatt.features import input_device

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
    runs = _counting_backbone_runs(model, monkeypatch)
    build_feature_cache(model, tokens, batch_size=4, progress=False, path=path, key={"backbone": "b", "data": "d"})
    assert len(runs) == -(-len(tokens) // 4)
    assert (
        f"feature cache {path}: written for other contents (differing: backbone); building it anew"
        in capsys.readouterr().err
    )
    (tmp_path / "features.bin.json").write_text("{not json")
    build_feature_cache(model, tokens, batch_size=4, progress=False, path=path, key={"backbone": "b", "data": "d"})
    assert "does not parse; building it anew" in capsys.readouterr().err and len(runs) == 2 * -(-len(tokens) // 4)


def test_a_disk_that_cannot_hold_the_cache_is_refused_before_any_write_naming_the_file(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    import errno
    import os

    from dwatt.features import CacheTooLargeError

    def full(descriptor, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    tokens = tokenize_and_align(
        load_conll2003(tiny_conll)["validation"], BertTokenizerFast.from_pretrained(tiny_backbone)
    )
    model = RobertaDWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=9).eval()
    runs = _counting_backbone_runs(model, monkeypatch)
    with pytest.raises(
        CacheTooLargeError,
        match=f"the feature cache {tmp_path / 'features.bin'} needs .* GiB on its disk, "
        "which cannot hold it \\(No space left on device\\)",
    ):
        build_feature_cache(model, tokens, progress=False, path=tmp_path / "features.bin", key={"backbone": "a"})
    assert runs == [] and not (tmp_path / "features.bin").exists()


def test_a_memory_budget_sends_the_caches_that_do_not_fit_beside_the_model_to_disk(monkeypatch, tmp_path):
    import collections

    import psutil

    from dwatt.features import WORKING_MARGIN, CacheTooLargeError, cache_storage

    monkeypatch.setattr(psutil, "virtual_memory", lambda: collections.namedtuple("Memory", "available")(64 << 30))
    assert cache_storage(2 << 30, tmp_path, max_memory=None, model_bytes=3 << 30) is None
    assert cache_storage(2 << 30, tmp_path, max_memory=8 << 30, model_bytes=3 << 30) is None
    assert cache_storage(5 << 30, tmp_path, max_memory=8 << 30, model_bytes=3 << 30) == tmp_path
    # caches already in memory take their share: a new one goes to disk, the model is not refused for them
    assert cache_storage(1 << 30, tmp_path, max_memory=8 << 30, model_bytes=3 << 30, cached_bytes=5 << 30) == tmp_path
    assert cache_storage(1, tmp_path, on_disk=True) == tmp_path  # --cache-on-disk: to files, however small
    with pytest.raises(
        CacheTooLargeError,
        match=r"--max-memory 3.00 GiB: the model alone takes 3.00 GiB, .* give a budget "
        r"of at least 5.00 GiB",
    ):
        cache_storage(1, tmp_path, max_memory=3 << 30, model_bytes=3 << 30)
    assert WORKING_MARGIN == 2 << 30


def test_freed_memory_goes_back_once_anonymous_memory_grew_by_the_slack(monkeypatch):
    """A loop's `release()` after each batch hands freed memory back on its first call, then only once the process's
    anonymous memory has grown by more than the slack since: not on every batch."""
    import dwatt.features as features

    anonymous, released = [100], []
    monkeypatch.setattr(features, "anonymous_bytes", lambda: anonymous[0])
    monkeypatch.setattr(features, "release_freed_memory", lambda: released.append(anonymous[0]))
    freed = features.FreedMemoryRelease(slack=10)
    for level in (100, 105, 110, 111, 115, 130, 131):
        anonymous[0] = level
        freed.release()
    assert released == [100, 111, 130]
    monkeypatch.setattr(features, "anonymous_bytes", lambda: None)  # a system that does not say: nothing released
    features.FreedMemoryRelease().release()
    assert released == [100, 111, 130]


def test_anonymous_bytes_is_what_the_system_calls_rss_anon():
    from pathlib import Path

    from dwatt.features import anonymous_bytes

    if not Path("/proc/self/status").exists():
        pytest.skip("reads /proc: Linux only")
    status = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("RssAnon"))
    assert abs(anonymous_bytes() - status) < 8 << 20
