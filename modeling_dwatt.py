# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""PyTorch DWAtt: layer fusion over a pretrained encoder (Depth-Wise Attention, COLING 2024).

A pretrained encoder computes layer outputs z_1..z_L; a small fusion module mixes them into one representation per
token, which feeds a token-classification, masked-LM or sequence-classification head. This file holds the task
models; what they are made of sits beside it, one concept per file, and travels with it inside every DWAtt checkpoint
(`trust_remote_code=True`): `specs_dwatt.py` (what a config may choose), `configuration_dwatt.py` (the config),
`backbones_dwatt.py` (backbone families), `depth_dwatt.py` (how deep the backbone runs), `fusions_dwatt.py` (the
fusions), `lora_dwatt.py` (LoRA in plain torch), `base_model_dwatt.py` (the backbone and its fusion: `DWAttModel`) and
`pretrained_dwatt.py` (pretrained backbones and head-only checkpoints). Each imports only torch and transformers (the
specs, the standard library only).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_outputs import ModelOutput

try:
    from .backbones_dwatt import backbone_family, classifier_dropout, is_decoder_only, layer_norm_eps
    from .base_model_dwatt import (
        DWAttMaskedLMOutput,
        DWAttModel,
        DWAttPreTrainedModel,
        DWAttSequenceClassifierOutput,
        DWAttTokenClassifierOutput,
        only_at,
        traced,
    )
    from .configuration_dwatt import DWAttConfig
    from .pretrained_dwatt import (
        PretrainedBackbone,
        adopt_masked_lm_head,
        build_on_backbone,
        head_only_state_dict,
        load_pretrained_backbone,
        save_checkpoint,
    )
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from backbones_dwatt import backbone_family, classifier_dropout, is_decoder_only, layer_norm_eps
        from base_model_dwatt import (
            DWAttMaskedLMOutput,
            DWAttModel,
            DWAttPreTrainedModel,
            DWAttSequenceClassifierOutput,
            DWAttTokenClassifierOutput,
            only_at,
            traced,
        )
        from configuration_dwatt import DWAttConfig
        from pretrained_dwatt import (
            PretrainedBackbone,
            adopt_masked_lm_head,
            build_on_backbone,
            head_only_state_dict,
            load_pretrained_backbone,
            save_checkpoint,
        )
    except ImportError as error:
        raise ImportError(f"{__name__} needs the other *_dwatt.py files beside it") from error

# transformers copies into its module cache the files that a local checkpoint's models file imports itself, not the
# files that those import (4.46 to 5.0 at least): the models file names every sibling, so that each is copied.
try:
    from .depth_dwatt import BackboneRunner  # noqa: F401
    from .fusions_dwatt import LayerFusion  # noqa: F401
    from .lora_dwatt import LoRAUpdates  # noqa: F401
    from .specs_dwatt import FUSION_SPECS  # noqa: F401
except ImportError:  # the installed project: its modules are imported as the models import them
    pass


def mean_over_items(summed: torch.Tensor, targets: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """A summed loss over the labelled items (targets not -100) of this batch or, under data parallelism, of the
    global batch (`num_items_in_batch`); 0, not NaN, for a batch with none (an MLM batch with no mask)."""
    count = (targets != -100).sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch)
    return summed / count.to(summed.device).clamp(min=1)


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


class _DWAttWithHead(DWAttPreTrainedModel):
    """What the task models share: `self.dwatt` (backbone + fusion), FE freezing, `from_backbone`, head-only saving,
    `forward`."""

    output_class: type[ModelOutput] = ModelOutput
    has_task_head = True
    # Training speed switch: with labels, fuse only the labelled positions (the loss reads nothing else); logits at
    # positions labelled -100 are then not meaningful. Off by default; the training pipeline turns it on.
    fuse_labelled_positions_only: bool = False

    from_backbone = classmethod(build_on_backbone)  # a pretrained backbone, a fresh fusion and head

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the fusion and head, which compute the outputs; a backbone kept in bf16 or fp16 (as saved, or
        `backbone_dtype`) hands them its features cast to it. `save_pretrained` records it as the config's `dtype`:
        the checkpoint then loads in it (its backbone too, unless a `dtype` is asked) in every transformers release."""
        return next((p.dtype for p in self.head_parameters().values() if p.is_floating_point()), super().dtype)

    def save_pretrained(self, save_directory, *args, heads_only: bool = False, **kwargs):
        """
        `PreTrainedModel.save_pretrained`, plus `heads_only=True`: write the config (which names the backbone by
        `backbone_name_or_path` and `backbone_revision`), the remote-code files and only [`head_state_dict`]'s
        tensors, like an adapter. `from_pretrained` on such a folder loads the named backbone (or the one passed as
        `backbone_name_or_path=`) and applies the head. A model with LoRA adapters saves whole with each update
        merged into its layer's weight. The model's own config is never changed.
        """
        return save_checkpoint(self, super().save_pretrained, save_directory, *args, heads_only=heads_only, **kwargs)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """
        What a head-only checkpoint stores: everything but the backbone (fusion module, extra layers, task head);
        for masked LM the vocabulary head only if it trains (otherwise it is the backbone's pretrained one); with
        LoRA, the low-rank updates of the adapted backbone layers (`dwatt.lora.updates.<path>.lora_A`/`lora_B`).
        """
        return head_only_state_dict(self)

    def head_parameters(self) -> dict[str, nn.Parameter]:
        """The parameters of everything but the backbone (the fusion, its extra layers, the task head), by name: what
        trains in the FE setting, and what copies of the head are made of. The one place that tells the head from
        the backbone, by the modules themselves."""
        backbone = {id(parameter) for parameter in self.dwatt.backbone.parameters()}
        return {name: parameter for name, parameter in self.named_parameters() if id(parameter) not in backbone}

    def head_buffers(self) -> dict[str, torch.Tensor]:
        """The buffers of everything but the backbone, by name (DWAtt's static layer positions)."""
        backbone = {id(buffer) for buffer in self.dwatt.backbone.buffers()}
        return {name: buffer for name, buffer in self.named_buffers() if id(buffer) not in backbone}

    def head_state(self) -> dict[str, torch.Tensor]:
        """The `state_dict` entries of everything but the backbone, detached: what a head is, to keep or to load."""
        backbone = {id(tensor) for tensor in self.dwatt.backbone.state_dict(keep_vars=True).values()}
        state = self.state_dict(keep_vars=True)
        return {key: tensor.detach() for key, tensor in state.items() if id(tensor) not in backbone}

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
        word_ids: torch.LongTensor | None = None,
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
        word_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Each token's word, for a `config.word_readout` that pools sub-tokens: see [`DWAttModel.forward`].
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
            word_ids=word_ids,
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
    reads_words = True

    def __init__(self, config: DWAttConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dwatt = DWAttModel(config)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.encoder_config.hidden_size, config.num_labels)
        self.post_init()

    def head(self, fused: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        return self.per_position(lambda vectors: self.classifier(self.dropout(vectors)), fused, positions)

    def classifier_parameters(self) -> tuple[nn.Parameter, nn.Parameter]:
        """The weight `(labels, hidden)` and bias `(labels,)` of the head, one linear map of each fused token after
        dropout."""
        return self.classifier.weight, self.classifier.bias

    def token_linear_map(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The weight `(labels, layers x hidden)` and bias `(labels,)` of the one affine map from each token's fused
        layers side by side (as `DWAttModel.select_layers` gives them) to its logits in eval mode, where the fusion is
        one (`LayerFusion.linear_map`): the classifier after the fusion, C(Px + p) + c = (CP)x + (Cp + c). None for
        the other fusions."""
        fused = self.dwatt.fusion.linear_map()
        if fused is None:
            return None
        weight, bias = fused
        classifier, classifier_bias = (tensor.to(weight.dtype) for tensor in self.classifier_parameters())
        return classifier @ weight, classifier @ bias + classifier_bias


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
    def load_pretrained_backbone(
        cls, name_or_path: str, load_kwargs: dict, depth=None, dtype=None
    ) -> PretrainedBackbone:
        return load_pretrained_backbone(name_or_path, load_kwargs, depth, dtype, masked_lm_head=True)

    def adopt_pretrained_head(self, pretrained: PretrainedBackbone) -> None:
        adopt_masked_lm_head(self.lm_head, pretrained.model)

    def adoptable_head_keys(self) -> set[str]:
        return {f"lm_head.{key}" for key in self.lm_head.state_dict()}


class DWAttForSequenceClassification(_DWAttWithHead):
    """
    DWAtt layer fusion over a pretrained encoder for sentence (or sentence-pair) classification and regression.
    The fusion runs per token as for NER; the fused tokens are then pooled into one vector (`config.pooling`:
    `"mean"` over the non-padding tokens, `"first"`, or `"last"`, the last non-padding token, as transformers' decoder
    classifiers pool), and the head (`config.sequence_head`: RoBERTa's dense layer, tanh and projection, with dropout
    before each, or one linear map without a bias, as decoder LLMs' stock classifiers score) gives `num_labels`
    logits. `config.problem_type` follows transformers:
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
        if config.sequence_head == "linear":
            self.score = nn.Linear(hidden, config.num_labels, bias=False)
        else:
            self.dense = nn.Linear(hidden, hidden)
            self.out_proj = nn.Linear(hidden, config.num_labels)
        self.post_init()

    def head_linear_maps(self) -> list[nn.Linear]:
        """The head's linear maps in the order it applies them to the pooled vector: the dense layer and the
        projection (tanh between them), or the one map without a bias. What a stock classifier must hold to compute
        this head (`dwatt export --format transformers`)."""
        return [self.score] if self.config.sequence_head == "linear" else [self.dense, self.out_proj]

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
        if self.config.sequence_head == "dense_tanh":
            pooled = torch.tanh(self.dense(self.dropout(pooled)))
        return self.head_linear_maps()[-1](self.dropout(pooled))

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
# classes with transformers' Auto classes in a process is dwatt's one job (`dwatt.auto.register_auto_classes`).
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
