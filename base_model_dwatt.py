# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""PyTorch DWAtt's base model: a pretrained backbone and the fusion that mixes its layer outputs z_1..z_L into one
representation per token (`DWAttModel`), and what every DWAtt model shares (`DWAttPreTrainedModel`: the config class,
the initialisation, a loading that names every mismatching tensor), and the typed outputs of every DWAtt model. The
task models on top of it are in `modeling_dwatt.py`.

Part of DWAtt's remote code: travels with every checkpoint beside `modeling_dwatt.py`; imports only torch and
transformers.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

try:
    from transformers import initialization as init
except ImportError:  # transformers without the checkpoint-aware initialisers
    from torch.nn import init

try:
    from .backbones_dwatt import backbone_kwargs, final_norm
    from .configuration_dwatt import DWAttConfig
    from .depth_dwatt import BackboneRunner, cut_config
    from .fusions_dwatt import FUSION_CLASSES, LayerFusion
    from .lora_dwatt import LoRAUpdates
    from .pretrained_dwatt import PretrainedBackbone, load_checkpoint, load_pretrained_backbone
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from backbones_dwatt import backbone_kwargs, final_norm
        from configuration_dwatt import DWAttConfig
        from depth_dwatt import BackboneRunner, cut_config
        from fusions_dwatt import FUSION_CLASSES, LayerFusion
        from lora_dwatt import LoRAUpdates
        from pretrained_dwatt import PretrainedBackbone, load_checkpoint, load_pretrained_backbone
    except ImportError as error:
        raise ImportError(f"{__name__} needs the other *_dwatt.py files beside it") from error


@dataclass
class DWAttModelOutput(BaseModelOutput):
    """
    Output of [`DWAttModel`].

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`):
            The fused representation h of every token.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_hidden_states=True`):
            The backbone's hidden states (embedding output first, then every layer).
        layer_weights (`torch.FloatTensor` of shape `(batch_size, sequence_length, num_fused_layers)`, *optional*):
            The weight each fused layer received for each token (DWAtt's attention scores, ScalarMix's
            normalised scalars); returned when `output_layer_weights=True` for fusions that weigh layers.
    """

    layer_weights: torch.FloatTensor | None = None


@dataclass
class DWAttTokenClassifierOutput(TokenClassifierOutput):
    """[`~transformers.modeling_outputs.TokenClassifierOutput`] with the per-token, per-layer `layer_weights`."""

    layer_weights: torch.FloatTensor | None = None


@dataclass
class DWAttMaskedLMOutput(MaskedLMOutput):
    """[`~transformers.modeling_outputs.MaskedLMOutput`] with the per-token, per-layer `layer_weights`."""

    layer_weights: torch.FloatTensor | None = None


@dataclass
class DWAttSequenceClassifierOutput(SequenceClassifierOutput):
    """[`~transformers.modeling_outputs.SequenceClassifierOutput`] with the per-token, per-layer `layer_weights`."""

    layer_weights: torch.FloatTensor | None = None


def traced() -> bool:
    """Whether the forward pass is being captured as a graph (`torch.compile`, `torch.export`, the ONNX exporter):
    the per-position work then runs on every position and zeroes the others (`only_at`), as boolean selection
    would give the graph a shape that depends on the mask's values. Eager runs select, which skips the padding."""
    return torch.compiler.is_compiling()


def only_at(positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` `(batch, seq, ...)` at `positions` `(batch, seq)`, zero elsewhere."""
    return torch.where(positions[..., None], values, values.new_zeros(()))


def read_words(states, word_ids: torch.Tensor | None, pooling: str):
    """
    Each word's vector at every one of its positions: `states` (`(batch, ..., seq, hidden)`, or a list or tuple of
    such) with each position that belongs to a word (`word_ids >= 0`, `(batch, seq)`) replaced by the state at the
    word's last sub-token (`pooling="last"`) or the mean of its sub-tokens' states (`"mean"`); other positions, and
    every position for `"first"` or without `word_ids`, unchanged. A word's positions are those with its id in the
    row, so reading it anywhere (the tagger reads its first sub-token) reads the whole word; applying it twice
    changes nothing.
    """
    if pooling == "first" or word_ids is None:
        return states
    if isinstance(states, (list, tuple)):
        return type(states)(read_words(state, word_ids, pooling) for state in states)
    if word_ids.shape != (states.shape[0], states.shape[-2]):
        raise ValueError(
            f"word_ids has shape {tuple(word_ids.shape)}; the hidden states {tuple(states.shape)} need "
            f"{(states.shape[0], states.shape[-2])}"
        )
    word_ids = word_ids.to(states.device)
    in_word = word_ids >= 0
    same_word = (word_ids[:, :, None] == word_ids[:, None, :]) & in_word[:, :, None]
    alone = torch.eye(word_ids.shape[1], dtype=torch.bool, device=states.device) & ~in_word[:, :, None]
    read = same_word | alone  # (batch, seq, seq): the positions each position reads
    middle = (1,) * (states.dim() - 3)
    if pooling == "last":
        positions = torch.arange(word_ids.shape[1], device=states.device)
        last = torch.where(read, positions, -1).amax(-1)  # each position's word's last position
        index = last.view(last.shape[0], *middle, last.shape[1], 1).expand(states.shape)
        return states.gather(-2, index)
    if pooling == "mean":
        weights = read.to(states.dtype) / read.sum(-1, keepdim=True).to(states.dtype)
        return torch.matmul(weights.view(weights.shape[0], *middle, *weights.shape[1:]), states)
    raise ValueError(f"unknown word pooling {pooling!r}; expected first, last or mean")


def _pretrained_load(cls: type, *args, **kwargs):
    """`PreTrainedModel.from_pretrained` as `cls`, a DWAtt class or the class a checkpoint is read as."""
    return super(DWAttPreTrainedModel, cls).from_pretrained(*args, **kwargs)


class DWAttPreTrainedModel(PreTrainedModel):
    """Weight initialisation and the common interface of all DWAtt models."""

    config_class = DWAttConfig
    base_model_prefix = "dwatt"
    # Whether the class applies a task head after the fusion (the task models); the base model returns the fused
    # states, and a head-only checkpoint has nothing to apply to it.
    has_task_head: bool = False
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    # The loss is a token mean; under data parallelism the Trainer hands it `num_items_in_batch`, the labelled
    # positions of the global batch, so that the mean is over the global batch and not a mean of per-device means.
    accepts_loss_kwargs = True
    # Whether the model reads words, each as `config.word_readout` says (the base model and token classification).
    reads_words: bool = False

    def __init__(self, config: DWAttConfig, *inputs, **kwargs):
        super().__init__(config, *inputs, **kwargs)
        if config.word_readout != "first" and not self.reads_words:
            raise ValueError(
                f"DWAttConfig: word_readout {config.word_readout!r} is for token classification; "
                f"{type(self).__name__} reads tokens, not words: leave it 'first'"
            )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """
        `PreTrainedModel.from_pretrained` for a full or a head-only checkpoint (see `save_pretrained`). For a
        head-only one the backbone comes from `backbone_name_or_path` (a Hub id or folder; default: the one recorded
        in the config) at `backbone_revision`, and must have the recorded architecture and shape. A checkpoint that
        lacks any weight the model needs, holds tensors of other shapes (each mismatching key is named with both
        shapes; `ignore_mismatched_sizes=True` re-initialises them instead), holds layers past the ones the model
        runs, or whose weights file is corrupted is refused; no half-loaded model is returned.
        """
        return load_checkpoint(cls, _pretrained_load, pretrained_model_name_or_path, *model_args, **kwargs)

    @classmethod
    def load_pretrained_backbone(
        cls, name_or_path: str, load_kwargs: dict, depth: int | None = None, dtype: torch.dtype | str | None = None
    ) -> PretrainedBackbone:
        """The pretrained backbone `name_or_path` as this model starts from it (the masked-LM model loads its head
        too), with its first `depth` layers only where given, in `dtype`; shared-backbone serving
        (`dwatt.serving.shared_heads`) loads it once for many heads."""
        return load_pretrained_backbone(name_or_path, load_kwargs, depth, dtype)

    def adopt_pretrained_head(self, pretrained: PretrainedBackbone) -> None:
        """Take the pretrained head this model starts from (the masked-LM head); the other heads start fresh."""

    def adoptable_head_keys(self) -> set[str]:
        """The `state_dict` keys of the head that `adopt_pretrained_head` fills from the pretrained backbone: what a
        head-only checkpoint may leave out when that part did not train."""
        return set()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        std = getattr(self.config.encoder_config, "initializer_range", 0.02)
        if getattr(module, "_dwatt_extra_layer_part", False):
            # Part of a layer of the backbone's own class (Base+n): the backbone's initialisation knows all its parts
            # (experts, RMS norms, and the rotary or sinusoidal buffers that are not saved, which a reload recomputes).
            backbone = getattr(self, "dwatt", self).backbone
            if isinstance(backbone, PreTrainedModel):
                backbone._init_weights(module)
        elif isinstance(module, LayerFusion):
            module.init_weights(std)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, mean=0.0, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            if module.bias is not None:  # ModernBERT's norms have none
                init.zeros_(module.bias)


class DWAttModel(DWAttPreTrainedModel):
    """
    A pretrained encoder (`self.backbone`) plus a layer-fusion module (`self.fusion`), returning the fused
    representation of every token. The fusion method is `config.fusion`; see [`DWAttConfig`].

    `forward` takes either the usual encoder inputs (`input_ids`, `attention_mask`, ...) or
    `backbone_hidden_states`: hidden states computed earlier by the same (frozen) backbone, so that the backbone
    can run once and its outputs be cached. They are a tensor `(batch, layers, seq, hidden)` or a tuple of
    `(batch, seq, hidden)` tensors, holding either all of the backbone's hidden states (embedding output first,
    as `output_hidden_states=True` returns them) or exactly the layers the fusion reads (see `fused_layer_indices`).
    """

    reads_words = True

    def __init__(self, config: DWAttConfig):
        super().__init__(config)
        backbone_config = cut_config(config.encoder_config, config.run_depth)  # a copy: `cut_backbone` edits it
        self.backbone = AutoModel.from_config(backbone_config, **backbone_kwargs(config.encoder_config))
        if config.through_final_norm and final_norm(self.backbone) is None:
            raise ValueError(
                f"DWAttConfig: `through_final_norm`: the {config.encoder_config.model_type!r} backbone applies no norm "
                "after its last layer (decoder LLMs and ModernBERT do)"
            )
        self.fusion = FUSION_CLASSES[config.fusion](config, self.backbone)
        # A head-only LoRA checkpoint brings the backbone's low-rank updates; they are merged once it is loaded, and
        # kept (a head-only save stores them again). None for every other model.
        self.lora: LoRAUpdates | None = None
        if config.lora and not config.lora["merged"] and config.heads_only:
            self.lora = LoRAUpdates(config, self.backbone)
        self.use_backbone(self.backbone)
        self.post_init()

    @property
    def is_cut(self) -> bool:
        """Whether the backbone runs fewer than all its layers: its runner's answer, the one the house asks."""
        return self.backbone_runner.is_cut

    @property
    def backbone_runner(self) -> BackboneRunner:
        """What runs `self.backbone` (see [`BackboneRunner`]): one per backbone, shared by the models that read it."""
        return BackboneRunner.of(self.backbone, self.config.encoder_config)

    def use_backbone(self, backbone: nn.Module) -> None:
        """Make `backbone` this model's, its runner told what the fusion asks of it (Base+n: its layers' inputs).
        Done when a backbone is built or attached, so that the forward pass installs nothing (one graph to compile)."""
        self.backbone = backbone
        runner = self.backbone_runner
        if self.config.fusion_spec.needs_layer_inputs:
            runner.keep_layer_inputs()

    def cut_backbone(self, depth: int | None = None) -> None:
        """
        Drop the backbone's layers past `depth` (default: the deepest layer the fusion reads), so that it runs layers
        1..depth only and a checkpoint saved from here on stores only those; `config.backbone_depth` records the depth
        (None where it is the default). The outputs do not change. A head trained on a model that kept deeper layers
        (a probe's heads share one backbone) is cut this way before it is saved for serving.
        """
        depth = self.config.deepest_read_layer if depth is None else depth
        previous, self.config.backbone_depth = self.config.backbone_depth, depth
        try:
            self.config.validate_backbone_depth()
            self.backbone_runner.cut(depth)
        except ValueError:
            self.config.backbone_depth = previous
            raise
        if depth == self.config.deepest_read_layer:
            self.config.backbone_depth = None

    @property
    def fused_layer_indices(self) -> list[int]:
        """Indices into the backbone's hidden-state tuple (0 = embedding output) that the fusion reads: the layers
        of `config.fused_layers` (all by default), z_L last."""
        return self.config.fusion_spec.read_layers(self.config)

    @property
    def fusion_is_per_token(self) -> bool:
        """Whether each token's output depends on that token's hidden states alone (all fusions but Base+n)."""
        return self.config.fusion_spec.per_token

    def get_input_embeddings(self) -> nn.Module:
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.backbone.set_input_embeddings(value)

    @property
    def _all_states(self) -> tuple[int, ...]:
        """How many hidden states a backbone run returns: all L + 1, or run_depth + 1 from the cut backbone."""
        return self.config.encoder_config.num_hidden_layers + 1, self.config.run_depth + 1

    def select_layers(self, backbone_hidden_states) -> torch.Tensor | list[torch.Tensor]:
        """The fused layers `(batch, layers, seq, hidden)` of all hidden states or of just those (a list: one by one)."""
        if isinstance(backbone_hidden_states, (tuple, list)):
            states = tuple(backbone_hidden_states)
            if len(states) in self._all_states:
                return self.stack_layers(states)
            if len(states) == len(self.fused_layer_indices) > 1 and self.fusion.reads_layer_by_layer(states[0].device):
                return list(states)  # exactly the fused layers, for a fusion that reads them one by one
            backbone_hidden_states = torch.stack(states, dim=1)
        if backbone_hidden_states.dim() != 4:
            raise ValueError(
                "backbone_hidden_states must be (batch, layers, seq, hidden), got shape "
                f"{tuple(backbone_hidden_states.shape)}"
            )
        wanted = self.fused_layer_indices
        available = backbone_hidden_states.shape[1]
        num_all = self.config.encoder_config.num_hidden_layers + 1
        if available in self._all_states:
            if wanted == list(range(len(wanted))) and len(wanted) == available:
                return backbone_hidden_states
            if wanted == list(range(wanted[0], wanted[-1] + 1)):
                return backbone_hidden_states[:, wanted[0] : wanted[-1] + 1]
            return backbone_hidden_states[:, wanted]
        if available == len(wanted):
            return backbone_hidden_states
        raise ValueError(
            f"backbone_hidden_states has {available} layers (shape {tuple(backbone_hidden_states.shape)}); "
            f"fusion {self.config.fusion!r} expects all {num_all} hidden states of the backbone or exactly the "
            f"{len(wanted)} it reads (indices {wanted[0]}..{wanted[-1]})"
        )

    @property
    def stack_layout(self) -> tuple[tuple[int, ...], int]:
        """Which hidden states `stack_layers` stacks and along which memory axis (the fusion's `stack_dim`, default 1):
        fusions with equal layouts can share one stacked tensor."""
        return tuple(self.fused_layer_indices), self.fusion.stack_dim

    def stack_layers(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor | list[torch.Tensor]:
        """The fused layers as a `(batch, layers, seq, hidden)` view, laid out in memory the way the fusion reads
        them (its `stack_dim`), so that it reshapes without copying; a single layer (Base, Base+n) is not copied,
        nor are the layers of a fusion that reads them one by one here (a list then)."""
        indices, stack_dim = self.stack_layout
        selected = [hidden_states[i] for i in indices]
        if len(selected) == 1:
            return selected[0].unsqueeze(1)
        if self.fusion.reads_layer_by_layer(selected[0].device):
            return selected
        return torch.stack(selected, dim=stack_dim).movedim(stack_dim, 1)

    def run_backbone(
        self, word_ids: torch.Tensor | None = None, read: Sequence[int] | None = None, **inputs
    ) -> tuple[torch.Tensor, ...]:
        """The backbone's hidden states for `inputs` (embedding output first, then each layer it runs), as the uncut
        backbone holds them; the last is its output (`last_hidden_state`). See `BackboneRunner.run`. With `word_ids`,
        each word is read as the config's `word_readout` reads it (`read_words`), as the fusion would read it, in the
        states `read` names (default: all; a cache of a few layers reads words in those alone)."""
        self.check_word_ids(word_ids, inputs.get("input_ids"))
        states = self.backbone_runner.run(through_final_norm=self.config.through_final_norm, **inputs)[0]
        wanted = range(len(states)) if read is None else set(read)
        return tuple(
            read_words(state, word_ids, self.config.word_pooling) if index in wanted else state
            for index, state in enumerate(states)
        )

    def check_word_ids(self, word_ids: torch.Tensor | None, input_ids: torch.Tensor | None) -> None:
        """Refuses a backbone run without the `word_ids` that the config's word readout needs."""
        if word_ids is None and input_ids is not None and self.config.word_pooling != "first":
            raise ValueError(
                f"this model reads each word as {self.config.word_readout!r} (config.word_readout): give `word_ids`, "
                "each token's word (-1 for special tokens and padding), as the tokenizer's word_ids() gives them"
            )

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        backbone_hidden_states: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
        output_layer_weights: bool | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        token_mask: torch.Tensor | None = None,
        word_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> DWAttModelOutput | tuple:
        r"""
        backbone_hidden_states (`torch.Tensor` or `tuple(torch.Tensor)`, *optional*):
            Precomputed hidden states of the backbone, used instead of running it (see the class docstring).
        output_layer_weights (`bool`, *optional*, defaults to `False`):
            Return the per-token, per-layer fusion weights (DWAtt and ScalarMix).
        output_hidden_states, output_attentions (`bool`, *optional*):
            Return the backbone's hidden states, or its attention maps (not available from
            `backbone_hidden_states`); default: the config's, as for every transformers model.
        return_dict (`bool`, *optional*):
            `False` returns a plain tuple instead of a [`DWAttModelOutput`].
        token_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            Fuse only these positions (per-token fusions); the fused representation is zero elsewhere.
        word_ids (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            Each token's word (-1 for special tokens, padding and, for an `echo-` readout, the first copy): needed
            when `config.word_readout` pools sub-tokens (`read_words`). Hidden states given without them are taken
            as read already (a feature cache built with them).
        """
        output_hidden_states = _flag(output_hidden_states, self.config.output_hidden_states)
        output_attentions = _flag(output_attentions, self.config.output_attentions)
        all_hidden_states = attentions = None
        if backbone_hidden_states is None:
            if input_ids is None and inputs_embeds is None:
                raise ValueError("DWAttModel needs `input_ids`, `inputs_embeds` or `backbone_hidden_states`")
            self.check_word_ids(word_ids, input_ids if input_ids is not None else inputs_embeds)
            all_hidden_states, attentions = self.backbone_runner.run(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                token_type_ids=token_type_ids,
                position_ids=position_ids,
                output_attentions=output_attentions,
                through_final_norm=self.config.through_final_norm,
                **kwargs,
            )
            layers = self.stack_layers(all_hidden_states)
        else:
            layers = self.select_layers(backbone_hidden_states)
        layers = read_words(layers, word_ids, self.config.word_pooling)
        last_layer = layers[-1] if isinstance(layers, list) else layers[:, -1]
        dtype = next((p.dtype for p in self.fusion.parameters() if p.is_floating_point()), last_layer.dtype)
        if last_layer.dtype != dtype:  # a backbone kept in bf16/fp16 (as saved) under an fp32 fusion: its dtype here
            layers = [layer.to(dtype) for layer in layers] if isinstance(layers, list) else layers.to(dtype)
            last_layer = last_layer.to(dtype)
        layer_inputs = None
        if self.config.fusion_spec.needs_layer_inputs:  # what the backbone hands its layers, for more of them (Base+n)
            layer_inputs = self.backbone_runner.layer_inputs(
                self.fusion.layer, last_layer, attention_mask, from_this_run=backbone_hidden_states is None
            )
        if token_mask is None or not self.config.fusion_spec.per_token:
            fused, layer_weights = self.fusion(layers, last_layer, layer_inputs)
        elif traced():  # one graph: every position fused, the others zeroed
            fused, layer_weights = self.fusion(layers, last_layer)
            fused = only_at(token_mask.bool(), fused)
            layer_weights = None if layer_weights is None else only_at(token_mask.bool(), layer_weights)
        else:
            fused, layer_weights = self.fusion.fuse_positions(layers, last_layer, token_mask.bool())
        output = DWAttModelOutput(
            last_hidden_state=fused,
            hidden_states=all_hidden_states if output_hidden_states else None,
            attentions=attentions,
            layer_weights=layer_weights if output_layer_weights else None,
        )
        return output if return_dict is not False else output.to_tuple()


def _flag(value: bool | None, default: bool) -> bool:
    """A model's `output_*` argument: the caller's choice, else the config's."""
    return bool(default) if value is None else bool(value)


__all__ = [
    "DWAttMaskedLMOutput",
    "DWAttModel",
    "DWAttModelOutput",
    "DWAttPreTrainedModel",
    "DWAttSequenceClassifierOutput",
    "DWAttTokenClassifierOutput",
    "only_at",
    "read_words",
    "traced",
]
