"""What a run reads of its data (dwatt.splits): the dev subset and, for data without a test split, the rest of the dev
split as its test set."""


def test_test_on_data_without_a_test_split_scores_the_dev_examples_outside_the_dev_subset(
    tiny_backbone, tiny_topics, tmp_path
):
    """With --dev-sentences below the dev split's size, test is the rest of the split: every dev example is in
    exactly one of the two, and no choice is made on test."""
    from datasets import Dataset

    from dwatt.splits import dev_held_out, dev_subset
    from dwatt.training import RunConfig, run

    config = RunConfig(
        task="cls",
        backbone=str(tiny_backbone),
        data_dir=str(tiny_topics),
        n_shot=3,
        epochs=1,
        dev_sentences=5,
        evaluate_test=True,
        output_dir=str(tmp_path / "run"),
        progress=False,
        save_model=False,
    )
    results = run(config)
    assert (
        results["num_dev_examples"] == 5 and results["num_test_examples"] == 4 and "accuracy" in results["test_scores"]
    )
    split = Dataset.from_dict({"i": list(range(9))})
    dev, test = list(dev_subset(split, config)["i"]), list(dev_held_out(split, config)["i"])
    assert sorted(dev + test) == list(range(9)) and test == sorted(test)
    assert dev_held_out(split, RunConfig(task="cls", dev_sentences=9)) is None


def test_a_class_too_small_for_the_sample_is_named_by_its_label(tiny_topics):
    """Not "class 0": the label the user's file calls it."""
    import pytest

    from dwatt.sampling import SamplingError
    from dwatt.splits import classification_splits
    from dwatt.training import RunConfig

    with pytest.raises(SamplingError, match="class 'food' has 6 examples; cannot sample 7 of them"):
        classification_splits(RunConfig(task="cls", data_dir=str(tiny_topics), n_shot=7))
