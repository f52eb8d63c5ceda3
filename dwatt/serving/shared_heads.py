"""Many heads on one frozen backbone: several DWAtt checkpoints served with one backbone pass.

In the FE setting a head never changes its backbone, so heads trained on one encoder (other label sets, other
languages, NER beside masked LM) can share it at serving time: `SharedBackboneHeads` loads the backbone once, runs it
once per batch, and feeds each head the layers it reads. Each head's outputs equal those of its checkpoint loaded
alone (tests/test_shared_heads.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModel
from transformers.utils import cached_file

from backbones_dwatt import backbone_kwargs
from configuration_dwatt import DWAttConfig
from depth_dwatt import cut_config, layers_past_pattern
from pretrained_dwatt import BACKBONE_IDENTITY, BACKBONE_PREFIX, HUB_KWARGS

from ..atomic import read_json
from ..checkpoints import checkpoint_task, head_on_meta
from ..head_stack import StackedHeads, head_tensors
from ..tasks import model_class as task_model_class

WEIGHTS, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"


# Encoder-config fields that cannot change an inference forward pass, left out when heads are checked for a shared
# backbone: what the config was saved from and by, the labels of a head the backbone shipped with, switches of what
# a forward returns, the initialisation of weights that are loaded anyway, and the dtype it was saved in (the shared
# backbone runs in one). Besides these, any field whose name starts with "_" (transformers' bookkeeping) and every
# dropout probability (dropout is off at inference).
NOT_IN_FORWARD = (
    "architectures",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "id2label",
    "label2id",
    "num_labels",
    "problem_type",
    "finetuning_task",
    "task_specific_params",
    "initializer_range",
    "use_cache",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "tokenizer_class",
    "gradient_checkpointing",
)


def changes_the_forward(field: str) -> bool:
    """Whether an encoder-config field can change what the backbone computes at inference."""
    return not (field in NOT_IN_FORWARD or field.startswith("_") or "dropout" in field or field.endswith("_pdrop"))


def backbone_identity(config: DWAttConfig) -> dict:
    """What must agree between heads that share a backbone: every encoder-config field that can change the
    backbone's forward pass (architecture and shape first), whether its layers are read through its final norm and
    how it reads words (one pass hands every head the same hidden states, from the same input), and for a head-only
    checkpoint the backbone's name and revision."""
    encoder = config.encoder_config.to_dict()
    first = {key: encoder.get(key) for key in BACKBONE_IDENTITY}
    rest = {key: encoder[key] for key in sorted(encoder) if key not in first and changes_the_forward(key)}
    identity = first | rest | {"through_final_norm": config.through_final_norm, "word_readout": config.word_readout}
    if config.heads_only:  # a full checkpoint carries its backbone's weights; a head-only one names them
        identity |= {
            "backbone_name_or_path": config.backbone_name_or_path,
            "backbone_revision": config.backbone_revision,
        }
    return identity


def _checkpoint_tensors(path: str, hub_kwargs: dict) -> dict[str, torch.Tensor]:
    """Every tensor a checkpoint stores (one safetensors file, or the shards of its index)."""
    single = cached_file(path, WEIGHTS, _raise_exceptions_for_missing_entries=False, **hub_kwargs)
    if single is not None:
        return load_file(single)
    index = cached_file(path, WEIGHTS_INDEX, **hub_kwargs)
    try:
        shards = sorted(set(read_json(index)["weight_map"].values()))
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"{index}: not a weights index (no weight_map of shard files)") from None
    tensors: dict[str, torch.Tensor] = {}
    for shard in shards:
        tensors |= load_file(cached_file(path, shard, **hub_kwargs))
    return tensors


# Configuration fields two heads may differ in and still run as copies of one head: their labels' names, and where
# they came from.
NOT_IN_HEAD_FORWARD = (
    "id2label",
    "label2id",
    "_name_or_path",
    "architectures",
    "transformers_version",
    "backbone_name_or_path",
    "backbone_revision",
    "heads_only",
)


def stack_key(head: nn.Module) -> tuple:
    """What heads stacked as copies of one must share: their class, their configuration (`NOT_IN_HEAD_FORWARD` aside)
    and the names, shapes and dtypes of their own tensors."""
    config = {key: value for key, value in head.config.to_dict().items() if key not in NOT_IN_HEAD_FORWARD}
    shapes = tuple((name, tuple(t.shape), t.dtype) for name, t in head_tensors(head).items())
    return type(head), json.dumps(config, sort_keys=True, default=str), shapes


def head_names(paths: Sequence[str]) -> dict[str, str]:
    """`{name: path}` with each name the shortest ending of its path that tells it from the others
    (`runs/conll/model`, `runs/wikiann/model` -> `conll/model`, `wikiann/model`)."""
    if len(set(paths)) != len(paths):
        raise ValueError(f"the same checkpoint is given twice: {sorted(p for p in set(paths) if paths.count(p) > 1)}")
    parts = [Path(path).parts or (path,) for path in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return dict(zip(names, paths))
    return {path: path for path in paths}


def _backbone_part(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A checkpoint's backbone tensors, keyed as in the backbone itself."""
    return {k.removeprefix(BACKBONE_PREFIX): v for k, v in tensors.items() if k.startswith(BACKBONE_PREFIX)}


def _pretrained_backbone(
    model_class, config, backbone_name_or_path: str | None, hub_kwargs: dict, depth: int | None = None
):
    """The pretrained model a head-only checkpoint names (or `backbone_name_or_path`), at the recorded revision, with
    its first `depth` layers (all by default)."""
    load = {k: v for k, v in hub_kwargs.items() if k != "revision"}
    if config.backbone_revision and not backbone_name_or_path:
        load["revision"] = config.backbone_revision
    return model_class.load_pretrained_backbone(
        backbone_name_or_path or config.backbone_name_or_path, load, depth=depth
    )


class SharedBackboneHeads(nn.Module):
    """
    Several DWAtt checkpoints (head-only or full, token-classification or masked-LM) on one backbone, loaded once.

    `forward` runs the backbone once and returns each head's output by name (`logits`, and `layer_weights` where the
    fusion has them). Build it with `from_pretrained([...])`; checkpoints must record the same backbone (every
    encoder-config field that can change its forward pass, see `backbone_identity`, and for head-only ones its
    name and revision), and full checkpoints must carry the very backbone weights the others share (an FT or a LoRA
    checkpoint, whose backbone changed, cannot share it; both are refused with the reason).
    """

    def __init__(self, heads: dict[str, nn.Module], backbone: nn.Module, vectorize: bool | None = None):
        super().__init__()
        if not heads:
            raise ValueError("SharedBackboneHeads needs at least one head")
        self.backbone = backbone.requires_grad_(False)  # served, never trained: no head's copy of it is made
        self.heads = nn.ModuleDict(heads)
        for head in self.heads.values():
            head.dwatt.backbone = backbone
        # Heads of one architecture and configuration (labels aside) run as stacked copies of one head
        # (`dwatt.head_stack.StackedHeads`), one vmap over the copies, where `vectorize` (default: on a GPU); else
        # each head runs itself. The copies are stacked when first needed, and again where the heads have moved or
        # their weights changed.
        self.vectorize, self._stacks, self._stacked_on = vectorize, [], None
        self.groups: list[list[str]] = []
        for name, head in self.heads.items():
            group = next((g for g in self.groups if stack_key(self.heads[g[0]]) == stack_key(head)), None)
            if group is None:
                self.groups.append([name])
            else:
                group.append(name)
        # The backbone runs as deep as the deepest head reads, as that head's own model would run it.
        self.runner = max((head.dwatt for head in self.heads.values()), key=lambda dwatt: dwatt.config.run_depth)
        self.runner.use_backbone(backbone)
        self.eval()

    @property
    def read_layers(self) -> list[int]:
        """The union of the hidden-state indices the heads read (0 = embedding output)."""
        return sorted({i for head in self.heads.values() for i in head.dwatt.fused_layer_indices})

    @classmethod
    def from_pretrained(
        cls,
        checkpoints: Sequence[str] | dict[str, str],
        backbone_name_or_path: str | None = None,
        **hub_kwargs,
    ) -> SharedBackboneHeads:
        """
        Load `checkpoints` (folders or Hub ids; a dict gives them names, a list names each by the shortest ending of
        its path that is unique) on one backbone: the one the first checkpoint carries (full) or names (head-only),
        or `backbone_name_or_path`.
        """
        named = dict(checkpoints) if isinstance(checkpoints, dict) else head_names([str(path) for path in checkpoints])
        hub_kwargs = {k: v for k, v in hub_kwargs.items() if k in HUB_KWARGS}
        configs = {name: DWAttConfig.from_pretrained(path, **hub_kwargs) for name, path in named.items()}
        for name, config in configs.items():
            if config.lora:
                raise ValueError(
                    f"the checkpoint {named[name]!r} adapts its backbone with LoRA (rank {config.lora['rank']} on "
                    f"{', '.join(config.lora['targets'])}): its backbone is its own and cannot be shared; serve it alone "
                    "(dwatt predict CHECKPOINT)"
                )
        first = next(iter(configs))
        mine = backbone_identity(configs[first])
        for name, config in configs.items():  # before any weight is read
            theirs = backbone_identity(config)
            for key in dict.fromkeys([*mine, *theirs]):  # architecture and shape first, then the rest, then the name
                if key in ("backbone_name_or_path", "backbone_revision") and not (key in mine and key in theirs):
                    continue  # a full checkpoint carries its backbone: nothing to name
                if mine.get(key) != theirs.get(key):
                    raise ValueError(
                        f"the checkpoints {named[first]!r} and {named[name]!r} do not share a backbone: "
                        f"{key} {mine.get(key)!r} vs {theirs.get(key)!r}"
                    )
        tensors = {name: _checkpoint_tensors(path, hub_kwargs) for name, path in named.items()}
        # One backbone pass as deep as the deepest head reads. Its weights: the pretrained backbone a head-only
        # checkpoint names (or `backbone_name_or_path`), else the deepest full checkpoint's; every full checkpoint's
        # stored backbone must equal them, so a head-only head never runs on another checkpoint's fine-tuned backbone.
        depth = max(config.run_depth for config in configs.values())
        source = next(
            (name for name, config in configs.items() if config.heads_only),
            max(configs, key=lambda name: configs[name].run_depth),
        )
        backbone = cls._shared_backbone(
            configs[source], tensors[source], named[source], backbone_name_or_path, hub_kwargs, depth
        )
        if backbone_name_or_path:
            origin = repr(backbone_name_or_path)
        elif configs[source].heads_only:
            origin = f"the pretrained {configs[source].backbone_name_or_path!r} that {named[source]!r} names"
        else:
            origin = repr(named[source])
        reference = backbone.state_dict()
        heads = {}
        for name, config in configs.items():
            stored = _backbone_part(tensors[name])
            differing = next(
                (k for k, v in stored.items() if k in reference and not torch.equal(v, reference[k])), None
            )
            if differing is not None:
                raise ValueError(
                    f"the checkpoint {named[name]!r} carries other backbone weights than {origin} "
                    f"(first difference: {differing}); a fine-tuned (FT) backbone cannot be shared"
                )
            heads[name] = cls._head(config, tensors[name], backbone, named[name], backbone_name_or_path, hub_kwargs)
        return cls(heads, backbone)

    @staticmethod
    def _shared_backbone(config, tensors, path, backbone_name_or_path, hub_kwargs, depth: int) -> nn.Module:
        """The backbone, its first `depth` layers: the pretrained one `config` (head-only) or `backbone_name_or_path`
        names, else the one the full checkpoint at `path` stores."""

        model_class = task_model_class(checkpoint_task(config))
        if config.heads_only or backbone_name_or_path:
            return _pretrained_backbone(model_class, config, backbone_name_or_path, hub_kwargs, depth).backbone.eval()
        encoder = config.encoder_config
        backbone = AutoModel.from_config(cut_config(encoder, depth), **backbone_kwargs(encoder))
        # A checkpoint saved whole before models were cut holds the layers past the cut (none when it is not cut).
        past = re.compile(layers_past_pattern(backbone, encoder, depth))
        stored = {key: value for key, value in _backbone_part(tensors).items() if not past.search("backbone." + key)}
        missing, unexpected = backbone.load_state_dict(stored, strict=False)
        if missing or unexpected:
            raise ValueError(
                f"{path}: the stored backbone does not fit its config: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
        return backbone.eval()

    @staticmethod
    def _head(config, tensors, backbone, path, backbone_name_or_path, hub_kwargs) -> nn.Module:
        """The checkpoint's model without a backbone of its own (`head_on_meta`), reading `backbone`."""

        def adopt_pretrained_lm_head(model, missing: list[str]) -> list[str]:
            if not set(missing) <= model.adoptable_head_keys():
                return missing
            # A masked-LM head-only checkpoint whose vocabulary head did not train: the backbone's pretrained one.
            pretrained = _pretrained_backbone(type(model), config, backbone_name_or_path, hub_kwargs)
            model.lm_head.to_empty(device="cpu")
            model.adopt_pretrained_head(pretrained)
            return []

        model = head_on_meta(config, tensors, path, adopt_pretrained_lm_head)
        model.dwatt.backbone = backbone
        return model

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_layer_weights: bool = False,
        logits_mask: torch.Tensor | None = None,
        word_ids: torch.Tensor | None = None,
    ) -> dict[str, object]:
        """One backbone pass, then every head on the layers it reads: `{name: model output}` (`logits_mask`,
        `word_ids`: see the task models' `forward`)."""
        hidden = self.runner.run_backbone(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, word_ids=word_ids
        )
        stacked: dict[tuple, torch.Tensor] = {}
        outputs = {}
        for names, copies in zip(self.groups, self.stacks()):
            head = self.heads[names[0]]
            layout = head.dwatt.stack_layout
            if layout not in stacked:  # heads that read the same layers the same way share one stacked tensor
                stacked[layout] = head.dwatt.stack_layers(hidden)
            batch = dict(
                backbone_hidden_states=stacked[layout],
                attention_mask=attention_mask,
                output_layer_weights=output_layer_weights,
                logits_mask=logits_mask,
            )
            outputs |= dict(
                zip(
                    names,
                    copies.outputs(batch) if copies is not None else [self.heads[name](**batch) for name in names],
                )
            )
        return {name: outputs[name] for name in self.heads}

    def stacks(self) -> list:
        """Each group's `StackedHeads` where its heads run vectorised (None for a head alone, and where they run one
        after the other), made again where the heads have moved or their weights changed (their tensors' versions)."""
        some = next(self.heads[self.groups[0][0]].parameters())
        vectorize = some.device.type == "cuda" if self.vectorize is None else self.vectorize
        if not vectorize:
            return [None] * len(self.groups)
        where = (
            some.device,
            some.dtype,
            tuple(t._version for head in self.heads.values() for t in head_tensors(head).values()),
        )
        if where != self._stacked_on:
            self._stacks = [
                StackedHeads.of_models([self.heads[name] for name in names], vectorize=True)
                if len(names) > 1
                else None
                for names in self.groups
            ]
            self._stacked_on = where
        return self._stacks


__all__ = [
    "NOT_IN_FORWARD",
    "NOT_IN_HEAD_FORWARD",
    "SharedBackboneHeads",
    "backbone_identity",
    "changes_the_forward",
    "head_names",
]
