# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""Backbone families for DWAtt: what the fusions and the models need to know of a pretrained encoder or decoder LLM
beyond what `AutoModel` gives (where its layers live, how one more is built, what a layer takes besides the hidden
states, its masked-LM head's shape), one record per family that differs from BERT's way (`FAMILIES`).

Part of DWAtt's remote code: travels with every checkpoint beside `modeling_dwatt.py`; imports only torch and
transformers.
"""

import copy
import inspect
from contextlib import contextmanager

import torch
from torch import nn
from transformers import MODEL_MAPPING, PreTrainedModel
from transformers.utils import logging

try:
    from .configuration_dwatt import is_decoder_only
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from configuration_dwatt import is_decoder_only
    except ImportError as error:
        raise ImportError(f"{__name__} needs the other *_dwatt.py files beside it") from error


def bidirectional_mask(backbone, hidden_states, attention_mask):
    """The attention mask an encoder's layer takes: transformers 5's `create_bidirectional_mask`, or in the 4.x
    releases (which have none) the extended additive mask their encoders build (`get_extended_attention_mask`)."""
    try:
        from transformers.masking_utils import create_bidirectional_mask
    except ImportError:  # transformers 4.x
        if attention_mask is None:
            attention_mask = torch.ones(hidden_states.shape[:2], device=hidden_states.device)
        return backbone.get_extended_attention_mask(attention_mask, hidden_states.shape[:2], dtype=hidden_states.dtype)
    # positionally: 5.0 names the embeddings `input_embeds`, later releases `inputs_embeds`
    return create_bidirectional_mask(backbone.config, hidden_states, attention_mask)


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
    return (
        dropout_probability(config.encoder_config) if config.classifier_dropout is None else config.classifier_dropout
    )


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
    # Why layers of the family's own kind cannot run on top of it (Base+n), for a family that cannot; None: they can.
    extra_layers_refused: str | None = None
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
        return [((bidirectional_mask(backbone, hidden_states, attention_mask),), {}) for _ in layers]

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
            "full_attention": bidirectional_mask(backbone, hidden_states, attention_mask),
            "sliding_attention": create_bidirectional_sliding_window_mask(**mask_kwargs),
        }
        positions = torch.arange(hidden_states.shape[1], device=hidden_states.device)[None]  # ModernBERT's own default
        return [
            (
                (),
                {
                    "attention_mask": masks[layer.attention_type],
                    "position_embeddings": backbone.rotary_emb(hidden_states, positions, layer.attention_type),
                },
            )
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


def per_layer_settings(config) -> dict[str, list]:
    """The config's per-layer settings: its list-valued fields with one value per layer (`layer_types`, ...)."""
    depth = config.num_hidden_layers
    return {key: value for key, value in config.to_dict().items() if isinstance(value, list) and len(value) == depth}


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
    format, so the backbone computes them itself and its runner records them (`BackboneRunner.layer_inputs`). An
    extra layer at position L + i gets what the backbone hands its last layer of the same kind, and is built with the
    per-layer settings (`layer_types`, ...) continued by layer index.
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

    def kinds(self, config, count: int) -> list[tuple]:
        """What the layers at positions 0..count-1 are (their per-layer settings), continued past the backbone's."""
        settings = [
            values + _continue_pattern(values, max(0, count - len(values)))
            for values in per_layer_settings(config).values()
        ]
        return [tuple(values[position] for values in settings) for position in range(count)]

    def new_layer(self, layer_class, config, position):
        extended = copy.deepcopy(config)  # with its private settings (the attention implementation) kept
        for key, values in per_layer_settings(config).items():
            setattr(extended, key, values + _continue_pattern(values, position - config.num_hidden_layers + 1))
        return super().new_layer(layer_class, extended, position)

    def layer_inputs(self, backbone, hidden_states, attention_mask, layers):
        raise TypeError(
            f"a decoder's layer inputs ({type(backbone).__name__}) are what its forward computes: recorded in a run of "
            "the backbone by its runner (depth_dwatt.BackboneRunner.layer_inputs), not computed by the family"
        )

    def source_layers(self, config, count: int) -> list[int]:
        """For each of `count` extra layers, the index of the backbone's layer whose inputs it takes: the last of
        the same kind (its per-layer settings continued)."""
        depth = config.num_hidden_layers
        kinds = self.kinds(config, depth + count)
        sources = []
        for i in range(count):  # a plain loop: torch.compile (2.13) cannot trace max() over a generator with a default
            same_kind = [j for j in range(depth) if kinds[j] == kinds[depth + i]]
            sources.append(same_kind[-1] if same_kind else depth - 1)
        return sources


# Where the families keep the norm they apply after their last layer (Llama's and Qwen's `norm`, Phi's
# `final_layernorm`, GPT-NeoX's `final_layer_norm`, GPT-2's `ln_f`, ModernBERT's `final_norm`).
FINAL_NORMS = ("norm", "final_layernorm", "final_layer_norm", "ln_f", "final_norm")


def final_norm(backbone: nn.Module) -> nn.Module | None:
    """The norm `backbone` applies after its last layer, where its family has one; None otherwise (BERT's kind)."""
    return next(
        (module for name in FINAL_NORMS if isinstance(module := getattr(backbone, name, None), nn.Module)), None
    )


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
    """The class `AutoModel` builds for an encoder config (transformers' public `MODEL_MAPPING`, config class to
    model class)."""
    return MODEL_MAPPING[type(encoder_config)]


def backbone_kwargs(encoder_config) -> dict:
    """Construction arguments for the backbone: no pooler, where the class has one to leave out."""
    accepted = inspect.signature(backbone_class(encoder_config).__init__).parameters
    return {"add_pooling_layer": False} if "add_pooling_layer" in accepted else {}
