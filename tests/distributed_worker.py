"""One `dwatt.training.run` under a data-parallel launcher, recording what each process writes and ends with.

Usage (see tests/test_distributed.py): torchrun --nproc_per_node 2 distributed_worker.py CONFIG.json RECORD_DIR
Each process writes RECORD_DIR/rank<R>.json (the files it wrote, its results) and rank<R>.safetensors (its
trainable weights at the end of the run).
"""

import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from dwatt import training
from dwatt.training import RunConfig, run

config_path, record_dir = Path(sys.argv[1]), Path(sys.argv[2])
rank = int(os.environ["RANK"])
written: list[str] = []

write_json = training.write_json_atomically


def recording_write_json(path, payload):
    written.append(str(path))
    write_json(path, payload)


def recording(save):
    def wrapper(self, directory, *args, **kwargs):
        written.append(str(directory))
        return save(self, directory, *args, **kwargs)

    return wrapper


finish_run = training.finish_run


def recording_finish_run(config, model, tokenizer, results, started):
    trainable = {name: p.detach().cpu().contiguous() for name, p in model.named_parameters() if p.requires_grad}
    save_file(trainable, str(record_dir / f"rank{rank}.safetensors"))
    return finish_run(config, model, tokenizer, results, started)


training.write_json_atomically = recording_write_json
training.finish_run = recording_finish_run
PreTrainedModel.save_pretrained = recording(PreTrainedModel.save_pretrained)
PreTrainedTokenizerBase.save_pretrained = recording(PreTrainedTokenizerBase.save_pretrained)

results = run(RunConfig(**json.loads(config_path.read_text())))
world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
(record_dir / f"rank{rank}.json").write_text(json.dumps({"world_size": world, "written": written, "results": results}, default=str))
