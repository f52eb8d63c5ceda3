"""The tasks declared once (dwatt.tasks): every fact about a task comes from its record."""

import re
import typing
from pathlib import Path

import pytest
import transformers

import modeling_dwatt
from dwatt.tasks import TASKS, Kind, model_class, task_named, task_of_architectures

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", TASKS)
def test_each_task_names_a_model_its_architecture_and_auto_class_say_the_same(name):
    task = TASKS[name]
    cls = model_class(name)
    assert cls is getattr(modeling_dwatt, task.model) and cls.__name__.endswith(task.architecture_suffix)
    assert task_of_architectures([cls.__name__], task.problem_type) is task
    assert task_of_architectures(["BertModel"], task.problem_type) is None
    assert hasattr(transformers, task.auto_class) and task.auto_class.endswith(task.architecture_suffix)
    assert task.logits_rank in (2, 3) and task.batch_size > 0


def test_a_text_checkpoint_s_task_is_told_by_its_problem_type():
    """Three tasks share the sequence classifier: a config's `problem_type` says which; none recorded (an older
    checkpoint, a stock one) reads as single-label."""
    architectures = ["DWAttForSequenceClassification"]
    assert task_of_architectures(architectures).name == "cls"
    assert task_of_architectures(architectures, "multi_label_classification").name == "multilabel"
    assert task_of_architectures(architectures, "regression").name == "regression"


def test_an_unknown_task_is_refused_with_the_tasks_listed():
    with pytest.raises(ValueError, match="--task: unknown task 'pos'; expected one of ner, mlm, cls"):
        task_named("pos")


# A table keyed by task names, or a choice made by comparing a task's name: none outside the registry (the
# experiment tables pick their rows by dataset, or by the score the task records declare; each role maps a task's
# kind to what it runs, each mapping checked below to cover every kind).
TASK_DISPATCH = re.compile(r"""["'](ner|mlm|cls)["']\s*:|task["')\]]*\s*[!=]=\s*["']|task\s+(not\s+)?in\s+\(["']""")
KINDS = set(typing.get_args(Kind))


def test_nothing_tells_tasks_apart_by_name():
    found = {}
    for path in [*ROOT.glob("*_dwatt.py"), *(ROOT / "dwatt").rglob("*.py")]:
        if path.name == "tasks.py":
            continue
        count = sum(bool(TASK_DISPATCH.search(line)) for line in path.read_text().splitlines())
        if count:
            found[path.relative_to(ROOT).as_posix()] = count
    assert found == {}


def test_the_task_dispatch_pattern_catches_what_it_claims_to():
    for line in (
        'if task == "cls":',
        "table = {'ner': 1}",
        'if results.get("task") == "mlm":',
        "task in ('ner', 'cls')",
        'frame[(frame.task == "ner")]',
    ):
        assert TASK_DISPATCH.search(line), line
    assert not TASK_DISPATCH.search("task = TASKS[name]")


def test_the_training_side_has_a_procedure_for_every_task_and_those_that_train_together_can():
    from dwatt.training.together import PROCEDURES, procedures

    assert set(PROCEDURES) == KINDS
    for task in TASKS.values():
        module = procedures(task.name)
        assert callable(module.run), task.name
        assert hasattr(module, "prepare_together") == task.trains_together, task.name


@pytest.mark.parametrize("role", ["scorer", "line_predictor"])
def test_the_commands_have_a_scorer_and_a_line_predictor_for_every_task(role):
    """`dwatt evaluate` and `dwatt predict` take these from their own mappings; each takes the keywords the command
    gives."""
    import inspect

    from dwatt.cli.evaluate import scorer
    from dwatt.serving.lines import LINE_PREDICTORS

    assert set(LINE_PREDICTORS) == KINDS
    for task in TASKS.values():
        function = scorer(task.name) if role == "scorer" else LINE_PREDICTORS[task.kind]
        assert callable(function), (task.name, role)
        parameters = inspect.signature(function).parameters
        wanted = (
            {"dataset", "data_dir", "split", "batch_size", "block_size", "seed"}
            if role == "scorer"
            else {"model", "tokenizer", "batch_size", "form"}
        )
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        assert wanted <= set(parameters) or takes_any, (task.name, role, list(parameters))


def test_the_int8_check_of_an_export_knows_every_task():
    from dwatt.serving.int8_graphs import TASK_CHECKS

    assert set(TASK_CHECKS) == KINDS
    assert all(callable(check.answers) and callable(check.default_sample) for check in TASK_CHECKS.values())


def test_the_console_tells_the_runs_of_every_task():
    from dwatt.console import CONSOLES, RunConsole

    assert set(CONSOLES) == KINDS
    for console in CONSOLES.values():
        assert issubclass(console, RunConsole) and console.headline is not RunConsole.headline


def test_the_floor_scores_every_kind_whose_tasks_have_labels():
    from dwatt.experiment.baselines import BASELINES_OF_KIND

    assert set(BASELINES_OF_KIND) == {task.kind for task in TASKS.values() if task.labelled}


def test_the_task_records_name_no_procedure():
    """Records of facts: no "module:function" string that points at code above them."""
    from dataclasses import astuple

    for task in TASKS.values():
        assert not any(isinstance(value, str) and value.startswith("dwatt.") for value in astuple(task)), task.name
