"""The tasks dwatt trains and serves, declared once.

Each `Task` is a record of facts: its kind (what it is done with), its model class, how a checkpoint's config names it, the Hub's pipeline tag and the
Auto class a checkpoint loads with, the dataset and batch size a run takes when none is given, the rank of its logits,
the input the console's hint shows when a run has none of its own, what its evaluation items are called, the score a
run is chosen by. It names no procedure: each role maps a task's `kind` to what it runs, beside that code (training:
`dwatt.training.together.PROCEDURES`; serving: `dwatt.serving.lines.LINE_PREDICTORS`; the console:
`dwatt.console.CONSOLES`; `dwatt evaluate`: `dwatt.cli.evaluate.scorer`; the int8 check: `TASK_CHECKS`), so that this
module points at nothing above it, and a task of the user's own (one more entry in `TASKS`, of a kind these know) is
trained, probed, stored, tabled and served with no other edit. Nothing chooses by a task's name. Importable without torch or transformers (reading the command line and
checking an ONNX export start quickly); `model_class` imports the models file when called.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

Kind = Literal["tagging", "masked_lm", "classification"]
"""What a task is done with: a label per word, the vocabulary at masked positions, a label per text."""


@dataclass(frozen=True)
class Task:
    """One task: see the module's docstring."""

    name: str  # its value of `RunConfig.task` and `--task`
    kind: Kind  # what trains, serves and shows it (each role's mapping of kinds)
    model: str  # the family-neutral model class in modeling_dwatt
    architecture_suffix: str  # what a checkpoint's `config.architectures` ends with
    pipeline_tag: str
    auto_class: str
    default_dataset: str  # the vendored CoNLL-03 copy, WikiText-2, the vendored AG News split
    batch_size: int  # the paper's for NER and MLM
    fe_learning_rate: float  # `dwatt train`'s peak rate for FE heads when --lr is not given (see TASKS)
    logits_rank: int  # (batch, seq, labels) or (batch, labels)
    example_input: str  # `{mask}` stands for the tokenizer's mask token
    items: str  # what its evaluation splits hold, in words
    few_shot: bool  # a run samples N (per class) for training
    labelled: bool  # its head predicts the labels of its data (not the vocabulary)
    score: str  # the dev score a run is chosen by, as results name it (`best_dev_<score>`, `test_scores[<score>]`)
    score_name: str  # how tables call it
    score_unit: str  # a difference in it, in words ("+1.20 F1", "+1.20 accuracy points")
    score_definition: str  # how it is computed, as the reports define it
    trains_together: bool  # FE runs of it may train as stacked copies of one head (`dwatt.training.together`)
    pools: bool  # its head reads one vector per text (`--pooling`), from the text and label columns of its files
    folder_is_dataset: bool = False  # a folder of the user's files (`--data-dir`) is a dataset of its own
    problem_type: str | None = None  # a text task's `config.problem_type`, as transformers names it

    def dataset_for(self, dataset: str | None, data_dir: str | None = None) -> str:
        """The dataset a run of this task reads, as run ids, model cards and messages name it: the one named; else,
        where the user's folder is a dataset of its own (`folder_is_dataset`), the folder's name; else the default."""
        if dataset:
            return dataset
        if data_dir is not None and self.folder_is_dataset:
            return Path(data_dir).name or self.default_dataset
        if not self.default_dataset:
            raise ValueError(
                f"--task {self.name} has no dataset of its own: give --data-dir (a folder of train and dev files) or "
                "--dataset (a Hub dataset)"
            )
        return self.default_dataset


# The FE rates: on CoNLL-03 (docs/results/fair-cpu, each method's rate chosen on dev among 5e-5 ... 1e-2), 5e-5 was
# chosen for no method in any trial and trailed 1e-3 for every one. On AG News (docs/results/fair-agnews), DWAtt's
# dev choice was 3e-4 in every N = 16 trial on MiniLM and SmolLM2, where 1e-3 trailed it on dev and test. The masked
# LM has had no such comparison: it keeps the NER rate.
TEXT_CLASSIFICATION = Task(
    name="cls",
    kind="classification",
    model="DWAttForSequenceClassification",
    architecture_suffix="ForSequenceClassification",
    pipeline_tag="text-classification",
    auto_class="AutoModelForSequenceClassification",
    default_dataset="ag_news",
    batch_size=16,
    fe_learning_rate=3e-4,
    logits_rank=2,
    example_input="Stocks rallied after the central bank held interest rates steady .",
    items="texts",
    few_shot=True,
    labelled=True,
    score="accuracy",
    score_name="accuracy",
    score_unit="accuracy points",
    score_definition="accuracy x 100",
    trains_together=True,
    pools=True,
    folder_is_dataset=True,
    problem_type="single_label_classification",
)


def _text_task(**differences) -> Task:
    """A text task of the user's own data (no dataset of its own) that trains and serves as text classification does,
    scored otherwise."""
    return replace(TEXT_CLASSIFICATION, default_dataset="", **differences)


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            name="ner",
            kind="tagging",
            model="DWAttForTokenClassification",
            architecture_suffix="ForTokenClassification",
            pipeline_tag="token-classification",
            auto_class="AutoModelForTokenClassification",
            default_dataset="conll2003",
            batch_size=16,
            fe_learning_rate=1e-3,
            logits_rank=3,
            example_input="Peter Blackburn visited Brussels .",
            items="sentences",
            few_shot=True,
            labelled=True,
            score="f1",
            score_name="F1",
            score_unit="F1",
            score_definition="seqeval micro-F1 x 100",
            trains_together=True,
            pools=False,
            folder_is_dataset=True,
        ),
        Task(
            name="mlm",
            kind="masked_lm",
            model="DWAttForMaskedLM",
            architecture_suffix="ForMaskedLM",
            pipeline_tag="fill-mask",
            auto_class="AutoModelForMaskedLM",
            default_dataset="wikitext2",
            batch_size=8,
            fe_learning_rate=1e-3,
            logits_rank=3,
            example_input="Paris is the {mask} of France .",
            items="blocks",
            few_shot=False,
            labelled=False,
            score="perplexity",
            score_name="perplexity",
            score_unit="perplexity",
            score_definition="exp of the mean masked-token loss",
            trains_together=False,
            pools=False,
        ),
        TEXT_CLASSIFICATION,
        # A text carries any number of the labels (a list, or names joined by a separator); one sigmoid per label,
        # a label predicted where its probability exceeds 0.5.
        _text_task(
            name="multilabel",
            score="micro_f1",
            score_name="micro-F1",
            score_unit="micro-F1 points",
            score_definition="micro-F1 over (text, label) pairs x 100",
            problem_type="multi_label_classification",
        ),
        # A number per text (or pair): one output, mean squared error.
        _text_task(
            name="regression",
            score="spearman",
            score_name="Spearman",
            score_unit="Spearman points",
            score_definition="Spearman's rank correlation x 100",
            problem_type="regression",
        ),
    )
}


def task_named(name: str) -> Task:
    """The task called `name`, or a clear error listing the tasks."""
    if name not in TASKS:
        raise ValueError(f"--task: unknown task {name!r}; expected one of {', '.join(TASKS)}")
    return TASKS[name]


def task_of_architectures(architectures, problem_type: str | None = None) -> Task | None:
    """The task whose model one of a checkpoint config's `architectures` is (text tasks told apart by the config's
    `problem_type`; none recorded reads as single-label), or None."""
    for architecture in architectures or []:
        for task in TASKS.values():
            if architecture.endswith(task.architecture_suffix) and _solves(task, problem_type):
                return task
    return None


def _solves(task: Task, problem_type: str | None) -> bool:
    return task.problem_type in (None, problem_type or "single_label_classification")


def model_class(task: str):
    """The model class of `task` (imports the models file)."""
    import modeling_dwatt

    return getattr(modeling_dwatt, task_named(task).model)


def task_of_model(model) -> Task | None:
    """The task whose model class `model` is an instance of (a DWAtt task model as dwatt loads it), or None for
    anything else (a probe ensemble, a stock model)."""
    problem_type = getattr(getattr(model, "config", None), "problem_type", None)
    return next(
        (task for task in TASKS.values() if isinstance(model, model_class(task.name)) and _solves(task, problem_type)),
        None,
    )


def kind_of_model(model) -> Kind | None:
    """The kind of the task whose model `model` is (`task_of_model`), or None."""
    task = task_of_model(model)
    return task.kind if task else None


__all__ = [
    "TASKS",
    "Kind",
    "Task",
    "kind_of_model",
    "model_class",
    "task_named",
    "task_of_architectures",
    "task_of_model",
]
