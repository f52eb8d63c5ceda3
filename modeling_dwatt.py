# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""PyTorch DWAtt: layer fusion over a pretrained encoder (Depth-Wise Attention, COLING 2024).

A pretrained encoder computes layer outputs z_1..z_L; a small fusion module mixes them into one representation per
token, which feeds a token-classification, masked-LM or sequence-classification head. This file holds the models;
what they are made of sits beside it, one concept per file, and travels with it inside every DWAtt checkpoint
(`trust_remote_code=True`): `configuration_dwatt.py` (the config), `backbones_dwatt.py` (backbone families),
`depth_dwatt.py` (how deep the backbone runs), `fusions_dwatt.py` (the fusions and their table), `lora_dwatt.py` (LoRA
in plain torch) and `pretrained_dwatt.py` (pretrained backbones and head-only checkpoints). Each imports only torch and
transformers.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    ModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

try:
    from transformers import initialization as init
except ImportError:  # transformers without the checkpoint-aware initialisers
    from torch.nn import init

try:
    from .backbones_dwatt import backbone_family, backbone_kwargs, classifier_dropout, is_decoder_only, layer_norm_eps
    from .configuration_dwatt import DWAttConfig
    from .depth_dwatt import BackboneRunner, cut_config, refuse_unused_layers
    from .fusions_dwatt import FUSION_CLASSES, LayerFusion
    from .lora_dwatt import LoRAUpdates
    from .pretrained_dwatt import PretrainedBackboneMixin, adopt_masked_lm_head, load_masked_lm
except ImportError:  # imported as top-level modules of the installed project rather than as remote code
    from backbones_dwatt import backbone_family, backbone_kwargs, classifier_dropout, is_decoder_only, layer_norm_eps
    from configuration_dwatt import DWAttConfig
    from depth_dwatt import BackboneRunner, cut_config, refuse_unused_layers
    from fusions_dwatt import FUSION_CLASSES, LayerFusion
    from lora_dwatt import LoRAUpdates
    from pretrained_dwatt import PretrainedBackboneMixin, adopt_masked_lm_head, load_masked_lm


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


def mean_over_items(summed: torch.Tensor, targets: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """A summed loss over the labelled items (targets not -100) of this batch or, under data parallelism, of the
    global batch (`num_items_in_batch`); 0, not NaN, for a batch with none (an MLM batch with no mask)."""
    count = (targets != -100).sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch)
    return summed / count.to(summed.device).clamp(min=1)


def traced() -> bool:
    """Whether the forward pass is being captured as a graph (`torch.compile`, `torch.export`, the ONNX exporter):
    the per-position work then runs on every position and zeroes the others (`only_at`), as boolean selection
    would give the graph a shape that depends on the mask's values. Eager runs select, which skips the padding."""
    return torch.compiler.is_compiling()


def only_at(positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` `(batch, seq, ...)` at `positions` `(batch, seq)`, zero elsewhere."""
    return torch.where(positions[..., None], values, values.new_zeros(()))


class DWAttLMHead(nn.Module):
    """The backbone's masked-LM head (dense -> activation -> LayerNorm -> vocabulary), applied to the fused h."""

    def __init__(self, config: DWAttConfig):
        super().__init__()
        encoder = config.encoder_config
        family = backbone_family(encoder)
        size = family.lm_head_size(encoder)
        self.dense = nn.Linear(encoder.hidden_size, size, bias=family.lm_head_bias(encoder, "dense"))
        self.activation = ACT2FN[family.lm_head_activation(encoder)]
        self.layer_norm = nn.LayerNorm(size, eps=layer_norm_eps(encoder), bias=family.lm_head_bias(encoder, "norm"))
        self.decoder = nn.Linear(size, encoder.vocab_size, bias=family.lm_head_bias(encoder, "decoder"))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.layer_norm(self.activation(self.dense(hidden_states))))


class DWAttPreTrainedModel(PreTrainedModel):
    """Weight initialisation and the common interface of all DWAtt models."""

    config_class = DWAttConfig
    base_model_prefix = "dwatt"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    # The loss is a token mean; under data parallelism the Trainer hands it `num_items_in_batch`, the labelled
    # positions of the global batch, so that the mean is over the global batch and not a mean of per-device means.
    accepts_loss_kwargs = True

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """
        `PreTrainedModel.from_pretrained`, refusing a checkpoint whose tensors do not fit the model with an error
        that names every mismatching key and both shapes (a head trained for another label count, a backbone of
        another size). Pass `ignore_mismatched_sizes=True` to re-initialise those tensors instead.
        """
        ignore_mismatched_sizes = kwargs.pop("ignore_mismatched_sizes", False)
        output_loading_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(
            pretrained_model_name_or_path,
            *model_args,
            ignore_mismatched_sizes=True,
            output_loading_info=True,
            **kwargs,
        )
        if info["mismatched_keys"] and not ignore_mismatched_sizes:
            details = "; ".join(
                f"{key}: checkpoint {tuple(stored)} vs model {tuple(expected)}"
                for key, stored, expected in sorted(info["mismatched_keys"])
            )
            raise ValueError(
                f"the checkpoint {pretrained_model_name_or_path} does not fit {cls.__name__} built from the given "
                f"config: {details}. A head trained for another label set needs `ignore_mismatched_sizes=True` to "
                "start afresh; a backbone of another shape needs the checkpoint's own config."
            )
        dwatt = getattr(model, "dwatt", model)
        refuse_unused_layers(dwatt.config, dwatt.backbone, info["unexpected_keys"], pretrained_model_name_or_path)
        return (model, info) if output_loading_info else model

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

    def __init__(self, config: DWAttConfig):
        super().__init__(config)
        backbone_config = cut_config(config.encoder_config, config.run_depth)  # a copy: `cut_backbone` edits it
        self.backbone = AutoModel.from_config(backbone_config, **backbone_kwargs(config.encoder_config))
        self.fusion = FUSION_CLASSES[config.fusion](config, self.backbone)
        # A head-only LoRA checkpoint brings the backbone's low-rank updates; they are merged once it is loaded.
        if config.lora and not config.lora["merged"] and config.heads_only:
            self.lora = LoRAUpdates(config, self.backbone)
        self.use_backbone(self.backbone)
        self.post_init()

    @property
    def is_cut(self) -> bool:
        """Whether the backbone runs fewer than all its layers (`config.run_depth` < L)."""
        return self.config.run_depth < self.config.encoder_config.num_hidden_layers

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

    def run_backbone(self, **inputs) -> tuple[torch.Tensor, ...]:
        """The backbone's hidden states for `inputs` (embedding output first, then each layer it runs), as the uncut
        backbone holds them; the last is its output (`last_hidden_state`). See `BackboneRunner.run`."""
        return self.backbone_runner.run(**inputs)[0]

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
        """
        output_hidden_states = _flag(output_hidden_states, self.config.output_hidden_states)
        output_attentions = _flag(output_attentions, self.config.output_attentions)
        all_hidden_states = attentions = None
        if backbone_hidden_states is None:
            if input_ids is None and inputs_embeds is None:
                raise ValueError("DWAttModel needs `input_ids`, `inputs_embeds` or `backbone_hidden_states`")
            all_hidden_states, attentions = self.backbone_runner.run(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                token_type_ids=token_type_ids,
                position_ids=position_ids,
                output_attentions=output_attentions,
                **kwargs,
            )
            layers = self.stack_layers(all_hidden_states)
        else:
            layers = self.select_layers(backbone_hidden_states)
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


class _DWAttWithHead(PretrainedBackboneMixin, DWAttPreTrainedModel):
    """What the task models share: `self.dwatt` (backbone + fusion), FE freezing, `from_backbone`, `forward`."""

    output_class: type[ModelOutput] = ModelOutput
    # Training speed switch: with labels, fuse only the labelled positions (the loss reads nothing else); logits at
    # positions labelled -100 are then not meaningful. Off by default; the training pipeline turns it on.
    fuse_labelled_positions_only: bool = False

    def freeze_backbone(self, frozen: bool = True) -> None:
        """
        The paper's FE setting: no gradients into the backbone, and the backbone stays in eval mode (no dropout)
        even when `train()` is called, so its outputs are the same every epoch and can be cached.
        `freeze_backbone(False)` returns to FT, where everything trains.
        """
        self.dwatt.backbone.requires_grad_(not frozen)
        self.backbone_frozen = frozen
        self.train(self.training)

    def post_init(self):
        super().post_init()
        if getattr(self.config, "heads_only", False):
            # While a head-only checkpoint loads: transformers 4.x takes one that stores no `dwatt.` tensor (a Base
            # head's, its classifier only) for a base model's weights and refuses it; without a base-model prefix,
            # keys are read as they are. `from_pretrained` gives the model the class's prefix back once loaded.
            self.base_model_prefix = ""

    def train(self, mode: bool = True):
        super().train(mode)
        if getattr(self, "backbone_frozen", False):
            self.dwatt.backbone.eval()
        return self

    def head(self, fused: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        """The task head: logits from the fused representation (of `positions` only, where fused so). Each task
        model defines its own."""
        raise NotImplementedError

    def fused_positions(
        self, labels, attention_mask, shape: torch.Size, device, logits_mask=None
    ) -> torch.Tensor | None:
        """The positions the per-token work (a per-token fusion, the head) runs on (`None`: all): with
        `fuse_labelled_positions_only` and labels, the labelled ones, as the loss reads nothing else; else those of
        `logits_mask`; otherwise the non-padding ones, so that the work follows the real token count. The outputs at
        the other positions are zero. No branch reads the mask's values, so that the model exports as one graph."""
        if labels is not None and self.fuse_labelled_positions_only:
            return labels != -100
        if logits_mask is not None:
            return logits_mask.to(device).bool()
        if attention_mask is not None and attention_mask.shape == shape:
            return attention_mask.to(device).bool()
        return None

    @staticmethod
    def per_position(function, fused: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        """`function` (a per-token head) on the fused vectors of `positions` only, scattered back into zeros (all
        positions when `positions` is None). Out of place, so that it also runs under `torch.func.vmap`."""
        if positions is None:
            return function(fused)
        if traced():  # one graph: every position computed, the others zeroed
            return only_at(positions, function(fused))
        selected = function(fused[positions])
        return selected.new_zeros(*positions.shape, selected.shape[-1]).index_put((positions,), selected)

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        """Cross-entropy, the mean over labelled positions (`mean_over_items`)."""
        targets = labels.view(-1).to(logits.device)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets, reduction="sum")
        return mean_over_items(loss, targets, num_items_in_batch)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        backbone_hidden_states: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
        labels: torch.LongTensor | None = None,
        output_layer_weights: bool | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        logits_mask: torch.BoolTensor | None = None,
        **kwargs,
    ):
        r"""
        labels (`torch.Tensor`, *optional*):
            Targets per position (`(batch_size, sequence_length)`: tag ids for token classification, token ids at
            masked positions for masked LM; -100 marks positions without a target: padding, later sub-words,
            unmasked tokens), or per sequence for sequence classification (see its class).
        logits_mask (`torch.BoolTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Token classification and masked LM: the positions whose logits are wanted (a tagger's first sub-token of
            each word, a masked LM's masks); the per-token work runs there only, and the logits elsewhere are zero.
        backbone_hidden_states, output_layer_weights, output_hidden_states, output_attentions, return_dict: see
            [`DWAttModel.forward`].
        """
        # Under data parallelism, the labelled items of the global batch: the loss is a mean over all of them.
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if backbone_hidden_states is not None:
            reference = (
                backbone_hidden_states[0]
                if isinstance(backbone_hidden_states, (tuple, list))
                else backbone_hidden_states[:, 0]
            )
        else:
            reference = input_ids if input_ids is not None else inputs_embeds
        positions = (
            None
            if reference is None
            else self.fused_positions(labels, attention_mask, reference.shape[:2], reference.device, logits_mask)
        )
        fused = self.dwatt(
            token_mask=positions if self.dwatt.fusion_is_per_token else None,
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            backbone_hidden_states=backbone_hidden_states,
            output_layer_weights=bool(output_layer_weights),
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
            **kwargs,
        )
        head = next((p for name, part in self.named_children() if name != "dwatt" for p in part.parameters()), None)
        logits = self.head(fused.last_hidden_state.to(head.dtype if head is not None else None), positions)
        loss = None if labels is None else self.task_loss(logits, labels.to(logits.device), num_items_in_batch)
        output = self.output_class(
            loss=loss,
            logits=logits,
            hidden_states=fused.hidden_states,
            attentions=fused.attentions,
            layer_weights=fused.layer_weights,
        )
        return output if return_dict is not False else output.to_tuple()


class DWAttForTokenClassification(_DWAttWithHead):
    """
    DWAtt layer fusion over a pretrained encoder, with a linear token-classification head on the fused
    representation (e.g. for NER). Works with RoBERTa, XLM-RoBERTa, BERT and MPNet backbones; the RoBERTa name is
    the one the paper's users know.

    Example:

    ```python
    >>> model = DWAttForTokenClassification.from_backbone("roberta-large", fusion="dwatt", num_labels=9)
    >>> outputs = model(**batch, output_layer_weights=True)
    >>> outputs.logits.shape, outputs.layer_weights.shape  # (batch, seq, 9), (batch, seq, 24)
    ```
    """

    output_class = DWAttTokenClassifierOutput

    def __init__(self, config: DWAttConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dwatt = DWAttModel(config)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.encoder_config.hidden_size, config.num_labels)
        self.post_init()

    def head(self, fused: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        return self.per_position(lambda vectors: self.classifier(self.dropout(vectors)), fused, positions)


class DWAttForMaskedLM(_DWAttWithHead):
    """
    DWAtt layer fusion over a pretrained encoder, with the backbone's own masked-LM head applied to the fused
    representation. `from_backbone` copies the pretrained head's weights (dense, LayerNorm, vocabulary projection
    and bias); the vocabulary projection is kept separate from the input embeddings, so training the head (as the
    FE setting does) never changes the frozen backbone.
    """

    output_class = DWAttMaskedLMOutput

    def __init__(self, config: DWAttConfig):
        super().__init__(config)
        self.check_backbone(config.encoder_config)
        self.dwatt = DWAttModel(config)
        self.lm_head = DWAttLMHead(config)
        self.post_init()

    @staticmethod
    def check_backbone(encoder_config) -> None:
        """Refuse a backbone without a masked-LM head (a decoder-only LLM); callable before any weights are read."""
        if is_decoder_only(encoder_config):
            raise ValueError(
                f"masked LM needs an encoder: the {encoder_config.model_type!r} backbone is a causal language "
                "model with no masked-LM head (token and sequence classification work on it)"
            )

    def head(self, fused: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        return self.per_position(self.lm_head, fused, positions)  # the vocabulary projection where it is read

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Module) -> None:
        self.lm_head.decoder = new_embeddings

    @classmethod
    def load_pretrained_backbone(cls, name_or_path: str, load_kwargs: dict, depth=None, dtype=None) -> PreTrainedModel:
        return load_masked_lm(name_or_path, load_kwargs, depth, dtype)

    def adopt_pretrained_head(self, pretrained: PreTrainedModel) -> None:
        adopt_masked_lm_head(self.lm_head, pretrained)


class DWAttForSequenceClassification(_DWAttWithHead):
    """
    DWAtt layer fusion over a pretrained encoder for sentence (or sentence-pair) classification and regression.
    The fusion runs per token as for NER; the fused tokens are then pooled into one vector (`config.pooling`:
    `"mean"` over the non-padding tokens, `"first"`, or `"last"`, the last non-padding token, as transformers' decoder
    classifiers pool), and a RoBERTa-style head (dense, tanh, projection, with
    dropout before each) gives `num_labels` logits. `config.problem_type` follows transformers:
    `"single_label_classification"` (cross-entropy), `"multi_label_classification"` (binary cross-entropy on
    multi-hot float labels) or `"regression"` (mean squared error; `num_labels=1`), inferred from the labels when
    unset. Per-token fusions fuse only the positions the pooling reads.

    Example:

    ```python
    >>> model = DWAttForSequenceClassification.from_backbone("roberta-large", fusion="dwatt", num_labels=4)
    >>> model(**batch).logits.shape  # (batch, 4)
    ```
    """

    output_class = DWAttSequenceClassifierOutput

    def __init__(self, config: DWAttConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dwatt = DWAttModel(config)
        hidden = config.encoder_config.hidden_size
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.dense = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, config.num_labels)
        self.post_init()

    def fused_positions(self, labels, attention_mask, shape: torch.Size, device, logits_mask=None) -> torch.Tensor:
        """The positions the pooling reads, which are all a per-token fusion needs: the first, the last non-padding
        one (on either padding side), or every non-padding one (`logits_mask` has no use here)."""
        if self.config.pooling in ("first", "last"):
            order = torch.arange(shape[1], device=device)
            if self.config.pooling == "first" or attention_mask is None:
                index = torch.full(shape[:1], 0 if self.config.pooling == "first" else shape[1] - 1, device=device)
            else:  # the last position whose mask is 1
                index = (attention_mask.to(device).bool() * (order + 1)).argmax(-1)
            return order[None, :] == index[:, None]  # one-hot, without fixing the sequence length in an exported graph
        if attention_mask is None:
            return torch.ones(shape, dtype=torch.bool, device=device)
        return attention_mask.bool()

    def head(self, fused: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.config.pooling == "first":
            pooled = fused[:, 0]
        elif self.config.pooling == "last":
            pooled = (fused * positions.to(fused.dtype).unsqueeze(-1)).sum(1)  # the one position of each row
        else:
            weights = positions.to(fused.dtype).unsqueeze(-1)
            pooled = (fused * weights).sum(1) / weights.sum(1).clamp(min=1)
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(pooled)))))

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        """The loss of `config.problem_type` (set from the labels the first time), summed and divided by the
        labelled items: this batch's, or the global batch's under data parallelism (`num_items_in_batch`)."""
        if self.config.problem_type is None:
            if self.num_labels == 1:
                self.config.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                self.config.problem_type = "single_label_classification"
            else:
                self.config.problem_type = "multi_label_classification"
        if self.config.problem_type == "regression":
            targets = labels.view(-1).to(logits.dtype)
            loss = F.mse_loss(logits.view(-1), targets, reduction="sum")
        elif self.config.problem_type == "single_label_classification":
            targets = labels.view(-1)
            loss = F.cross_entropy(logits.view(-1, self.num_labels), targets, reduction="sum")
        else:
            targets = labels.to(logits.dtype)
            loss = F.binary_cross_entropy_with_logits(logits, targets, reduction="sum")
        return mean_over_items(loss, targets, num_items_in_batch)


def count_parameters(module: nn.Module) -> int:
    """Number of parameters of `module` (buffers such as DWAtt's static layer positions excluded)."""
    return sum(parameter.numel() for parameter in module.parameters())


# The paper's names (it used RoBERTa): the same classes. A checkpoint records the family-neutral names above, whatever
# its backbone (a Qwen tagger is no RoBERTa model); checkpoints that recorded these load as before.
RobertaDWAttForTokenClassification = DWAttForTokenClassification
RobertaDWAttForMaskedLM = DWAttForMaskedLM
RobertaDWAttForSequenceClassification = DWAttForSequenceClassification

# The Auto class of each DWAtt model. `register_for_auto_class` records it in a saved config's `auto_map`, which is how
# `AutoModelFor...from_pretrained(..., trust_remote_code=True)` finds the class in a checkpoint; registering the
# classes
# with transformers' Auto classes in a process is dwatt's one job (`dwatt.auto.register_auto_classes`).
AUTO_MODELS = {
    "AutoModel": DWAttModel,
    "AutoModelForTokenClassification": DWAttForTokenClassification,
    "AutoModelForMaskedLM": DWAttForMaskedLM,
    "AutoModelForSequenceClassification": DWAttForSequenceClassification,
}
for auto_class_name, model_class in AUTO_MODELS.items():
    model_class.register_for_auto_class(auto_class_name)

__all__ = [
    "AUTO_MODELS",
    "DWAttForMaskedLM",
    "DWAttForSequenceClassification",
    "DWAttForTokenClassification",
    "DWAttModel",
    "DWAttPreTrainedModel",
    "RobertaDWAttForMaskedLM",
    "RobertaDWAttForSequenceClassification",
    "RobertaDWAttForTokenClassification",
    "count_parameters",
]
