"""One `dwatt.training.run` under a data-parallel launcher, recording what each process writes and ends with.

Usage (see tests/test_distributed.py): torchrun --nproc_per_node 2 distributed_worker.py CONFIG.json RECORD_DIR
With DWATT_TEST_CACHES_ON_DISK set, every feature cache goes to disk. Each process writes RECORD_DIR/rank<R>.json (the
files it wrote, its results) and rank<R>.safetensors (its
trainable weights at the end of the run).
"""

import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from dwatt.features import memory as features
from dwatt.training import BestDevCallback, RunConfig, run, run_results

config_path, record_dir = Path(sys.argv[1]), Path(sys.argv[2])
rank = int(os.environ["RANK"])
written: list[str] = []

write_json = run_results.write_json_atomically


def recording_write_json(path, payload):
    written.append(str(path))
    write_json(path, payload)


def recording(save):
    def wrapper(self, directory, *args, **kwargs):
        written.append(str(directory))
        return save(self, directory, *args, **kwargs)

    return wrapper


restore_best = BestDevCallback.restore_best


def recording_restore_best(self, model):
    """The run's final weights: the best dev epoch's, restored at the end of training."""
    restore_best(self, model)
    trainable = {name: p.detach().cpu().contiguous() for name, p in model.named_parameters() if p.requires_grad}
    save_file(trainable, str(record_dir / f"rank{rank}.safetensors"))


if os.environ.get("DWATT_TEST_CACHES_ON_DISK"):
    features.MEMORY_SHARE = 0.0
run_results.write_json_atomically = recording_write_json  # finish_run writes results.json through it
BestDevCallback.restore_best = recording_restore_best
PreTrainedModel.save_pretrained = recording(PreTrainedModel.save_pretrained)
PreTrainedTokenizerBase.save_pretrained = recording(PreTrainedTokenizerBase.save_pretrained)

results = run(RunConfig(**json.loads(config_path.read_text())))
world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
(record_dir / f"rank{rank}.json").write_text(
    json.dumps({"world_size": world, "written": written, "results": results}, default=str)
)
