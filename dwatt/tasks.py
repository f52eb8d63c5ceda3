"""The tasks dwatt trains and serves, declared once.

Each `Task` says everything about a task that is a fact rather than a procedure, and where its procedures are: its model class, how a checkpoint's
config names it, the Hub's pipeline tag and the Auto class a checkpoint loads with, the dataset and batch size a run
takes when none is given, the rank of its logits, the input the console's hint shows when a run has none of its own,
what its evaluation items are called, and the score a run is chosen by. Importable without torch or transformers (reading the
command line and checking an ONNX export start quickly); `model_class` imports the models file when called.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """One task: see the module's docstring."""

    name: str  # its value of `RunConfig.task` and `--task`
    model: str  # the family-neutral model class in modeling_dwatt
    architecture_suffix: str  # what a checkpoint's `config.architectures` ends with
    pipeline_tag: str
    auto_class: str
    default_dataset: str  # the vendored CoNLL-03 copy, WikiText-2, the vendored AG News split
    batch_size: int  # the paper's for NER and MLM
    logits_rank: int  # (batch, seq, labels) or (batch, labels)
    example_input: str  # `{mask}` stands for the tokenizer's mask token
    items: str  # what its evaluation splits hold, in words
    few_shot: bool  # a run samples N (per class) for training
    labelled: bool  # its head predicts the labels of its data (not the vocabulary)
    score: str  # the dev score a run is chosen by, as results name it (`best_dev_<score>`, `test_scores[<score>]`)
    score_name: str  # how tables call it
    procedures: str  # the module of its procedures: `run(config)`, and `prepare_together` where runs train together
    trains_together: bool  # FE runs of it may train as stacked copies of one head (`dwatt.training.together`)


TASKS: dict[str, Task] = {task.name: task for task in (
    Task("ner", "DWAttForTokenClassification", "ForTokenClassification", "token-classification",
         "AutoModelForTokenClassification", "conll2003", 16, 3, "Peter Blackburn visited Brussels .", "sentences", True,
         True, "f1", "F1", "dwatt.training.ner", True),
    Task("mlm", "DWAttForMaskedLM", "ForMaskedLM", "fill-mask", "AutoModelForMaskedLM", "wikitext2", 8, 3,
         "Paris is the {mask} of France .", "blocks", False, False, "perplexity", "perplexity",
         "dwatt.training.mlm", False),
    Task("cls", "DWAttForSequenceClassification", "ForSequenceClassification", "text-classification",
         "AutoModelForSequenceClassification", "ag_news", 16, 2,
         "Stocks rallied after the central bank held interest rates steady .", "texts", True, True, "accuracy", "accuracy",
         "dwatt.training.cls", True),
)}


def task_named(name: str) -> Task:
    """The task called `name`, or a clear error listing the tasks."""
    if name not in TASKS:
        raise ValueError(f"--task: unknown task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[name]


def task_of_architectures(architectures) -> Task | None:
    """The task whose model one of a checkpoint config's `architectures` is, or None."""
    for architecture in architectures or []:
        for task in TASKS.values():
            if architecture.endswith(task.architecture_suffix):
                return task
    return None


def model_class(task: str):
    """The model class of `task` (imports the models file)."""
    import modeling_dwatt

    return getattr(modeling_dwatt, task_named(task).model)


__all__ = ["TASKS", "Task", "model_class", "task_named", "task_of_architectures"]
