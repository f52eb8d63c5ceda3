# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""DWAtt model configuration.

This file travels inside every DWAtt checkpoint (``trust_remote_code=True``); it imports only ``transformers``, the
standard library and `specs_dwatt` (the fusions' facts, standard library only): no torch module, no model code.
"""

from typing import Any

import transformers
from transformers import AutoConfig, PretrainedConfig

try:
    from .specs_dwatt import (
        FUSIONS,
        POOLINGS,
        SEQUENCE_HEADS,
        WORD_READOUTS,
        FusionSpec,
        fusion_spec,
        layers_to_run,
        word_readout_parts,
    )
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from specs_dwatt import (
            FUSIONS,
            POOLINGS,
            SEQUENCE_HEADS,
            WORD_READOUTS,
            FusionSpec,
            fusion_spec,
            layers_to_run,
            word_readout_parts,
        )
    except ImportError as error:
        raise ImportError(f"{__name__} needs the other *_dwatt.py files beside it") from error

_ENCODER_DEFAULTS = {"model_type": "roberta"}


def parse_fused_layers(spec: Any, num_layers: int, add_last: bool = True, lowest: int = 1) -> list[int]:
    """
    The backbone layers (1..L) a `fused_layers` spec names, ascending: `"all"`; `"every:k"` (layers k, 2k, ...);
    a range `"a-b"` (inclusive); a list, as `[3, 7, 12]` or `"3,7,12"`. The last layer L is among them: the
    DWAtt query and residual read the deepest layer fused, and the other fusions end in it. `"only:"` before a spec
    (`"only:9-13"`), or `add_last=False`: exactly the layers named (a window of layers whose deepest one the query
    reads, and a backbone that runs no deeper; a probe's choice of layers, each read alone). `lowest=0` lets a range
    or a list name the embedding output as layer 0 (a head on one layer, a probe); `"all"` is 1..L still.
    """
    key = "`fused_layers`"
    if isinstance(spec, str) and spec.startswith("only:"):
        return parse_fused_layers(spec.removeprefix("only:"), num_layers, add_last=False, lowest=lowest)
    if spec is None or spec == "all":
        return list(range(1, num_layers + 1))
    if isinstance(spec, str) and spec.startswith("every:"):
        step = spec.removeprefix("every:")
        if not _is_number(step) or int(step) < 1:
            raise ValueError(f"DWAttConfig: {key} {spec!r}: 'every:k' needs an integer k >= 1")
        chosen = list(range(int(step), num_layers + 1, int(step)))
    elif isinstance(spec, str) and "-" in spec and "," not in spec:
        first, _, last = spec.partition("-")
        if not (_is_number(first.strip()) and _is_number(last.strip())) or int(first) > int(last):
            raise ValueError(f"DWAttConfig: {key} {spec!r}: a range is 'a-b' with integers a <= b")
        chosen = list(range(int(first), int(last) + 1))
    else:
        items = spec.split(",") if isinstance(spec, str) else spec
        try:
            chosen = [
                item if isinstance(item, int) else _number(str(item).strip()) for item in items if str(item).strip()
            ]
        except (TypeError, ValueError):
            raise ValueError(
                f"DWAttConfig: {key} {spec!r}: expected 'all', 'every:k', a range 'a-b' or a list of layer numbers"
            ) from None
    outside = [layer for layer in chosen if not lowest <= layer <= num_layers]
    if outside or not chosen:
        raise ValueError(
            f"DWAttConfig: {key} {spec!r} names layers {outside or 'none'}; the backbone's are {lowest}..{num_layers}"
            + (" (0: the embedding output)" if lowest == 0 else "")
        )
    return sorted(set(chosen) | ({num_layers} if add_last else set()))


def single_layer(spec: Any) -> int | None:
    """The layer number a `fused_layers` spec names when it names exactly one (`15`, `"15"`, `"only:15"`, `[15]`),
    else None."""
    if isinstance(spec, str):
        spec = spec.removeprefix("only:")
    items = spec if isinstance(spec, (list, tuple)) else str(spec).split(",") if spec is not None else []
    items = [str(item).strip() for item in items if str(item).strip()]
    return int(items[0]) if len(items) == 1 and _is_number(items[0]) else None


def is_decoder_only(encoder_config: PretrainedConfig) -> bool:
    """Whether the backbone is a decoder-only language model (Llama, Qwen, Gemma, Mistral, Phi, GPT-2, ...): its family
    has a causal-LM class and no masked-LM one. Its tokens see only what precedes them."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    family = encoder_config.model_type
    return family in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and family not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _is_number(text: str) -> bool:
    """ASCII digits only: `int()` refuses superscripts (`'²'.isdigit()` is True)."""
    return text.isascii() and text.isdigit()


def _number(text: str) -> int:
    if not _is_number(text):
        raise ValueError(text)
    return int(text)


def _as_encoder_config(encoder_config: Any, saved_with: str | None = None) -> PretrainedConfig:
    """The backbone's config from a dict (as `config.json` holds it) or as given; `saved_with`: the transformers
    release a checkpoint was saved with, named where the running release lacks the backbone's family."""
    if encoder_config is None:
        encoder_config = dict(_ENCODER_DEFAULTS)
    if isinstance(encoder_config, PretrainedConfig):
        return encoder_config
    if not isinstance(encoder_config, dict):
        raise TypeError(
            f"DWAttConfig: `encoder_config` must be a dict or a PretrainedConfig, got {type(encoder_config).__name__}"
        )
    encoder_config = dict(encoder_config)
    model_type = encoder_config.pop("model_type", None)
    if model_type is None:
        raise ValueError("DWAttConfig: `encoder_config` has no `model_type` (e.g. 'roberta', 'bert', 'mpnet')")
    try:
        return AutoConfig.for_model(model_type, **encoder_config)
    except ValueError:
        # One line, no chained traceback: a checkpoint of a family newer than the running transformers lands here.
        saved = saved_with or encoder_config.get("transformers_version")
        raise ValueError(
            f"DWAttConfig: unknown encoder model_type {model_type!r} in `encoder_config`: transformers "
            f"{transformers.__version__} does not have this backbone family"
            + (f"; the checkpoint was saved with transformers {saved}, which has it" if saved else "")
        ) from None


def with_legacy_rope(config: dict) -> dict:
    """`config` (a backbone config's dict) with its rotary settings also under the keys transformers 4.x reads.
    transformers 5 writes them as `rope_parameters` alone; 4.x reads `rope_theta`, `rope_scaling`,
    `partial_rotary_factor` (and Gemma 3's `rope_local_base_freq`) and, not finding them, runs its default base: another
    model, silently (SmolLM2's base is 1e5, Qwen2.5's 1e6, the default 1e4). 5.x reads `rope_parameters` first, so the
    added keys change nothing there; keys the dict holds already stay as they are."""
    rope = config.get("rope_parameters")
    if not isinstance(rope, dict):
        return config
    full, sliding = rope.get("full_attention", rope), rope.get("sliding_attention")
    legacy = {}
    if isinstance(full, dict) and "rope_theta" in full:
        legacy["rope_theta"] = full["rope_theta"]
        if full.get("rope_type", "default") != "default":
            legacy["rope_scaling"] = {key: value for key, value in full.items() if key != "rope_theta"}
        if "partial_rotary_factor" in full:
            legacy["partial_rotary_factor"] = full["partial_rotary_factor"]
    if isinstance(sliding, dict) and "rope_theta" in sliding:
        legacy["rope_local_base_freq"] = sliding["rope_theta"]
    return legacy | config


class DWAttConfig(PretrainedConfig):
    r"""
    Configuration of a layer-fusion model: a pretrained encoder (the *backbone*) whose per-layer outputs
    z_1..z_L are mixed by a small fusion module before the task head (DWAtt, COLING 2024).

    Args:
        encoder_config (`dict` or `PretrainedConfig`, *optional*):
            The backbone's own configuration (RoBERTa, XLM-RoBERTa, BERT, MPNet, or any encoder whose
            `AutoModel` returns all hidden states). Stored inside `config.json`, so a checkpoint describes
            its backbone completely. Defaults to a RoBERTa-base-shaped config.
        fusion (`str`, *optional*, defaults to `"dwatt"`):
            One of `"dwatt"` (Depth-Wise Attention), `"concat"` (one `Linear(L*d -> d)` over all layers),
            `"base_plus_n"` (n freshly initialised layers of the backbone's own layer class on top of z_L),
            `"base"` (z_L, or the one layer `fused_layers` names), `"scalar_mix"` (softmax-normalised scalar weights
            times gamma, as ELMo), `"scalar_mix_dropout"` (with UDify's layer dropout) and `"scalar_mix_layer_norm"`
            (over layers each normalised per token, as AllenNLP's `do_layer_norm`): `specs_dwatt.FUSION_SPECS`.
        query_bottleneck (`float`, *optional*, defaults to 0.5):
            Width of the DWAtt query MLP's hidden layer, as a fraction of the model width, in (0, 1].
        value_bottleneck (`float`, *optional*, defaults to 0.5):
            Width of each per-layer DWAtt value MLP's hidden layer, as a fraction of the model width, in (0, 1].
        d_pos (`int`, *optional*, defaults to 24):
            Size of the static, untrained layer-position vectors p_n ~ U(0, 1) from which the keys are projected.
        num_extra_layers (`int`, *optional*):
            Layers added by `"base_plus_n"`. Defaults to the paper's choice: 2 for a 24-layer backbone,
            1 for a 12-layer one (`max(1, L // 12)`).
        include_embeddings (`bool`, *optional*, defaults to `False`):
            Whether the embedding output is fused alongside the L layer outputs (the paper leaves it out).
        classifier_dropout (`float`, *optional*):
            Dropout before the classification head; defaults to the backbone's `hidden_dropout_prob`.
        pooling (`str`, *optional*):
            Sequence classification: how the fused tokens become one vector, `"mean"` over the non-padding tokens,
            `"first"` (the first token, `<s>`/`[CLS]`) or `"last"` (the last non-padding token, the only one that
            has seen the whole text in a decoder-only model). Defaults to `"last"` for a decoder-only backbone (as
            transformers' own decoder classifiers pool), `"mean"` otherwise.
        sequence_head (`str`, *optional*):
            Sequence classification: what turns the pooled vector into logits, `"dense_tanh"` (RoBERTa's head: a
            dense layer, tanh, a projection) or `"linear"` (one linear map without a bias, as the decoder LLMs' stock
            classifiers score). Defaults to `"linear"` for a decoder read through its final norm
            (`through_final_norm`), whose head on one layer is then the stock `<Family>ForSequenceClassification`,
            and to `"dense_tanh"` otherwise.
        fused_layers (`str` or `list[int]`, *optional*, defaults to `"all"`):
            Which backbone layers the fusion mixes: `"all"` (the paper), `"every:k"`, a range `"a-b"` or a list of
            layer numbers (1..L); the last layer is included, unless the spec starts with `"only:"` (`"only:9-13"`:
            those layers alone, the deepest of them where the others read z_L, and the backbone runs no deeper).
            Fewer layers make a smaller fusion and a smaller feature cache on a deep backbone. For `"base"`, one
            layer number k: the head reads layer k alone (a probe of that layer; default: the last; 0: the embedding
            output, the probe's floor).
        backbone_name_or_path (`str`, *optional*):
            Where the backbone's pretrained weights came from (a Hub id or a local folder); recorded by
            `from_backbone` so that a checkpoint says what it was trained on.
        backbone_revision (`str`, *optional*):
            The backbone's revision (branch, tag or commit hash), when known.
        lora (`dict`, *optional*):
            Set when the backbone was adapted with low-rank updates (LoRA) rather than frozen or fine-tuned: `rank`,
            `alpha` (the update is `(alpha / rank) * B @ A`), `targets` (the names of the backbone's linear layers
            that carry one) and `dropout`; `merged` says whether the backbone weights of this checkpoint already
            include the updates (a full save) or the updates travel beside the head (a head-only save, merged into
            the backbone when loaded).
        backbone_depth (`int`, *optional*):
            How many of the backbone's L layers the model holds and runs. Defaults to the deepest layer its fusion
            reads (`run_depth`): a head on layer k of L runs layers 1..k only, and its checkpoint stores only those.
            Set it (k..L) to keep deeper layers, as a model whose cache feeds heads on deeper layers does.
        heads_only (`bool`, *optional*, defaults to `False`):
            Set in the config of a head-only checkpoint, whose weights file holds no backbone tensor: loading it
            fetches the backbone from `backbone_name_or_path`.
        layer_dropout (`float`, *optional*, defaults to 0.1):
            `scalar_mix_dropout`: the probability that a layer's scalar is dropped from the softmax in training
            (UDify's 0.1).
        through_final_norm (`bool`, *optional*, defaults to `False`):
            Read every hidden state through the norm the backbone applies after its last layer (decoder LLMs'
            `norm`, GPT-2's `ln_f`, ModernBERT's `final_norm`), as the family's own task classes read the last one.
            A head on layer k of a decoder then computes what the stock `<Family>ForTokenClassification` cut to k
            layers computes, so that it exports as one (`dwatt export --format transformers`). Without it a
            decoder's layers are read as they leave the layer, the last one as the backbone returns it (normed).
        word_readout (`str`, *optional*, defaults to `"first"`):
            Token classification: which vector of each word its tag is read from, in every layer the fusion reads
            (`specs_dwatt.WORD_READOUTS`): `"first"` (the state at the word's first sub-token), `"last"` (at its last
            sub-token: in a causal decoder the first position that has seen the whole word), `"mean"` (the mean over
            its sub-tokens), `"echo-last"` and `"echo-mean"` (the input given twice, the word read in the second
            copy, where a causal decoder has seen the whole sentence). All but `"first"` need the `word_ids` input
            (each token's word, -1 for none), which the tokenizer's `word_ids()` gives; the `echo-` ones need the input
            repeated as `dwatt.tokenization.encode_words` repeats it.

    Example:

    ```python
    >>> from transformers import RobertaConfig
    >>> from configuration_dwatt import DWAttConfig
    >>> config = DWAttConfig(encoder_config=RobertaConfig(num_hidden_layers=24, hidden_size=1024), fusion="dwatt")
    >>> config.num_fused_layers
    24
    ```
    """

    model_type = "dwatt"
    sub_configs = {"encoder_config": AutoConfig}

    def __init__(
        self,
        encoder_config: dict | PretrainedConfig | None = None,
        fusion: str = "dwatt",
        query_bottleneck: float = 0.5,
        value_bottleneck: float = 0.5,
        d_pos: int = 24,
        num_extra_layers: int | None = None,
        include_embeddings: bool = False,
        classifier_dropout: float | None = None,
        pooling: str | None = None,
        sequence_head: str | None = None,
        fused_layers: str | list[int] = "all",
        backbone_name_or_path: str | None = None,
        backbone_revision: str | None = None,
        lora: dict | None = None,
        heads_only: bool = False,
        backbone_depth: int | None = None,
        layer_dropout: float = 0.1,
        through_final_norm: bool = False,
        word_readout: str = "first",
        **kwargs,
    ):
        self.encoder_config = _as_encoder_config(encoder_config, kwargs.get("transformers_version"))
        self.fusion = fusion
        self.query_bottleneck = query_bottleneck
        self.value_bottleneck = value_bottleneck
        self.d_pos = d_pos
        if num_extra_layers is None:
            num_extra_layers = max(1, self.encoder_config.num_hidden_layers // 12)
        self.num_extra_layers = num_extra_layers
        self.include_embeddings = include_embeddings
        self.classifier_dropout = classifier_dropout
        self.pooling = pooling or ("last" if is_decoder_only(self.encoder_config) else "mean")
        self.fused_layers = fused_layers
        self.backbone_name_or_path = backbone_name_or_path
        self.backbone_revision = backbone_revision
        self.lora = dict(lora) if lora else None
        self.heads_only = heads_only
        self.backbone_depth = backbone_depth
        self.layer_dropout = layer_dropout
        self.through_final_norm = through_final_norm
        self.word_readout = word_readout
        decoder_read_normed = through_final_norm is True and is_decoder_only(self.encoder_config)
        self.sequence_head = sequence_head or ("linear" if decoder_read_normed else "dense_tanh")
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
        self.validate_fusion()

    def validate_fusion(self) -> None:
        """Raises `ValueError` naming the offending key when a fusion hyper-parameter is out of range."""
        try:
            spec = fusion_spec(self.fusion)
        except ValueError as error:
            raise ValueError(f"DWAttConfig: {error}") from None
        for key in ("query_bottleneck", "value_bottleneck"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"DWAttConfig: `{key}` must be a number in (0, 1], got {value!r}")
        for key, minimum in (("d_pos", 1), ("num_extra_layers", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"DWAttConfig: `{key}` must be an integer >= {minimum}, got {value!r}")
        if not isinstance(self.through_final_norm, bool):
            raise ValueError(
                f"DWAttConfig: `through_final_norm` must be True or False, got {self.through_final_norm!r}"
            )
        if self.classifier_dropout is not None and not 0 <= self.classifier_dropout < 1:
            raise ValueError(f"DWAttConfig: `classifier_dropout` must be in [0, 1), got {self.classifier_dropout!r}")
        if self.lora is not None:
            self.validate_lora()
        if self.pooling not in POOLINGS:
            raise ValueError(f"DWAttConfig: unknown pooling {self.pooling!r}; expected one of {', '.join(POOLINGS)}")
        if self.word_readout not in WORD_READOUTS:
            raise ValueError(
                f"DWAttConfig: unknown word_readout {self.word_readout!r}; expected one of {', '.join(WORD_READOUTS)}"
            )
        if self.sequence_head not in SEQUENCE_HEADS:
            raise ValueError(
                f"DWAttConfig: unknown sequence_head {self.sequence_head!r}; expected one of {', '.join(SEQUENCE_HEADS)}"
            )
        if isinstance(getattr(self.encoder_config, "num_hidden_layers", None), int):
            parse_fused_layers(  # raises on a bad spec
                self.fused_layers, self.encoder_config.num_hidden_layers, lowest=spec.lowest_layer
            )
            spec.check_config(self)
            self.validate_backbone_depth()
        for key in ("hidden_size", "num_hidden_layers"):
            if not isinstance(getattr(self.encoder_config, key, None), int):
                raise ValueError(
                    f"DWAttConfig: the {self.encoder_config.model_type!r} encoder config has no integer `{key}`; "
                    "DWAtt needs an encoder that returns one hidden state per layer"
                )

    def validate_backbone_depth(self) -> None:
        depth, deepest = self.backbone_depth, self.deepest_read_layer
        if depth is None:
            return
        total = self.encoder_config.num_hidden_layers
        if isinstance(depth, bool) or not isinstance(depth, int) or not deepest <= depth <= total:
            raise ValueError(
                f"DWAttConfig: `backbone_depth` must be an integer from {deepest} (the deepest layer the "
                f"{self.fusion!r} fusion reads) to {total} (the backbone's layers), got {depth!r}"
            )

    def validate_lora(self) -> None:
        lora = self.lora
        for key, valid, what in (
            ("rank", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1"),
            ("alpha", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "a number > 0"),
            (
                "targets",
                lambda v: isinstance(v, (list, tuple)) and v and all(isinstance(t, str) and t for t in v),
                "a non-empty list of layer names",
            ),
            ("dropout", lambda v: isinstance(v, (int, float)) and 0 <= v < 1, "a number in [0, 1)"),
        ):
            if key not in lora or not valid(lora[key]):
                raise ValueError(f"DWAttConfig: `lora['{key}']` must be {what}, got {lora.get(key)!r}")
        lora["targets"] = list(lora["targets"])
        lora.setdefault("merged", False)

    @property
    def fusion_spec(self) -> FusionSpec:
        """What the configured fusion is and reads (`specs_dwatt.FUSION_SPECS`)."""
        return fusion_spec(self.fusion)

    @property
    def fused_layer_numbers(self) -> list[int]:
        """The backbone layers (1..L; 0, the embedding output, for a head on one layer) `fused_layers` names,
        ascending (L last but for `"only:..."`)."""
        return parse_fused_layers(
            self.fused_layers, self.encoder_config.num_hidden_layers, lowest=self.fusion_spec.lowest_layer
        )

    @property
    def single_fused_layer(self) -> int | None:
        """The one layer `fused_layers` names, if it names exactly one (a number, not a range or a list)."""
        return single_layer(self.fused_layers)

    @property
    def read_layer(self) -> int:
        """The hidden state the 'base' head reads: the one layer `fused_layers` names (0: the embedding output), or
        the last, L."""
        layer = single_layer(self.fused_layers)
        return self.encoder_config.num_hidden_layers if layer is None else layer

    @property
    def deepest_read_layer(self) -> int:
        """The deepest backbone layer (1..L) the fusion reads; 1 for a head on the embedding output, whose backbone
        keeps its first layer (a family's layer hooks need one)."""
        return layers_to_run(self.fusion_spec.read_layers(self))

    @property
    def run_depth(self) -> int:
        """How many backbone layers the model holds and runs: `backbone_depth`, else the deepest layer it reads."""
        return self.backbone_depth if self.backbone_depth is not None else self.deepest_read_layer

    @property
    def num_fused_layers(self) -> int:
        """How many layer outputs the fusion module mixes (the fused layers, plus the embedding output with
        `include_embeddings`)."""
        return len(self.fused_layer_numbers) + int(self.include_embeddings)

    @property
    def word_pooling(self) -> str:
        """How a word's sub-token states become its vector: `"first"`, `"last"` or `"mean"` (`word_readout` without
        its `echo-`)."""
        return word_readout_parts(self.word_readout)[1]

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        if isinstance(output.get("encoder_config"), PretrainedConfig):  # older transformers keep it as an object
            output["encoder_config"] = output["encoder_config"].to_dict()
        if isinstance(output.get("encoder_config"), dict):  # a checkpoint saved by 5.x, read by 4.x, runs its backbone
            output["encoder_config"] = with_legacy_rope(output["encoder_config"])
        return output


DWAttConfig.register_for_auto_class()

__all__ = [
    "DWAttConfig",
    "FUSIONS",
    "POOLINGS",
    "WORD_READOUTS",
    "is_decoder_only",
    "parse_fused_layers",
    "single_layer",
    "with_legacy_rope",
]
