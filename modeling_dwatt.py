# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""PyTorch DWAtt: layer fusion over a pretrained encoder (Depth-Wise Attention, COLING 2024).

A pretrained encoder computes layer outputs z_1..z_L; a small fusion module mixes them into one representation per
token, which feeds a token-classification or masked-LM head. This file travels inside every DWAtt checkpoint
(`trust_remote_code=True`): it imports only torch, transformers and `configuration_dwatt`.
"""

import copy
import inspect
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.masking_utils import create_bidirectional_mask
from transformers.pytorch_utils import Conv1D
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    ModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import logging

try:
    from transformers import initialization as init
except ImportError:  # transformers without the checkpoint-aware initialisers
    from torch.nn import init

try:
    from .configuration_dwatt import AUTO_MODELS, DWAttConfig, is_decoder_only
except ImportError:  # imported as a top-level module of the installed project rather than as remote code
    from configuration_dwatt import AUTO_MODELS, DWAttConfig, is_decoder_only

logger = logging.get_logger(__name__)

BACKBONE_PREFIX = "dwatt.backbone."
# What must agree between a head-only checkpoint's recorded encoder and the backbone it is applied to.
BACKBONE_IDENTITY = (
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")


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


def _first_setting(config, names: tuple[str, ...], default):
    """The first of `names` that the encoder config sets (families name the same setting differently)."""
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def layer_norm_eps(config) -> float:
    return _first_setting(config, ("layer_norm_eps", "norm_eps"), 1e-12)


def dropout_probability(config) -> float:
    return _first_setting(config, ("hidden_dropout_prob", "dropout", "classifier_dropout"), 0.1)


def classifier_dropout(config) -> float:
    """Dropout before a classification head: `classifier_dropout`, else the backbone's own."""
    return dropout_probability(config.encoder_config) if config.classifier_dropout is None else config.classifier_dropout


def _attribute(module: nn.Module, path: str):
    for name in path.split("."):
        module = getattr(module, name, None) if not name.isdigit() else module[int(name)]
        if module is None:
            return None
    return module


class BackboneFamily:
    """
    What DWAtt needs to know of a backbone family beyond what `AutoModel` gives: where its transformer layers live,
    how one is built, what a layer takes besides the hidden states (its attention-mask format, its position signal),
    and whether its attention is causal. The default is BERT's way (`encoder.layer`, a 4-D bidirectional mask),
    which RoBERTa, XLM-R, CamemBERT, ELECTRA and most BERT descendants share; the families that differ override one
    method each, and decoder-only language models share `DecoderFamily`.
    """

    layer_list = "encoder.layer"
    # Decoder-only: each token sees only what precedes it, and positions count from the first non-padding token.
    causal = False
    # The linear layers that carry LoRA's low-rank updates by default: the attention's query and value projections.
    lora_targets: tuple[str, ...] = ("query", "value")

    def __init__(self, lora_targets: tuple[str, ...] | None = None):
        if lora_targets is not None:
            self.lora_targets = lora_targets

    def layers(self, backbone: nn.Module) -> nn.ModuleList | None:
        layers = _attribute(backbone, self.layer_list)
        return layers if isinstance(layers, nn.ModuleList) and len(layers) else None

    def new_layer(self, layer_class: type[nn.Module], config, position: int) -> nn.Module:
        """A fresh layer that continues the backbone's stack at `position` (0-based, so L is the first extra one)."""
        accepted = inspect.signature(layer_class.__init__).parameters
        return layer_class(config, layer_idx=position) if "layer_idx" in accepted else layer_class(config)

    def layer_inputs(self, backbone, hidden_states, attention_mask, layers) -> list[tuple[tuple, dict]]:
        """The positional and keyword arguments of each of `layers` after the hidden states."""
        mask = create_bidirectional_mask(config=backbone.config, inputs_embeds=hidden_states, attention_mask=attention_mask)
        return [((mask,), {}) for _ in layers]

    def lm_head_size(self, config) -> int:
        """Width of the masked-LM head's dense layer (ALBERT and ELECTRA project down to the embedding size)."""
        return getattr(config, "embedding_size", None) or config.hidden_size

    def lm_head_activation(self, config) -> str:
        return _first_setting(config, ("hidden_act", "activation", "hidden_activation"), "gelu")

    def lm_head_bias(self, config, part: str) -> bool:
        """Whether the head's `dense`, `norm` or `decoder` part has a bias."""
        return True


class MPNetFamily(BackboneFamily):
    """Every MPNet layer also takes the encoder's shared relative position bias."""

    lora_targets = ("q", "v")

    def layer_inputs(self, backbone, hidden_states, attention_mask, layers):
        (mask,), _ = super().layer_inputs(backbone, hidden_states, attention_mask, layers)[0]
        bias = backbone.encoder.compute_position_bias(hidden_states)
        return [((mask,), {"position_bias": bias}) for _ in layers]


class RoFormerFamily(BackboneFamily):
    """Every RoFormer layer rotates its queries and keys by the encoder's sinusoidal positions."""

    def layer_inputs(self, backbone, hidden_states, attention_mask, layers):
        (mask,), _ = super().layer_inputs(backbone, hidden_states, attention_mask, layers)[0]
        positions = backbone.encoder.embed_positions(hidden_states.shape[:-1], 0)[None, None, :, :]
        return [((mask,), {"sinusoidal_pos": positions}) for _ in layers]


class DebertaFamily(BackboneFamily):
    """DeBERTa (v1, v2, v3): the encoder's own mask format and its disentangled relative positions."""

    def layer_inputs(self, backbone, hidden_states, attention_mask, layers):
        encoder = backbone.encoder
        if attention_mask is None:
            attention_mask = torch.ones(hidden_states.shape[:2], dtype=torch.long, device=hidden_states.device)
        kwargs = {
            "relative_pos": encoder.get_rel_pos(hidden_states),
            "rel_embeddings": encoder.get_rel_embedding(),
        }
        return [((encoder.get_attention_mask(attention_mask),), kwargs) for _ in layers]


class ModernBertFamily(BackboneFamily):
    """ModernBERT: layers under `layers`, global and sliding-window (local) attention alternating, rotary positions
    per attention type. Extra layers continue the alternation."""

    layer_list = "layers"

    def new_layer(self, layer_class, config, position):
        every = getattr(config, "global_attn_every_n_layers", 1) or 1
        wanted = "full_attention" if position % every == 0 else "sliding_attention"
        # The layer reads its type from config.layer_types[index]; index 0 has no input norm (it reads the
        # embeddings), so an extra layer takes the last index of its type above 0.
        candidates = [i for i, kind in enumerate(config.layer_types) if kind == wanted and i > 0]
        return layer_class(config, layer_idx=candidates[-1] if candidates else len(config.layer_types) - 1)

    def layer_inputs(self, backbone, hidden_states, attention_mask, layers):
        from transformers.masking_utils import create_bidirectional_sliding_window_mask

        mask_kwargs = {"config": backbone.config, "inputs_embeds": hidden_states, "attention_mask": attention_mask}
        masks = {
            "full_attention": create_bidirectional_mask(**mask_kwargs),
            "sliding_attention": create_bidirectional_sliding_window_mask(**mask_kwargs),
        }
        positions = torch.arange(hidden_states.shape[1], device=hidden_states.device)[None]  # ModernBERT's own default
        return [
            ((), {"attention_mask": masks[layer.attention_type],
                  "position_embeddings": backbone.rotary_emb(hidden_states, positions, layer.attention_type)})
            for layer in layers
        ]

    def lm_head_activation(self, config) -> str:
        return config.classifier_activation

    def lm_head_bias(self, config, part: str) -> bool:
        return {"dense": config.classifier_bias, "norm": config.norm_bias, "decoder": config.decoder_bias}[part]


class ElectraFamily(BackboneFamily):
    """ELECTRA's masked-LM head is its generator's, whose activation is always GELU."""

    def lm_head_activation(self, config) -> str:
        return "gelu"


class DistilBertFamily(BackboneFamily):
    layer_list = "transformer.layer"
    lora_targets = ("q_lin", "v_lin")


class AlbertFamily(BackboneFamily):
    """ALBERT shares one layer group across its depth; extra layers are fresh, unshared layers of that group's class."""

    layer_list = "encoder.albert_layer_groups.0.albert_layers"


class _EndOfDryRun(Exception):
    """Raised by the last `_LayerInputsRecorder` of a dry run: the backbone has handed every layer its inputs."""


class _LayerInputsRecorder:
    """Stands in for the `forward` of one of the backbone's layers during a dry run: keeps the arguments the backbone
    hands the layer and passes the hidden states through without the layer's work. It replaces the method on the
    layer object, not the layer in its list, so that the module tree stays the same (as `torch.export` requires)."""

    def __init__(self, index: int, store: dict, last: bool):
        self.index, self.store, self.last = index, store, last

    def __call__(self, hidden_states, *args, **kwargs):
        self.store[self.index] = (args, kwargs)
        if self.last:
            raise _EndOfDryRun
        return hidden_states


def _keeper(store: dict, index: int):
    """A forward pre-hook that keeps a layer's arguments after the hidden states in `store[index]`."""

    def keep(module, args, kwargs):
        store[index] = (args[1:], dict(kwargs))

    return keep


def traced() -> bool:
    """Whether the forward pass is being captured as a graph (`torch.compile`, `torch.export`, the ONNX exporter):
    the per-position work then runs on every position and zeroes the others (`only_at`), as boolean selection
    would give the graph a shape that depends on the mask's values. Eager runs select, which skips the padding."""
    return torch.compiler.is_compiling()


def only_at(positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` `(batch, seq, ...)` at `positions` `(batch, seq)`, zero elsewhere."""
    return torch.where(positions[..., None], values, values.new_zeros(()))


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids counted from each row's first non-padding token: 0, 1, ... whichever side the padding is on."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _continue_pattern(values: list, count: int) -> list:
    """`count` more values of a per-layer setting: its shortest period repeated, or its last value where it has none
    (Gemma's 5 local : 1 global continues as 5 : 1; Qwen2's full-then-sliding as sliding)."""
    period = next(p for p in range(1, len(values) + 1) if all(v == values[i % p] for i, v in enumerate(values)))
    if period == len(values):
        return [values[-1]] * count
    return [values[(len(values) + i) % period] for i in range(count)]


class DecoderFamily(BackboneFamily):
    """
    Decoder-only language models (Llama, Qwen, Mistral, Gemma, Phi, OLMo, GPT-2, GPT-NeoX, ...): causal attention,
    layers under `layers` (GPT-2's `h`). Their layers take what the model computes once from the mask and the
    positions (a causal or sliding-window mask, rotary embeddings per attention type, ALiBi), each family in its own
    format, so `layer_inputs` lets the backbone compute them itself: a dry run of its forward with every layer
    replaced by a recorder that keeps what the layer receives and skips the layer's work. An extra layer at position
    L + i gets what the backbone hands its last layer of the same kind, and is built with the per-layer settings
    (`layer_types`, ...) continued by layer index.
    """

    causal = True
    layer_list = "layers"
    layer_lists = ("layers", "h", "blocks", "decoder.layers", "transformer.h", "model.layers")
    lora_targets = ("q_proj", "v_proj")

    def layers(self, backbone: nn.Module) -> nn.ModuleList | None:
        for path in (self.layer_list, *self.layer_lists):
            layers = _attribute(backbone, path)
            if isinstance(layers, nn.ModuleList) and len(layers):
                return layers
        return None

    @staticmethod
    def per_layer_settings(config) -> dict[str, list]:
        """The config's per-layer settings: its list-valued fields with one value per layer (`layer_types`, ...)."""
        depth = config.num_hidden_layers
        return {key: value for key, value in config.to_dict().items() if isinstance(value, list) and len(value) == depth}

    def kinds(self, config, count: int) -> list[tuple]:
        """What the layers at positions 0..count-1 are (their per-layer settings), continued past the backbone's."""
        settings = [values + _continue_pattern(values, max(0, count - len(values)))
                    for values in self.per_layer_settings(config).values()]
        return [tuple(values[position] for values in settings) for position in range(count)]

    def new_layer(self, layer_class, config, position):
        extended = copy.deepcopy(config)  # with its private settings (the attention implementation) kept
        for key, values in self.per_layer_settings(config).items():
            setattr(extended, key, values + _continue_pattern(values, position - config.num_hidden_layers + 1))
        return super().new_layer(layer_class, extended, position)

    def layer_inputs(self, backbone, hidden_states, attention_mask, layers):
        own = self.layers(backbone)
        recorded: dict[int, tuple] = {}
        originals = list(own)
        accepted = inspect.signature(backbone.forward).parameters
        inputs = {"inputs_embeds": hidden_states, "attention_mask": attention_mask, "use_cache": False}
        if attention_mask is not None and "position_ids" in accepted:
            inputs["position_ids"] = positions_from_mask(attention_mask)
        for index, layer in enumerate(own):
            layer.forward = _LayerInputsRecorder(index, recorded, last=index == len(own) - 1)
        try:
            backbone(**{k: v for k, v in inputs.items() if k in accepted or k == "inputs_embeds"})
        except _EndOfDryRun:
            pass
        finally:
            for layer in originals:
                del layer.forward  # the class's own again
        return [recorded[j] for j in self.source_layers(backbone.config, len(layers))]

    def source_layers(self, config, count: int) -> list[int]:
        """For each of `count` extra layers, the index of the backbone's layer whose inputs it takes: the last of
        the same kind (its per-layer settings continued)."""
        depth = config.num_hidden_layers
        kinds = self.kinds(config, depth + count)
        return [max((j for j in range(depth) if kinds[j] == kinds[depth + i]), default=depth - 1) for i in range(count)]


FAMILIES: dict[str, BackboneFamily] = {
    "mpnet": MPNetFamily(),
    "roformer": RoFormerFamily(),
    "deberta": DebertaFamily(lora_targets=("in_proj",)),
    "deberta-v2": DebertaFamily(lora_targets=("query_proj", "value_proj")),
    "modernbert": ModernBertFamily(lora_targets=("Wqkv",)),
    # Decoders whose attention projects queries, keys and values in one layer.
    "gpt2": DecoderFamily(lora_targets=("c_attn",)),
    "gpt_bigcode": DecoderFamily(lora_targets=("c_attn",)),
    "gpt_neox": DecoderFamily(lora_targets=("query_key_value",)),
    "falcon": DecoderFamily(lora_targets=("query_key_value",)),
    "bloom": DecoderFamily(lora_targets=("query_key_value",)),
    "phi3": DecoderFamily(lora_targets=("qkv_proj",)),
    "mpt": DecoderFamily(lora_targets=("Wqkv",)),
    "electra": ElectraFamily(),
    "distilbert": DistilBertFamily(),
    "albert": AlbertFamily(),
}
"""Backbone families that differ from BERT's way, keyed by `model_type`: any other decoder-only family gets
`DecoderFamily()` (`is_decoder_only`), any other encoder `BackboneFamily()`."""


def backbone_family(config) -> BackboneFamily:
    if config.model_type in FAMILIES:
        return FAMILIES[config.model_type]
    return DecoderFamily() if is_decoder_only(config) else BackboneFamily()


class DWAttMLP(nn.Module):
    """f(x) = W · LN(gelu(U · x)): the paper's bottleneck MLP, used for the DWAtt query."""

    def __init__(self, hidden_size: int, bottleneck_size: int, eps: float):
        super().__init__()
        self.up = nn.Linear(hidden_size, bottleneck_size)
        self.norm = nn.LayerNorm(bottleneck_size, eps=eps)
        self.down = nn.Linear(bottleneck_size, hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.down(self.norm(F.gelu(self.up(hidden_states))))


class DepthWiseAttention(nn.Module):
    r"""
    Depth-Wise Attention: every token attends over its own representations in the N fused layers.

    - keys    k_n = W^K p_n, where p_n ~ U(0, 1) is a static (never trained) `d_pos`-vector per layer;
    - values  v_n = LN_n(f^V_n(z_n)), one bottleneck MLP and one LayerNorm per layer;
    - query   q = 1 + elu(z_L + f^Q(z_L));
    - output  h = z_L + sum_n softmax_n(q . k_n) v_n.

    The N value MLPs are stored as stacked weights and evaluated with one batched matmul per projection over the
    layer axis. Input `layers` is `(batch, N, seq, hidden)` or, for inference on a CPU, the N `(batch, seq, hidden)`
    layers as a list (nothing stacked); `last_layer` is z_L `(batch, seq, hidden)`.

    Inference on a CPU takes the layers one at a time instead (`reads_layer_by_layer`): each layer's value MLP
    stays in the cache between its steps, the mid-norm's affine is folded into the down projection and the output
    norm's into `layer_norm`, and each value is added into the mix as soon as it exists, so no (N, tokens, width)
    tensor is ever written (a third less time on a 12 x 768 backbone, benchmarks/fusion_speed.py). The same
    numbers either way, within float rounding (tested).
    """

    stack_dim = 0  # reads the layers layer-major: its value MLPs are one batched matmul over the layer axis

    def __init__(self, config: DWAttConfig):
        super().__init__()
        encoder = config.encoder_config
        hidden, layers = encoder.hidden_size, config.num_fused_layers
        value_size = max(1, round(hidden * config.value_bottleneck))
        self.eps = layer_norm_eps(encoder)
        self.query = DWAttMLP(hidden, max(1, round(hidden * config.query_bottleneck)), self.eps)
        self.key = nn.Linear(config.d_pos, hidden, bias=False)
        self.register_buffer("layer_positions", torch.empty(layers, config.d_pos))
        self.value_up_weight = nn.Parameter(torch.empty(layers, hidden, value_size))
        self.value_up_bias = nn.Parameter(torch.empty(layers, 1, value_size))
        self.value_mid_norm_weight = nn.Parameter(torch.empty(layers, 1, value_size))
        self.value_mid_norm_bias = nn.Parameter(torch.empty(layers, 1, value_size))
        self.value_down_weight = nn.Parameter(torch.empty(layers, value_size, hidden))
        self.value_down_bias = nn.Parameter(torch.empty(layers, 1, hidden))
        self.value_norm_weight = nn.Parameter(torch.empty(layers, 1, hidden))
        self.value_norm_bias = nn.Parameter(torch.empty(layers, 1, hidden))

    def extra_repr(self) -> str:
        layers, hidden, value_size = self.value_up_weight.shape
        return f"layers={layers}, hidden={hidden}, value_bottleneck={value_size}, d_pos={self.key.in_features}"

    def values(self, layers: torch.Tensor) -> torch.Tensor:
        """v_n for every layer: `(batch, N, seq, hidden)` -> `(N, batch * seq, hidden)`."""
        num_layers, hidden = layers.shape[1], layers.shape[-1]
        # Free when `layers` is a view of a layer-major stack (as `DWAttModel` builds it); a copy otherwise.
        stacked = layers.transpose(0, 1).reshape(num_layers, -1, hidden)
        up = torch.baddbmm(self.value_up_bias, stacked, self.value_up_weight)
        up = F.layer_norm(F.gelu(up), up.shape[-1:], eps=self.eps)
        up = torch.addcmul(self.value_mid_norm_bias, up, self.value_mid_norm_weight)  # per-layer affine, one pass
        down = torch.baddbmm(self.value_down_bias, up, self.value_down_weight)
        down = F.layer_norm(down, (hidden,), eps=self.eps)
        return torch.addcmul(self.value_norm_bias, down, self.value_norm_weight)

    @staticmethod
    def reads_layer_by_layer(device: torch.device) -> bool:
        """Inference on a CPU: one layer at a time pays there (see the class docstring); training, and GPUs, whose
        small batches are bound by kernel launches, keep the batched matmuls."""
        return device.type == "cpu" and not torch.is_grad_enabled()

    def mix_layer_by_layer(self, layers, flat_last: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """z_L + sum_n weights_n v_n, computing and adding one layer's values at a time (inference only)."""
        hidden, value_size = flat_last.shape[-1], self.value_up_weight.shape[-1]
        # LN(x) * g + b feeds the down projection W: fold it into W' = diag(g) W and b' = b W + bias.
        down_weight = self.value_mid_norm_weight.transpose(1, 2) * self.value_down_weight
        down_bias = torch.baddbmm(self.value_down_bias, self.value_mid_norm_bias, self.value_down_weight)
        mixed, weights = flat_last, weights.to(flat_last.dtype)
        for n, layer in enumerate(layers):  # out-of-place throughout, so that it also runs under torch.func.vmap
            up = torch.addmm(self.value_up_bias[n], layer.reshape(-1, hidden), self.value_up_weight[n])
            normed = F.layer_norm(F.gelu(up), (value_size,), eps=self.eps)
            down = torch.addmm(down_bias[n], normed, down_weight[n])
            value = F.layer_norm(down, (hidden,), self.value_norm_weight[n, 0], self.value_norm_bias[n, 0], self.eps)
            mixed = torch.addcmul(mixed, value, weights[:, n : n + 1])
        return mixed

    def forward(self, layers, last_layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, seq, hidden = last_layer.shape
        as_list = isinstance(layers, (list, tuple))
        if (len(layers) if as_list else layers.shape[1]) != self.layer_positions.shape[0]:
            shape = f"{len(layers)} layers" if as_list else f"a stack of shape {tuple(layers.shape)} (batch, layers, seq, hidden)"
            raise ValueError(f"DepthWiseAttention was built for {self.layer_positions.shape[0]} layers, got {shape}")
        flat_last = last_layer.reshape(-1, hidden)
        query = 1 + F.elu(flat_last + self.query(flat_last))
        keys = self.key(self.layer_positions)  # the buffer follows the model's dtype; a quantized `key` takes it as is
        weights = torch.softmax(query @ keys.t(), dim=-1)
        if self.reads_layer_by_layer(last_layer.device):
            mixed = self.mix_layer_by_layer(layers if as_list else layers.unbind(1), flat_last, weights)
        else:
            layers = torch.stack(tuple(layers), dim=1) if as_list else layers
            mixed = flat_last + torch.einsum("tn,ntd->td", weights.to(layers.dtype), self.values(layers))  # batched matmul
        return mixed.view(batch, seq, hidden), weights.view(batch, seq, keys.shape[0])


class LayerConcat(nn.Module):
    """h = sum_n W_n z_n, i.e. one `Linear(N * hidden -> hidden)` over the concatenated layers of each token."""

    stack_dim = 2  # reads the layers token-major: each token's N layers side by side are one matmul's input

    def __init__(self, config: DWAttConfig):
        super().__init__()
        hidden = config.encoder_config.hidden_size
        self.proj = nn.Linear(config.num_fused_layers * hidden, hidden)

    def forward(self, layers: torch.Tensor, last_layer: torch.Tensor) -> tuple[torch.Tensor, None]:
        batch, num_layers, seq, hidden = layers.shape
        return self.proj(layers.transpose(1, 2).reshape(batch, seq, num_layers * hidden)), None


class ScalarMix(nn.Module):
    """
    ELMo's scalar mix (AllenNLP `ScalarMix` without layer norm): h = gamma * sum_n softmax(s)_n z_n, with one
    learned scalar s_n per layer and a learned scale gamma. The same weights apply to every token.
    """

    def __init__(self, config: DWAttConfig):
        super().__init__()
        self.scalar_parameters = nn.Parameter(torch.empty(config.num_fused_layers))
        self.gamma = nn.Parameter(torch.empty(1))

    def extra_repr(self) -> str:
        return f"layers={self.scalar_parameters.numel()}"

    def forward(self, layers: torch.Tensor, last_layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights = torch.softmax(self.scalar_parameters, dim=0)
        mixed = self.gamma * torch.einsum("n,bntd->btd", weights.to(layers.dtype), layers)
        batch, seq = last_layer.shape[:2]
        return mixed, weights.expand(batch, seq, -1)


class LastLayer(nn.Module):
    """The `base` fusion: h = z_L, or the one layer z_k that `fused_layers` names (a probe of layer k)."""

    def forward(self, layers: torch.Tensor, last_layer: torch.Tensor) -> tuple[torch.Tensor, None]:
        return last_layer, None


class ExtraLayers(nn.Module):
    """
    `n` freshly initialised layers of the backbone's own layer class on top of z_L (the paper's Base+n). They
    are called like the backbone calls its own (see `BackboneFamily.layer_inputs`): with its attention-mask format
    and its position signal (MPNet's relative bias, DeBERTa's relative positions, ModernBERT's rotary embeddings).
    """

    def __init__(self, config: DWAttConfig, backbone: nn.Module):
        super().__init__()
        encoder = config.encoder_config
        family = backbone_family(encoder)
        layers = family.layers(backbone)
        if layers is None:
            raise ValueError(
                f"fusion 'base_plus_n' needs the transformer layers of the {encoder.model_type!r} backbone "
                f"({type(backbone).__name__}); they are not at `{family.layer_list}`"
            )
        depth = encoder.num_hidden_layers
        self.layer = nn.ModuleList(
            family.new_layer(type(layers[0]), encoder, depth + i) for i in range(config.num_extra_layers)
        )
        for part in self.layer.modules():  # initialised the backbone's way (`DWAttPreTrainedModel._init_weights`)
            part._dwatt_extra_layer_part = True


    def forward(self, last_layer: torch.Tensor, layer_inputs: list[tuple[tuple, dict]]) -> torch.Tensor:
        hidden_states = last_layer
        for layer, (args, kwargs) in zip(self.layer, layer_inputs):
            output = layer(hidden_states, *args, **kwargs)
            hidden_states = output[0] if isinstance(output, tuple) else output
        return hidden_states


def lora_target_layers(backbone: nn.Module, targets) -> dict[str, nn.Module]:
    """The backbone's layers that LoRA adapts: the linear maps (`nn.Linear`, GPT-2's `Conv1D`) named one of `targets`
    (the last part of their path), by path."""
    return {
        path: module
        for path, module in backbone.named_modules()
        if path.rsplit(".", 1)[-1] in targets and isinstance(module, (nn.Linear, Conv1D))
    }


def stores_weight_transposed(layer: nn.Module) -> bool:
    """Whether `layer` keeps its weight `(in, out)`: GPT-2's `Conv1D` does, `nn.Linear` keeps `(out, in)`. Read from
    the layer's class, never guessed from the shape, which cannot tell for a square layer (as PEFT's
    `fan_in_fan_out` is set from the class)."""
    return isinstance(layer, Conv1D)


def low_rank_delta(layer: nn.Module, lora_A: torch.Tensor, lora_B: torch.Tensor, scale: float) -> torch.Tensor:
    """`scale * B @ A` (A: rank x in, B: out x rank) in the layout of `layer.weight`: `(out, in)` for `nn.Linear`,
    `(in, out)` for GPT-2's `Conv1D`; computed in float32."""
    delta = scale * (lora_B.float() @ lora_A.float())
    return (delta.t() if stores_weight_transposed(layer) else delta).to(layer.weight.dtype)


def _lora_key(path: str) -> str:
    return path.replace(".", "__")


class LowRankUpdate(nn.Module):
    """One adapted layer's pair: `lora_A` (rank x in) and `lora_B` (out x rank)."""

    def __init__(self, in_features: int, out_features: int, rank: int):
        super().__init__()
        self.lora_A = nn.Parameter(torch.zeros(rank, in_features))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank))


class LoRAUpdates(nn.Module):
    """
    The low-rank updates of a head-only LoRA checkpoint, one pair per adapted layer of the backbone (keyed by the
    layer's path, dots as `__`), held while the checkpoint loads and then merged into the backbone it fetches:
    `W + (alpha / rank) * B @ A`, in plain torch, so that no LoRA library is needed to load or run the model.
    """

    def __init__(self, config: DWAttConfig, backbone: nn.Module):
        super().__init__()
        lora = config.lora
        layers = lora_target_layers(backbone, lora["targets"])
        if not layers:
            raise ValueError(
                f"LoRA targets {lora['targets']} name no linear layer of the {config.encoder_config.model_type!r} backbone"
            )
        self.scale = lora["alpha"] / lora["rank"]
        self.updates = nn.ModuleDict({
            _lora_key(path): LowRankUpdate(*_in_out(module), lora["rank"]) for path, module in layers.items()
        })

    @torch.no_grad()
    def merge_into(self, backbone: nn.Module) -> None:
        for key, update in self.updates.items():
            layer = backbone.get_submodule(key.replace("__", "."))
            layer.weight += low_rank_delta(layer, update.lora_A, update.lora_B, self.scale)


def _in_out(layer: nn.Module) -> tuple[int, int]:
    """(in, out) features of a linear layer: `nn.Linear` stores its weight `(out, in)`, `Conv1D` `(in, out)`."""
    if isinstance(layer, nn.Linear):
        return layer.in_features, layer.out_features
    return tuple(layer.weight.shape)


def adapted_layers(backbone: nn.Module) -> dict[str, tuple[nn.Module, torch.Tensor, torch.Tensor]]:
    """The backbone's layers that carry a trainable low-rank adapter (PEFT's LoRA layers, as `dwatt` trains them),
    by path: `(base layer, A, B)`. Read by attribute, so that this file needs no LoRA library."""
    found = {}
    for path, module in backbone.named_modules():
        lora_A, lora_B = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
        if isinstance(lora_A, nn.ModuleDict) and isinstance(lora_B, nn.ModuleDict) and len(lora_A) == 1:
            adapter = next(iter(lora_A))
            found[path] = (module.base_layer, lora_A[adapter].weight, lora_B[adapter].weight)
    return found


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


@contextmanager
def _quiet_loading(quiet: bool = True):
    """Silence transformers' load report where missing or unused weights are expected."""
    verbosity = logging.get_verbosity()
    if quiet:
        logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)


def backbone_class(encoder_config) -> type[PreTrainedModel]:
    """The class `AutoModel` builds for an encoder config."""
    return AutoModel._model_mapping[type(encoder_config)]


def backbone_kwargs(encoder_config) -> dict:
    """Construction arguments for the backbone: no pooler, where the class has one to leave out."""
    accepted = inspect.signature(backbone_class(encoder_config).__init__).parameters
    return {"add_pooling_layer": False} if "add_pooling_layer" in accepted else {}


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
        return (model, info) if output_loading_info else model

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        std = getattr(self.config.encoder_config, "initializer_range", 0.02)
        if getattr(module, "_dwatt_extra_layer_part", False):
            # Part of a layer of the backbone's own class (Base+n): the backbone's initialisation knows all its parts
            # (experts, RMS norms, and the rotary or sinusoidal buffers that are not saved, which a reload recomputes).
            backbone = self.backbone if isinstance(self, DWAttModel) else self.dwatt.backbone
            if isinstance(backbone, PreTrainedModel):
                backbone._init_weights(module)
        elif isinstance(module, DepthWiseAttention):
            init.uniform_(module.layer_positions, 0.0, 1.0)
            init.normal_(module.value_up_weight, mean=0.0, std=std)
            init.normal_(module.value_down_weight, mean=0.0, std=std)
            for bias in (module.value_up_bias, module.value_mid_norm_bias, module.value_down_bias, module.value_norm_bias):
                init.zeros_(bias)
            init.ones_(module.value_mid_norm_weight)
            init.ones_(module.value_norm_weight)
        elif isinstance(module, ScalarMix):
            init.zeros_(module.scalar_parameters)
            init.ones_(module.gamma)
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
        self.backbone = AutoModel.from_config(config.encoder_config, **backbone_kwargs(config.encoder_config))
        accepted = inspect.signature(self.backbone.forward).parameters
        self._takes_token_types = "token_type_ids" in accepted
        self._takes_use_cache = "use_cache" in accepted  # a decoder's key/value cache: never read here
        self._counts_positions_from_mask = backbone_family(config.encoder_config).causal and "position_ids" in accepted
        fusion = config.fusion
        if fusion == "dwatt":
            self.fusion = DepthWiseAttention(config)
        elif fusion == "concat":
            self.fusion = LayerConcat(config)
        elif fusion == "scalar_mix":
            self.fusion = ScalarMix(config)
        elif fusion == "base_plus_n":
            self.fusion = ExtraLayers(config, self.backbone)
        else:
            self.fusion = LastLayer()
        # A head-only LoRA checkpoint brings the backbone's low-rank updates; they are merged once it is loaded.
        if config.lora and not config.lora["merged"] and config.heads_only:
            self.lora = LoRAUpdates(config, self.backbone)
        self.keep_layer_inputs()
        self.post_init()

    def keep_layer_inputs(self) -> None:
        """Base+n on a decoder: forward pre-hooks on the backbone's own layers keep what the backbone hands each of
        them after the hidden states (its masks, rotary embeddings, ...) in `self._layer_inputs`, by index, for the
        extra layers of the same kind. Installed once per backbone (when built, and when a pretrained one is
        attached), so that the forward pass installs nothing and stays one graph for `torch.compile`."""
        self._layer_inputs: dict[int, tuple] = {}
        family = backbone_family(self.config.encoder_config)
        if isinstance(self.fusion, ExtraLayers) and isinstance(family, DecoderFamily):
            self._source_layers = family.source_layers(self.backbone.config, len(self.fusion.layer))
            for index, layer in enumerate(family.layers(self.backbone)):
                layer.register_forward_pre_hook(_keeper(self._layer_inputs, index), with_kwargs=True)

    @property
    def fused_layer_indices(self) -> list[int]:
        """Indices into the backbone's hidden-state tuple (0 = embedding output) that the fusion reads: the layers
        of `config.fused_layers` (all by default), z_L last."""
        if self.config.fusion == "base":
            return [self.config.read_layer]
        if self.config.fusion == "base_plus_n":
            return [self.config.encoder_config.num_hidden_layers]
        return [0] * self.config.include_embeddings + self.config.fused_layer_numbers

    @property
    def fusion_is_per_token(self) -> bool:
        """Whether each token's output depends on that token's hidden states alone (all fusions but Base+n)."""
        return self.config.fusion != "base_plus_n"

    def get_input_embeddings(self) -> nn.Module:
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.backbone.set_input_embeddings(value)

    def _select_layers(self, backbone_hidden_states) -> torch.Tensor | list[torch.Tensor]:
        if isinstance(backbone_hidden_states, (tuple, list)):
            states = tuple(backbone_hidden_states)
            if len(states) == self.config.encoder_config.num_hidden_layers + 1:
                return self._stack(states)
            if len(states) == len(self.fused_layer_indices) > 1 and self._reads_layer_by_layer(states[0].device):
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
        if available == num_all:
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
        """Which hidden states `_stack` stacks and along which memory axis (the fusion's `stack_dim`, default 1):
        fusions with equal layouts can share one stacked tensor."""
        return tuple(self.fused_layer_indices), getattr(self.fusion, "stack_dim", 1)

    def _reads_layer_by_layer(self, device: torch.device) -> bool:
        reads = getattr(self.fusion, "reads_layer_by_layer", None)
        return reads is not None and reads(device)

    def _stack(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor | list[torch.Tensor]:
        """The fused layers as a `(batch, layers, seq, hidden)` view, laid out in memory the way the fusion reads
        them (its `stack_dim`), so that it reshapes without copying; a single layer (Base, Base+n) is not copied,
        nor are the layers of a fusion that reads them one by one here (a list then)."""
        indices, stack_dim = self.stack_layout
        selected = [hidden_states[i] for i in indices]
        if len(selected) == 1:
            return selected[0].unsqueeze(1)
        if self._reads_layer_by_layer(selected[0].device):
            return selected
        return torch.stack(selected, dim=stack_dim).movedim(stack_dim, 1)

    def run_backbone(self, **inputs) -> tuple[torch.Tensor, ...]:
        """
        The backbone's hidden states for `inputs` (embedding output first, then each layer). The last is the
        encoder's output (`last_hidden_state`): for families with a final norm after the last layer (ModernBERT, the
        decoder LLMs) that is what a plain head would read. See `backbone_outputs` for the inputs.
        """
        return self.backbone_outputs(**inputs)[0]

    def backbone_outputs(self, output_attentions: bool = False, **inputs) -> tuple[tuple[torch.Tensor, ...], tuple | None]:
        """
        `run_backbone`'s hidden states, and the backbone's attention maps when `output_attentions` (else None).
        Inputs the family has no use for (token types) are left out. A decoder-only backbone counts positions from
        each row's first non-padding token, so that padding on either side changes nothing (transformers' own
        default counts from the first position, padding included).
        """
        if not self._takes_token_types:
            inputs.pop("token_type_ids", None)
        mask = inputs.get("attention_mask")
        if self._counts_positions_from_mask and mask is not None and inputs.get("position_ids") is None:
            inputs["position_ids"] = positions_from_mask(mask)
        if output_attentions:
            inputs["output_attentions"] = True
        if self._takes_use_cache:
            inputs["use_cache"] = False
        outputs = self.backbone(**{k: v for k, v in inputs.items() if v is not None}, output_hidden_states=True,
                                return_dict=True)
        attentions = outputs.attentions if output_attentions else None
        return (*outputs.hidden_states[:-1], outputs.last_hidden_state), attentions

    def _fuse_positions(self, layers, last_layer: torch.Tensor, token_mask: torch.Tensor) -> tuple:
        """Run a per-token fusion on the positions of `token_mask` only; the other positions stay zero. `layers` is
        a stack, or the list of layers a fusion that reads them one by one takes (each then selected alone)."""
        if isinstance(layers, list):
            selected = [layer[token_mask][None] for layer in layers]  # N x (1, positions, hidden)
        else:
            selected = layers.permute(0, 2, 1, 3)[token_mask].transpose(0, 1)[None]  # (1, layers, positions, hidden)
        fused_selected, weights_selected = self.fusion(selected, last_layer[token_mask][None])
        # Out-of-place scatters, so the model also runs under torch.func.vmap (several heads trained at once).
        fused = last_layer.new_zeros(last_layer.shape).index_put((token_mask,), fused_selected[0])
        weights = None
        if weights_selected is not None:
            zeros = weights_selected.new_zeros(*token_mask.shape, weights_selected.shape[-1])
            weights = zeros.index_put((token_mask,), weights_selected[0])
        return fused, weights

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
        all_hidden_states = attentions = recorded = None
        if backbone_hidden_states is None:
            if input_ids is None and inputs_embeds is None:
                raise ValueError("DWAttModel needs `input_ids`, `inputs_embeds` or `backbone_hidden_states`")
            recorded = self._layer_inputs  # filled by the backbone's run where Base+n on a decoder keeps them
            recorded.clear()
            all_hidden_states, attentions = self.backbone_outputs(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                token_type_ids=token_type_ids,
                position_ids=position_ids,
                output_attentions=output_attentions,
                **kwargs,
            )
            layers = self._stack(all_hidden_states)
        else:
            layers = self._select_layers(backbone_hidden_states)
        last_layer = layers[-1] if isinstance(layers, list) else layers[:, -1]
        if isinstance(self.fusion, ExtraLayers) and recorded:
            layer_inputs = [recorded[j] for j in self._source_layers]
            fused, layer_weights = self.fusion(last_layer, layer_inputs), None
            recorded.clear()
        elif isinstance(self.fusion, ExtraLayers):  # cached hidden states: the family computes the layer inputs
            family = backbone_family(self.config.encoder_config)
            layer_inputs = family.layer_inputs(self.backbone, last_layer, attention_mask, self.fusion.layer)
            fused, layer_weights = self.fusion(last_layer, layer_inputs), None
            self._layer_inputs.clear()  # what a decoder's dry run left in the keepers
        elif token_mask is not None and traced():  # one graph: every position fused, the others zeroed
            fused, layer_weights = self.fusion(layers, last_layer)
            fused = only_at(token_mask.bool(), fused)
            layer_weights = None if layer_weights is None else only_at(token_mask.bool(), layer_weights)
        elif token_mask is not None:
            fused, layer_weights = self._fuse_positions(layers, last_layer, token_mask.bool())
        else:
            fused, layer_weights = self.fusion(layers, last_layer)
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


class _DWAttWithHead(DWAttPreTrainedModel):
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

    def train(self, mode: bool = True):
        super().train(mode)
        if getattr(self, "backbone_frozen", False):
            self.dwatt.backbone.eval()
        return self

    def head(self, fused: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        """The task head: logits from the fused representation (of `positions` only, where fused so). Each task
        model defines its own."""
        raise NotImplementedError

    def fused_positions(self, labels, attention_mask, shape: torch.Size, device, logits_mask=None) -> torch.Tensor | None:
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
            reference = backbone_hidden_states[0] if isinstance(backbone_hidden_states, (tuple, list)) else backbone_hidden_states[:, 0]
        else:
            reference = input_ids if input_ids is not None else inputs_embeds
        positions = None if reference is None else self.fused_positions(labels, attention_mask, reference.shape[:2],
                                                                        reference.device, logits_mask)
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
        logits = self.head(fused.last_hidden_state, positions)
        loss = None if labels is None else self.task_loss(logits, labels.to(logits.device), num_items_in_batch)
        output = self.output_class(
            loss=loss, logits=logits, hidden_states=fused.hidden_states, attentions=fused.attentions,
            layer_weights=fused.layer_weights,
        )
        return output if return_dict is not False else output.to_tuple()

    @classmethod
    def from_backbone(
        cls,
        name_or_path: str,
        fusion: str = "dwatt",
        num_labels: int | None = None,
        *,
        revision: str | None = None,
        dtype: torch.dtype | str | None = None,
        load_kwargs: dict | None = None,
        **config_kwargs,
    ):
        r"""
        Build a model whose backbone carries the pretrained weights of `name_or_path` (a Hub id such as
        `"roberta-large"` or a local folder) and whose fusion module and head are freshly initialised: the usual
        starting point for training.

        Args:
            name_or_path (`str`): the pretrained encoder.
            fusion (`str`): see [`DWAttConfig`].
            num_labels (`int`, *optional*): size of the token-classification head (or pass `id2label`).
            revision (`str`, *optional*): branch, tag or commit of the backbone; recorded in the config.
            dtype (`torch.dtype` or `str`, *optional*): dtype of the whole model.
            load_kwargs (`dict`, *optional*): extra arguments for the backbone's `from_pretrained`
                (`cache_dir`, `local_files_only`, `token`, `attn_implementation`, ...).
            config_kwargs: any other [`DWAttConfig`] argument (`d_pos`, `num_extra_layers`, `id2label`, ...).
        """
        load_kwargs = dict(load_kwargs or {})
        if revision is not None:
            load_kwargs["revision"] = revision
        pretrained = cls._load_pretrained_backbone(name_or_path, load_kwargs)
        backbone = pretrained.base_model
        if num_labels is not None:
            config_kwargs["num_labels"] = num_labels
        config = DWAttConfig(
            encoder_config=backbone.config,
            fusion=fusion,
            backbone_name_or_path=str(name_or_path),
            backbone_revision=revision,
            **config_kwargs,
        )
        model = cls(config)
        model._attach_pretrained_backbone(pretrained, name_or_path, adopt_head=True)
        if dtype is not None:
            model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
        return model

    @classmethod
    def _load_pretrained_backbone(cls, name_or_path: str, load_kwargs: dict) -> PreTrainedModel:
        config = AutoConfig.from_pretrained(name_or_path, **load_kwargs)
        with _quiet_loading():  # the checkpoint's pooler weights are unused on purpose: no load report
            return AutoModel.from_pretrained(name_or_path, config=config, **backbone_kwargs(config), **load_kwargs)

    def _adopt_pretrained_head(self, pretrained: PreTrainedModel) -> None:
        """Hook for heads that start from pretrained weights (the masked-LM head)."""

    def _attach_pretrained_backbone(self, pretrained: PreTrainedModel, name_or_path: str, adopt_head: bool) -> None:
        """Make a loaded pretrained backbone `self.dwatt.backbone` (in the place of the one this model was built
        with, in its dtype, device and attention implementation), after checking it is the same architecture and
        shape as the one this model was built (or trained) for."""
        ours, theirs = self.config.encoder_config, pretrained.base_model.config
        differences = [
            f"{key} {getattr(theirs, key, None)!r} instead of {getattr(ours, key, None)!r}"
            for key in BACKBONE_IDENTITY
            if getattr(theirs, key, None) != getattr(ours, key, None)
        ]
        if differences:
            raise ValueError(
                f"the backbone {name_or_path!r} is not the one this model was built for: " + "; ".join(differences)
            )
        built, loaded = self.dwatt.backbone, pretrained.base_model
        expected = {key: tuple(value.shape) for key, value in built.state_dict().items()}
        found = {key: tuple(value.shape) for key, value in loaded.state_dict().items()}
        if expected != found:
            missing, unexpected = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
            reshaped = sorted(key for key in set(expected) & set(found) if expected[key] != found[key])
            raise ValueError(
                f"the backbone weights of {name_or_path!r} do not fit the model built from its own config: "
                f"missing {missing[:5]}, unexpected {unexpected[:5]}, other shapes {reshaped[:5]}"
            )
        reference = next(built.parameters())
        loaded.to(dtype=reference.dtype, device=None if reference.is_meta else reference.device)
        wanted = getattr(built.config, "_attn_implementation", None)
        if wanted and wanted != getattr(loaded.config, "_attn_implementation", None) and hasattr(loaded, "set_attn_implementation"):
            loaded.set_attn_implementation(wanted)
        self.dwatt.backbone = loaded.train(built.training)
        self.dwatt.keep_layer_inputs()
        if adopt_head:
            self._adopt_pretrained_head(pretrained)

    def _initialize_missing_keys(self, *args, **kwargs) -> None:
        """transformers' initialisation of the weights a checkpoint lacks, without the backbone of a head-only
        checkpoint: the pretrained one takes its place right after (`_attach_pretrained_backbone`), so drawing random
        weights for it would only cost time."""
        if getattr(self.config, "heads_only", False):
            backbone = self.dwatt.backbone
            for part in backbone.modules():
                part._is_hf_initialized = True
            for tensor in (*backbone.parameters(), *backbone.buffers()):
                tensor._is_hf_initialized = True
        super()._initialize_missing_keys(*args, **kwargs)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """
        What a head-only checkpoint stores: everything but the backbone (fusion module, extra layers, task head);
        for masked LM the vocabulary head only if it trains (otherwise it is the backbone's pretrained one); with
        LoRA, the low-rank updates of the adapted backbone layers (`dwatt.lora.updates.<path>.lora_A`/`lora_B`).
        """
        lm_head_trains = any(p.requires_grad for p in getattr(self, "lm_head", nn.Module()).parameters())
        state = {
            key: value
            for key, value in self.state_dict().items()
            if not key.startswith(BACKBONE_PREFIX) and (lm_head_trains or not key.startswith("lm_head."))
        }
        adapted = adapted_layers(self.dwatt.backbone)
        if self.config.lora and not adapted and getattr(self.dwatt, "lora", None) is None:
            raise ValueError("this model's LoRA updates are merged into its backbone: save it whole (heads_only=False)")
        for path, (_, lora_A, lora_B) in adapted.items():
            state[f"dwatt.lora.updates.{_lora_key(path)}.lora_A"] = lora_A
            state[f"dwatt.lora.updates.{_lora_key(path)}.lora_B"] = lora_B
        return state

    def merged_state_dict(self) -> dict[str, torch.Tensor]:
        """The full state of a model whose backbone carries LoRA adapters, with each adapted layer's update merged into
        its weight under the layer's own name, as a plain backbone of its family holds it."""
        adapted = adapted_layers(self.dwatt.backbone)
        scale = self.config.lora["alpha"] / self.config.lora["rank"]
        state = {}
        for key, value in self.state_dict().items():
            if ".lora_A." in key or ".lora_B." in key:
                continue
            if ".base_layer." in key:
                path = key.removeprefix(BACKBONE_PREFIX).split(".base_layer.")[0]
                key = key.replace(".base_layer.", ".")
                if key.endswith(".weight"):
                    layer, lora_A, lora_B = adapted[path]
                    value = value + low_rank_delta(layer, lora_A, lora_B, scale)
            state[key] = value
        return state

    def save_pretrained(self, save_directory, *args, heads_only: bool = False, **kwargs):
        """
        `PreTrainedModel.save_pretrained`, plus `heads_only=True`: write the config (which names the backbone by
        `backbone_name_or_path` and `backbone_revision`), the two remote-code files and only
        [`head_state_dict`]'s tensors, like an adapter. `from_pretrained` on such a folder loads the named backbone
        (or the one passed as `backbone_name_or_path=`) and applies the head.
        """
        lora = self.config.lora
        if not heads_only:
            if "state_dict" in kwargs:  # the caller's own tensors (the Trainer's checkpoints, which it resumes from)
                return super().save_pretrained(save_directory, *args, **kwargs)
            if adapted_layers(self.dwatt.backbone):  # LoRA in training: the updates merged into the backbone's layers
                state = self.merged_state_dict()
            elif getattr(self.dwatt, "lora", None) is not None:  # loaded head-only: the backbone holds them already
                state = {k: v for k, v in self.state_dict().items() if not k.startswith("dwatt.lora.")}
            else:
                return super().save_pretrained(save_directory, *args, **kwargs)
            merged, lora["merged"] = lora["merged"], True
            try:
                return super().save_pretrained(save_directory, *args, state_dict=state, **kwargs)
            finally:
                lora["merged"] = merged
        if not self.config.backbone_name_or_path:
            raise ValueError(
                "heads_only=True needs `config.backbone_name_or_path` (set by `from_backbone`) so that loading can "
                "find the backbone again"
            )
        state = self.head_state_dict()
        merged = lora["merged"] if lora else None
        self.config.heads_only = True
        if lora:
            lora["merged"] = False  # the updates travel beside the head, to be merged into the backbone when it loads
        try:
            return super().save_pretrained(save_directory, *args, state_dict=state, **kwargs)
        finally:
            self.config.heads_only = False
            if lora:
                lora["merged"] = merged

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """
        Load a full or a head-only checkpoint (see [`save_pretrained`]). For a head-only one the backbone comes from
        `backbone_name_or_path` (a Hub id or folder; default: the one recorded in the config) at
        `backbone_revision`, and must have the recorded architecture and shape. A checkpoint that lacks any weight
        the model needs, holds tensors of other shapes, or whose weights file is corrupted is refused; no
        half-loaded model is returned.
        """
        backbone_name_or_path = kwargs.pop("backbone_name_or_path", None)
        backbone_revision = kwargs.pop("backbone_revision", None)
        output_loading_info = kwargs.pop("output_loading_info", False)
        config = kwargs.pop("config", None)
        if config is None:
            hub_kwargs = {k: kwargs[k] for k in HUB_KWARGS if k in kwargs}
            config = DWAttConfig.from_pretrained(pretrained_model_name_or_path, **hub_kwargs)
        heads_only = bool(getattr(config, "heads_only", False))
        try:
            with _quiet_loading(heads_only):  # the backbone's weights are missing on purpose: no load report
                model, info = super().from_pretrained(
                    pretrained_model_name_or_path, *model_args, config=config, output_loading_info=True, **kwargs
                )
        except Exception as error:
            if type(error).__name__ == "SafetensorError":  # safetensors is not imported here: match by name
                raise ValueError(
                    f"{pretrained_model_name_or_path}: the weights file is corrupted or truncated ({error})"
                ) from error
            raise
        missing = sorted(info["missing_keys"])
        if heads_only:
            missing = [key for key in missing if not key.startswith(BACKBONE_PREFIX)]
            lm_head_missing = [key for key in missing if key.startswith("lm_head.")]
            missing = [key for key in missing if not key.startswith("lm_head.")]
        if missing:
            raise ValueError(
                f"the checkpoint {pretrained_model_name_or_path} lacks {len(missing)} weights the model needs: "
                f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
            )
        if heads_only:
            source = backbone_name_or_path or config.backbone_name_or_path
            revision = backbone_revision or config.backbone_revision
            load_kwargs = {k: kwargs[k] for k in HUB_KWARGS if k in kwargs and k != "revision"}
            if revision is not None:
                load_kwargs["revision"] = revision
            pretrained = cls._load_pretrained_backbone(source, load_kwargs)
            model._attach_pretrained_backbone(pretrained, source, adopt_head=bool(lm_head_missing))
            if getattr(model.dwatt, "lora", None) is not None:  # W + (alpha / rank) B A: a plain, merged backbone
                model.dwatt.lora.merge_into(model.dwatt.backbone)  # (the pairs kept, for a head-only save again)
                model.config.lora["merged"] = True
            model.config.heads_only = False
            model.config.backbone_name_or_path, model.config.backbone_revision = str(source), revision
        return (model, info) if output_loading_info else model


class RobertaDWAttForTokenClassification(_DWAttWithHead):
    """
    DWAtt layer fusion over a pretrained encoder, with a linear token-classification head on the fused
    representation (e.g. for NER). Works with RoBERTa, XLM-RoBERTa, BERT and MPNet backbones; the RoBERTa name is
    the one the paper's users know.

    Example:

    ```python
    >>> model = RobertaDWAttForTokenClassification.from_backbone("roberta-large", fusion="dwatt", num_labels=9)
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


class RobertaDWAttForMaskedLM(_DWAttWithHead):
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
    def _load_pretrained_backbone(cls, name_or_path: str, load_kwargs: dict) -> PreTrainedModel:
        model, info = AutoModelForMaskedLM.from_pretrained(name_or_path, output_loading_info=True, **load_kwargs)
        prefix = model.base_model_prefix
        head_missing = [key for key in info["missing_keys"] if not key.startswith(prefix + ".")]
        if head_missing:
            logger.warning(
                f"{name_or_path} ships no pretrained masked-LM head ({len(head_missing)} weights missing); the head "
                "starts from fresh weights, its vocabulary projection from the input embeddings."
            )
        return model

    def _adopt_pretrained_head(self, pretrained: PreTrainedModel) -> None:
        prefix = pretrained.base_model_prefix
        source = {
            key: value for key, value in pretrained.state_dict().items() if not key.startswith(prefix + ".")
        }

        def find(*suffixes: str) -> torch.Tensor:
            for suffix in suffixes:
                matches = [key for key in source if key == suffix or key.endswith("." + suffix)]
                if len(matches) == 1:
                    return source[matches[0]]
            raise ValueError(
                f"cannot find the masked-LM head weight {suffixes[0]!r} of {type(pretrained).__name__}; "
                f"head keys: {sorted(source)}"
            )

        # The families' names for the same three parts: dense, LayerNorm and the vocabulary bias.
        dense = ("transform.dense", "lm_head.dense", "head.dense", "vocab_transform", "generator_predictions.dense",
                 "predictions.dense", "dense")
        norm = ("transform.LayerNorm", "lm_head.layer_norm", "lm_head.LayerNorm", "head.norm", "vocab_layer_norm",
                "generator_predictions.LayerNorm", "predictions.LayerNorm", "layer_norm")
        decoder_bias = ("predictions.bias", "lm_head.bias", "vocab_projector.bias", "generator_lm_head.bias", "decoder.bias")
        wanted = set(self.lm_head.state_dict())
        weights = {"decoder.weight": pretrained.get_output_embeddings().weight}
        for ours, names in (("dense", dense), ("layer_norm", norm)):
            for part in ("weight", "bias"):
                if f"{ours}.{part}" in wanted:
                    weights[f"{ours}.{part}"] = find(*(f"{name}.{part}" for name in names))
        if "decoder.bias" in wanted:
            weights["decoder.bias"] = find(*decoder_bias)
        self.lm_head.load_state_dict({key: value.detach().clone() for key, value in weights.items()})


class RobertaDWAttForSequenceClassification(_DWAttWithHead):
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
    >>> model = RobertaDWAttForSequenceClassification.from_backbone("roberta-large", fusion="dwatt", num_labels=4)
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


# Family-neutral names: the same classes, for users of any encoder (the RoBERTa names are the paper's).
DWAttForTokenClassification = RobertaDWAttForTokenClassification
DWAttForMaskedLM = RobertaDWAttForMaskedLM
DWAttForSequenceClassification = RobertaDWAttForSequenceClassification

DWAttModel.register_for_auto_class("AutoModel")
RobertaDWAttForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
RobertaDWAttForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")
RobertaDWAttForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
if __name__ == "modeling_dwatt":  # imported by its name: the classes take the place of `configuration_dwatt`'s stand-ins
    import transformers

    for _model in (DWAttModel, RobertaDWAttForTokenClassification, RobertaDWAttForMaskedLM, RobertaDWAttForSequenceClassification):
        _auto = next(auto for auto, name in AUTO_MODELS.items() if name == _model.__name__)
        getattr(transformers, _auto).register(DWAttConfig, _model, exist_ok=True)

__all__ = [
    "LoRAUpdates",
    "DWAttForMaskedLM",
    "DWAttForSequenceClassification",
    "DWAttForTokenClassification",
    "DWAttModel",
    "DWAttPreTrainedModel",
    "DepthWiseAttention",
    "ExtraLayers",
    "LastLayer",
    "LayerConcat",
    "RobertaDWAttForMaskedLM",
    "RobertaDWAttForSequenceClassification",
    "RobertaDWAttForTokenClassification",
    "ScalarMix",
    "count_parameters",
]
