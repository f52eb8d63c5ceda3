"""What a task's module prepares for its runs trained together (dwatt.training.prepared_together)."""

import inspect
import typing

from dwatt.tasks import TASKS
from dwatt.training.prepared_together import TrainedTogether
from dwatt.training.together import PROCEDURES


def test_every_task_that_trains_together_has_a_procedure_that_prepares_what_together_reads():
    kinds = {task.kind for task in TASKS.values() if task.trains_together}
    assert kinds  # NER and text classification at least
    for kind in kinds:
        prepare = PROCEDURES[kind].prepare_together
        assert typing.get_type_hints(prepare)["return"] is TrainedTogether, kind
    # what `together` reads of it: the model, the cached sets and their collator, the scores, the results, the test
    assert list(inspect.signature(TrainedTogether).parameters) == [
        "model",
        "tokenizer",
        "train_set",
        "dev_set",
        "collator",
        "train_size",
        "dev_metrics",
        "results",
        "test",
    ]
