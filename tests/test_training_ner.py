"""NER runs (dwatt.training.ner): a run on cached layers ends where the uncached one does. Runs trained together: test_training_together."""

from dwatt.training import run_ner

from .helpers import tiny_ner_run_config


def test_cached_and_uncached_runs_reach_the_same_dev_scores(tiny_backbone, tiny_conll, tmp_path):
    cached = run_ner(tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "cached", save_model=False))
    uncached = run_ner(
        tiny_ner_run_config(tiny_backbone, tiny_conll, tmp_path / "uncached", use_cache=False, save_model=False)
    )
    assert cached["cached_features"] and not uncached["cached_features"]
    assert cached["sampled_sentence_ids"] == uncached["sampled_sentence_ids"]
    for mine, theirs in zip(cached["dev_curve"], uncached["dev_curve"]):
        assert abs(mine["f1"] - theirs["f1"]) <= 0.001
