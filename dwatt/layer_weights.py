"""What DWAtt attends to: its learned weights over the layers, averaged per gold entity type.

The paper does not show these; they answer which depths a trained fusion reads for persons, places, or `O`
tokens. Only fusions that weigh layers (DWAtt per token, ScalarMix globally) have them.
"""

from __future__ import annotations

import torch

from specs_dwatt import FUSION_SPECS


def has_layer_weights(model) -> bool:
    return model.config.fusion_spec.weighs_layers


def entity_type(label: str) -> str:
    """`B-PER`, `I-PER` (and IOBES's `E-PER`, `S-PER`) are `PER`; `O` and plain tags stay as they are."""
    return label.split("-", 1)[1] if label[:2] in ("B-", "I-", "E-", "S-") else label


@torch.no_grad()
def layer_weights_by_type(model, dataset, collator, label_names: list[str], batch_size: int = 64) -> dict:
    """
    Mean layer weights (one value per fused layer, summing to 1) over the labelled positions of `dataset`, per
    gold entity type, plus the number of positions behind each mean. `dataset` yields model inputs with `labels`
    (tokenised rows or `FeatureCache` items) and `collator` batches them.
    """
    if not has_layer_weights(model):
        weighing = [name for name, spec in FUSION_SPECS.items() if spec.weighs_layers]
        raise ValueError(f"fusion {model.config.fusion!r} has no layer weights; only {' and '.join(weighing)} do")
    types = [entity_type(name) for name in label_names]
    names = list(dict.fromkeys(types))
    type_of_label = torch.tensor([names.index(t) for t in types])
    sums = None
    counts = torch.zeros(len(names), dtype=torch.long)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    for start in range(0, len(dataset), batch_size):
        batch = collator([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        labels = batch.pop("labels")
        batch = {key: value.to(device) for key, value in batch.items()}
        weights = model(**batch, output_layer_weights=True).layer_weights.float().cpu()
        scored = labels != -100
        groups = type_of_label[labels[scored]]
        if sums is None:
            sums = torch.zeros(len(names), weights.shape[-1], dtype=torch.float64)
        sums.index_add_(0, groups, weights[scored].double())
        counts += torch.bincount(groups, minlength=len(names))
    model.train(was_training)
    return {
        "layers": model.dwatt.fused_layer_indices,
        "by_type": {name: (sums[i] / counts[i]).tolist() for i, name in enumerate(names) if counts[i] > 0},
        "positions": {name: int(counts[i]) for i, name in enumerate(names) if counts[i] > 0},
    }
