"""The caches a process keeps (dwatt.features.memo): runs of one process share the backbone's features, and a run of
fewer layers takes them from a remembered cache of more."""

from dwatt.training import run_ner

from .helpers import tiny_ner_run_config


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
