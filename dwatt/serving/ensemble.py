"""A probe ensemble served as one model: the heads of the best layers on one backbone pass, their class probabilities
averaged, as `dwatt.training.probe_ensembles` scored them.

`dwatt probe --save-ensemble K` writes a folder holding `ensemble.json` (the members' checkpoint folders, best layer
first, and how they were chosen) beside the members' checkpoints (each with the backbone's tokenizer; the deepest
member whole, cut at its layer, carrying the backbone they share, the others head-only): the folder's
format is `dwatt.checkpoints`' (`write_ensemble`, `member_folders`); `dwatt push` sends it to the Hub as one repo
(`dwatt.hub.push_ensemble`: the members head-only), which loads by its id. `dwatt predict` and `dwatt evaluate` run
such a folder like any checkpoint: `AveragedHeads` runs the backbone once, as deep as the deepest member reads
(`SharedBackboneHeads`), and gives the log of the members' mean probabilities as its logits, so that an arg-max or a
softmax of them is the ensemble's. Like a checkpoint, it runs int8 on a CPU
(`--quantize int8`: the shared backbone's linear maps, `dwatt.serving.quantization`) and exports to one ONNX graph
(`dwatt export`, `dwatt.serving.export`), its members' heads inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers.utils import ModelOutput

from ..atomic import read_json
from ..checkpoints import ENSEMBLE_FILE, checkpoint_task, ensemble_folder, is_ensemble, load_checkpoint, member_folders
from ..tokenization import load_tokenizer
from .shared_heads import SharedBackboneHeads


@dataclass
class EnsembleOutput(ModelOutput):
    """`logits`: the log of the members' mean class probabilities (per token for a tagger)."""

    logits: torch.Tensor | None = None


class AveragedHeads(nn.Module):
    """Heads of one task and label set on one backbone (`SharedBackboneHeads`), served as one model whose logits are
    the log of their mean probabilities. `config` is the first member's (its labels are every member's)."""

    def __init__(self, heads: nn.Module):
        super().__init__()
        members = list(heads.heads.values())
        first = members[0].config
        for name, head in heads.heads.items():
            if type(head) is not type(members[0]) or head.config.id2label != first.id2label:
                raise ValueError(
                    f"an ensemble's members must be heads of one task and label set: {name} is a "
                    f"{type(head).__name__} with labels {list(head.config.id2label.values())}, the first "
                    f"a {type(members[0]).__name__} with {list(first.id2label.values())}"
                )
        self.heads, self.config = heads, first
        self.manifest: dict = {}  # the folder's ensemble.json, where it was loaded from one (`load_ensemble`)

    @property
    def takes_token_types(self) -> bool:
        """Whether the shared backbone reads token types (an exported graph takes them as an input)."""
        return self.heads.runner.backbone_runner.takes_token_types

    @property
    def device(self) -> torch.device:
        return next(self.heads.parameters()).device

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, logits_mask=None, word_ids=None
    ) -> EnsembleOutput:
        outputs = self.heads(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            logits_mask=logits_mask,
            word_ids=word_ids,
        )
        # The log of the mean probability, computed from log-probabilities: never -inf where one member is sure
        log_probabilities = torch.stack([output.logits.float().log_softmax(-1) for output in outputs.values()])
        return EnsembleOutput(logits=log_probabilities.logsumexp(0) - math.log(len(outputs)))


def load_ensemble(folder: str | Path):
    """The ensemble in `folder` (or a Hub repo `dwatt push` wrote it to: `ensemble_folder`) as `AveragedHeads`, in
    eval mode, its tokenizer (its first member's) and its task."""

    local = ensemble_folder(folder)
    paths = member_folders(local)
    model = AveragedHeads(SharedBackboneHeads.from_pretrained([str(path) for path in paths])).eval()
    model.manifest = read_json(local / ENSEMBLE_FILE)
    return model, load_tokenizer(str(paths[0])), checkpoint_task(model.config)


def load_checkpoint_or_ensemble(folder: str | Path):
    """What `folder` holds, run in PyTorch: a probe ensemble (`load_ensemble`) or a checkpoint
    (`dwatt.checkpoints.load_checkpoint`); the model in eval mode, its tokenizer and its task."""

    return load_ensemble(folder) if is_ensemble(folder) else load_checkpoint(folder)


__all__ = ["AveragedHeads", "EnsembleOutput", "load_checkpoint_or_ensemble", "load_ensemble"]
