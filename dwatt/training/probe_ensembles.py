"""Probe ensembles: a method that needs no single layer chosen, built from the heads a probe has already trained.

A probe trains one head per layer and learning rate (`run_together`). The ensemble of size k takes, for every layer,
the head its dev score chose (its learning rate and epoch), ranks the layers by that score, and averages the class
probabilities of the k best layers' heads: what it reports is the test score of that average, never a score it
chose on. Made once on the dev split the runs were scored on and, where the group made one, once on each trial's
few-shot dev sample (every member then chosen there too). It costs scoring only: no head trains again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.utils.data import DataLoader

from ..data.targets import decided_by_probabilities, probabilities
from ..folding import FoldedConcat
from ..head_stack import one_layer
from ..schema import ENSEMBLE_SIZES, ranked_members


@torch.no_grad()
def predict_features(model, dataset, collator, batch_size: int = 32, layer: int | None = None):
    """`model`'s logits on a tokenised or cached eval set, batch by batch, and the labels; a head on one layer fed
    the cached `layer` of the stack, for probes."""

    model.eval()
    device = next(model.parameters()).device
    logits, labels, folded = [], [], None
    for batch in DataLoader(dataset, batch_size=batch_size, collate_fn=collator):
        batch = one_layer({key: value.to(device) for key, value in batch.items()}, layer)
        if FoldedConcat.fits(model, batch):
            folded = FoldedConcat.fold(model) if folded is None else folded
            output = FoldedConcat.logits(model, batch, folded)
        else:
            output = model(**batch).logits
        logits.append(output.float().cpu())
        labels.append(batch["labels"].cpu())
    return logits, labels


class ProbeEnsembles:
    """Scores averages of a probe's heads (copy `k` of `layers[k]` with weights `state_of(k, chosen_on)`) on the dev
    and test sets, each head's probabilities computed once."""

    def __init__(
        self,
        model,
        collator,
        layers: Sequence[int],
        cache_positions: Sequence[int],
        state_of: Callable[[int, str], dict],
    ):
        self.model, self.collator, self.layers, self.positions, self.state_of = (
            model,
            collator,
            layers,
            cache_positions,
            state_of,
        )
        self.probabilities: dict[tuple, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}

    def _probabilities(self, k: int, chosen_on: str, split: str, dataset):
        key = (k, chosen_on, split)
        if key not in self.probabilities:
            self.model.load_state_dict(self.state_of(k, chosen_on), strict=False)
            logits, labels = predict_features(self.model, dataset, self.collator, layer=self.positions[k])
            problem_type = getattr(self.model.config, "problem_type", None)
            self.probabilities[key] = [probabilities(batch, problem_type) for batch in logits], labels
        return self.probabilities[key]

    def predicted_ids(self, members: Sequence[int], chosen_on: str, split: str, dataset):
        """What the members' mean probabilities decide (the arg-max; multi-label: those above 0.5; regression: the
        mean value), batch by batch, and the labels."""
        each = [self._probabilities(k, chosen_on, split, dataset) for k in members]
        labels, problem_type = each[0][1], getattr(self.model.config, "problem_type", None)
        predicted = [
            decided_by_probabilities(torch.stack([member[b] for member, _ in each]).mean(0), problem_type)
            for b in range(len(labels))
        ]
        return predicted, labels


def probe_ensembles(
    ensembles: ProbeEnsembles,
    learning_rates: Sequence[float],
    outcomes,
    dev_set,
    dev_metrics,
    test: tuple,
    metric: str,
    sample: dict | None,
) -> list[dict]:
    """
    For each size in `ENSEMBLE_SIZES` no larger than the number of layers probed: the ensemble chosen on dev (its
    members, its dev score `best_<metric>`, its `test_scores`) and, where `sample` says how the group scored its
    few-shot dev sample (`size`, `seed`, `items`), `few_shot_dev`: the ensemble whose members were all chosen there,
    its score on that sample and its test scores. `outcomes` are the probe's copies (`BudgetOutcome`), in the order of
    `ensembles.layers`; `test` is the test set and its scorer.
    """
    test_set, test_metrics = test

    def member(k: int, best: dict, key: str) -> dict:
        return {
            "layer": ensembles.layers[k],
            "learning_rate": learning_rates[k],
            "epoch": best["epoch"],
            key: best[key],
        }

    def chosen(members: list[int], chosen_on: str, best_key: str) -> dict:
        dev_ids, dev_labels = ensembles.predicted_ids(members, chosen_on, "dev", dev_set)
        dev = (
            dev_metrics.score_ids(dev_ids, dev_labels)
            if sample is None or chosen_on == "dev"
            else dev_metrics.score_sample(dev_ids, dev_labels, sample["size"], sample["seed"])
        )
        test_ids, test_labels = ensembles.predicted_ids(members, chosen_on, "test", test_set)
        best = lambda k: outcomes[k].best if chosen_on == "dev" else outcomes[k].sample_best
        return {
            "members": [member(k, best(k), best_key) for k in members],
            f"best_{metric}": dev[metric],
            "test_scores": test_metrics.score_ids(test_ids, test_labels),
        }

    on_dev = ranked_members(ensembles.layers, [o.best[metric] if o.best else None for o in outcomes])
    on_sample = (
        ranked_members(
            ensembles.layers, [o.sample_best[f"sample_{metric}"] if o.sample_best else None for o in outcomes]
        )
        if sample is not None
        else None
    )
    results = []
    for size in ENSEMBLE_SIZES:
        if size > len(on_dev):
            continue
        entry = {
            "size": size,
            **chosen(on_dev[:size], "dev", metric),
            "candidates": {"layers": sorted(set(ensembles.layers)), "learning_rates": sorted(set(learning_rates))},
        }
        if on_sample is not None and size <= len(on_sample):
            entry["few_shot_dev"] = {
                sample["items"]: sample["size"],
                "seed": sample["seed"],
                **chosen(on_sample[:size], "few_shot_dev", f"sample_{metric}"),
            }
        results.append(entry)
    return results


__all__ = [
    "ProbeEnsembles",
    "predict_features",
    "probe_ensembles",
]
