"""A token classifier whose fusion and head are one linear map of each token's layers (Concat's projection and its
classifier), evaluated as that map on cached features (`FoldedConcat`), and what the engines ask to know a model's head
is one linear map of each fused token (`linear_token_classifier`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call

from modeling_dwatt import DWAttForTokenClassification

LAYERS_INPUT = "backbone_hidden_states"
"""The model's input of cached layers, `(batch, layers, seq, hidden)`, as a feature cache's batches carry them."""


def linear_token_classifier(model: torch.nn.Module) -> bool:
    """Whether `model` is the token classifier whose head is one linear map of each fused token after dropout
    (`DWAttForTokenClassification.classifier_parameters`), not a subclass with a head of its own."""
    return isinstance(model, DWAttForTokenClassification) and type(model).head is DWAttForTokenClassification.head


class _TokenLinearMap(torch.nn.Module):
    """`model.token_linear_map()` as a module's forward, so that `functional_call` runs it with a copy's weights."""

    def __init__(self, model: DWAttForTokenClassification):
        super().__init__()
        self.model = model

    def forward(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.model.token_linear_map()


class FoldedConcat:
    """
    The eval pass of a token classifier fed a feature cache whose fusion is linear (Concat), as one linear map per
    token (`DWAttForTokenClassification.token_linear_map`): its classifier after its projection,
    C(Px + p) + c = (CP)x + (Cp + c) (dropout is off in eval). A token then costs layers x hidden x
    labels products instead of layers x hidden x hidden: on a 28 x 1536 LLM with CoNLL-03's 9 tags, 170 times fewer,
    where the dev pass after each epoch was half of a copy's training time. Reads the positions the model reads and
    leaves the others' logits zero, as the model does; equal to its logits up to float rounding
    (tests/test_stacked_heads.py).
    """

    @staticmethod
    def fits(model: torch.nn.Module, batch: dict) -> bool:
        return linear_token_classifier(model) and model.dwatt.fusion.linear_map() is not None and LAYERS_INPUT in batch

    @staticmethod
    @torch.no_grad()
    def fold(
        model: torch.nn.Module, parameters: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The map's weight `(labels, layers x hidden)` and bias `(labels,)`, from `model`'s head with `parameters` (a
        copy's trainable tensors, by name) in place of its own where given. Made once per eval pass: on a 28 x 1536
        LLM the product alone is 0.6 G multiply-adds, more than a batch of the map costs."""

        if not parameters:
            return model.token_linear_map()
        return functional_call(_TokenLinearMap(model), {f"model.{name}": t for name, t in parameters.items()}, ())

    @staticmethod
    def logits(model: torch.nn.Module, batch: dict, folded: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """`(batch, seq, labels)` logits of `model` in eval mode on a cached `batch`, through its `fold`."""
        weight, bias = folded
        layers = model.dwatt.select_layers(batch[LAYERS_INPUT])  # (batch, layers, seq, hidden)
        tokens = layers.transpose(1, 2)  # each token's layers side by side, as the projection reads them
        positions = model.fused_positions(
            batch.get("labels"), batch.get("attention_mask"), tokens.shape[:2], tokens.device, batch.get("logits_mask")
        )
        if positions is None:
            return F.linear(tokens.flatten(2).to(weight.dtype), weight, bias)
        selected = F.linear(tokens[positions].flatten(1).to(weight.dtype), weight, bias)
        return selected.new_zeros(*positions.shape, selected.shape[-1]).index_put((positions,), selected)


__all__ = ["LAYERS_INPUT", "FoldedConcat", "linear_token_classifier"]
