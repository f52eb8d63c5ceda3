"""One run's settings (dwatt.run_config): every bad value refused before any work, naming its option; the task's
defaults filled in; dwatt train's learning rate by mode and task; what the run sets in the model's config."""

import math

import pytest

from dwatt.run_config import RunConfig, default_learning_rate
from dwatt.tasks import TASKS


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"fusion": "attention"}, "--fusion: unknown fusion 'attention'"),
        ({"mode": "frozen"}, "--mode: unknown mode 'frozen'"),
        ({"lora_rank": 0}, "--lora-rank must be >= 1"),
        ({"lora_dropout": 1.0}, "--lora-dropout in \\[0, 1\\)"),
        ({"epochs": 0}, "--epochs must be > 0, got 0"),
        ({"n_shot": -4}, "--n-shot must be > 0, got -4"),
        ({"sampling": "stratified"}, "--sampling: unknown strategy 'stratified'"),
        ({"dev_sentences": 0}, "--dev-sentences must be > 0"),
        ({"task": "mlm", "few_shot_dev": True}, "few_shot_dev: .* few-shot runs trained together"),
        ({"batch_size": 0}, "--batch-size must be > 0"),
        ({"learning_rate": math.nan}, "--lr must be a finite number > 0, got nan"),
        ({"learning_rate": -1e-3}, "--lr must be a finite number > 0"),
        ({"cache_dtype": "int8"}, "--cache-dtype: expected float16, bfloat16 or float32, got 'int8'"),
        ({"backbone_dtype": "int8"}, "--backbone-dtype: expected auto, bfloat16, float16, float32, got 'int8'"),
        ({"mode": "ft", "backbone_dtype": "float16"}, "--backbone-dtype float16 with --mode ft: .* half precision"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_option(settings, named):
    with pytest.raises(ValueError, match=named):
        RunConfig(**settings).validate()


def test_a_backbone_folder_that_is_not_there_is_named_and_a_hub_id_is_left_to_the_hub(tmp_path):
    with pytest.raises(FileNotFoundError, match="--backbone: no model folder"):
        RunConfig(backbone=str(tmp_path / "missing")).validate()
    RunConfig(backbone="sentence-transformers/all-MiniLM-L6-v2").validate()  # an id: nothing is fetched here


@pytest.mark.parametrize("task", sorted(name for name, task in TASKS.items() if task.default_dataset))
def test_the_task_fills_in_its_dataset_and_batch_size_and_its_fe_rate(task):
    config = RunConfig(task=task, n_shot=None if not TASKS[task].few_shot else 4)
    config.validate()
    assert (config.dataset, config.batch_size) == (TASKS[task].default_dataset, TASKS[task].batch_size)
    assert default_learning_rate("fe", task) == TASKS[task].fe_learning_rate
    assert default_learning_rate("ft", task) == default_learning_rate("lora", task) == RunConfig.learning_rate == 5e-5


def test_the_run_sets_its_layers_and_extra_options_in_the_model_config_and_caches_only_frozen_features():
    config = RunConfig(layers="only:9-13", extra={"query_bottleneck": 0.25})
    assert config.model_options() == {"fused_layers": "only:9-13", "query_bottleneck": 0.25}
    assert RunConfig(mode="fe").caches_features and not RunConfig(mode="lora").caches_features
    assert not RunConfig(mode="fe", use_cache=False).caches_features


def test_the_backbone_loads_as_saved_but_in_float32_where_it_trains():
    assert RunConfig().backbone_weights_dtype == RunConfig(mode="lora").backbone_weights_dtype == "auto"
    assert RunConfig(mode="ft").backbone_weights_dtype == "float32"
    assert RunConfig(mode="lora", backbone_dtype="bfloat16").backbone_weights_dtype == "bfloat16"


@pytest.mark.parametrize("task", sorted(name for name, task in TASKS.items() if not task.default_dataset))
def test_a_task_with_no_dataset_of_its_own_asks_for_the_users_files(task):
    with pytest.raises(ValueError, match=f"--task {task} has no dataset of its own: give --data-dir"):
        RunConfig(task=task, n_shot=4).validate()
    RunConfig(task=task, n_shot=4, dataset="someone/their-dataset").validate()
