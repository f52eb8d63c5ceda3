"""Training on the stock `transformers.Trainer`, one module per task beside what they share.

- `trainer_run`: a run on the `Trainer`: its arguments, its mode applied, resuming;
- `initial_models`: the models a sweep's runs start from, remembered across its runs;
- `placement`: where a run's model goes (a device, or spread by a `device_map`) and where its disk caches are kept;
- `run_results`: how a run ends: its results.json and its checkpoint, written whole;
- `run_caches`: a run's feature caches;
- `prepared_together`: what a task's module prepares for its runs trained together;
- `callbacks`: FE/FT freezing, best-dev tracking, exact losses under data parallelism;
- `ner`: few-shot NER;
- `mlm`: masked LM on WikiText-2;
- `cls`: few-shot text classification;
- `together`: FE runs of one sample trained together by the stacked engine (NER, text classification).

`run(config)` runs `config.task`'s procedure (`together.PROCEDURES`, the training side's mapping of task kinds);
`EXECUTION` hands `run` and `run_together` to the sweeps and the probe (`dwatt.experiment`), which import no training.
"""

from __future__ import annotations

from ..atomic import write_json_atomically
from ..data import CONLL_LABELS
from ..data.ner import load_ner_dataset
from ..execution import ExecutionOf, RunResults
from ..run_config import MODES, SAMPLINGS, RunConfig
from ..splits import DEV_SAMPLE_SEED
from ..tasks import TASKS
from .callbacks import BestDevCallback, DataParallelLossCallback, FreezeBackboneCallback, trainable_parameter_names
from .cls import run_classification
from .initial_models import INITIAL_MODELS, InitialModels
from .mlm import MLM_MASK_SEEDS, evaluate_mlm, load_mlm_splits, run_mlm
from .ner import run_ner
from .run_caches import FEATURE_MEMO
from .run_results import finish_run
from .together import evaluate_features, procedures, run_together
from .trainer_run import training_arguments


def run(config: RunConfig) -> RunResults:
    """One run of `config.task` with the `Trainer`: few-shot NER (`run_ner`), masked LM (`run_mlm`) or text
    classification (`run_classification`); each validates `config`."""
    return procedures(config.task).run(config)


EXECUTION = ExecutionOf(alone=run, together=run_together)  # how the command line's sweeps and probes train their runs


__all__ = [
    "CONLL_LABELS",
    "DEV_SAMPLE_SEED",
    "EXECUTION",
    "FEATURE_MEMO",
    "INITIAL_MODELS",
    "MLM_MASK_SEEDS",
    "MODES",
    "SAMPLINGS",
    "TASKS",
    "BestDevCallback",
    "DataParallelLossCallback",
    "FreezeBackboneCallback",
    "InitialModels",
    "RunConfig",
    "evaluate_features",
    "evaluate_mlm",
    "finish_run",
    "load_mlm_splits",
    "load_ner_dataset",
    "run",
    "run_classification",
    "run_mlm",
    "run_ner",
    "run_together",
    "trainable_parameter_names",
    "training_arguments",
    "write_json_atomically",
]
