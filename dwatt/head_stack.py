"""Copies of one head's trainable parameters held stacked (`StackedHeads`: one tensor per parameter, the copies on its
first axis), run together on a batch, each copy on its own layer of a cached stack where it names one: batched under
`torch.func.vmap` (every copy gets the dropout masks a lone run draws) or one copy after the other with the random
state restored in between. Training (`dwatt.stacked_heads.train_heads`) and serving (`dwatt.serving.shared_heads`:
several checkpoints of one architecture on one backbone, `StackedHeads.of_models`) use it alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.func import functional_call, vmap

from .data.targets import decided
from .features.memory import FreedMemoryRelease
from .folding import LAYERS_INPUT, FoldedConcat


def _to(batch: dict, device: torch.device) -> dict:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def _batches(dataset, collator, order: Sequence[int], batch_size: int):
    for start in range(0, len(order), batch_size):
        yield collator([dataset[i] for i in order[start : start + batch_size]])


def _rng_state(device: torch.device):
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def one_layer(batch: dict, layer: int | None) -> dict:
    """`batch` with only the cached `layer` of its stack (a head on one layer, fed the whole cache), or as it is."""
    return batch if layer is None else {**batch, LAYERS_INPUT: batch[LAYERS_INPUT][:, layer : layer + 1]}


def head_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A task model's own parameters and buffers: everything but its backbone's."""
    return model.head_parameters() | model.head_buffers()


class StackedHeads:
    """The trainable parameters of `model`, one copy per head, held stacked: one tensor per parameter whose first axis
    is the copy. Runs `model` with any subset of the copies (each on its own layer of the cached stack where `layers`
    names one), either all at once (`vectorize`: `torch.func.vmap` over the stacked tensors, so each of the head's
    products is one batched product over the copies) or one copy after the other."""

    def __init__(
        self, model: torch.nn.Module, copies: int, vectorize: bool, layers: Sequence[int | None] | None = None
    ):
        self.model, self.vectorize = model, vectorize
        # what the head's logits decide (`decided`): a text task's, as its config names it; arg-max for token tasks
        self.problem_type = getattr(model.config, "problem_type", None)
        self.layers = list(layers) if layers is not None else [None] * copies
        if len(self.layers) != copies:
            raise ValueError(f"{copies} copies but {len(self.layers)} layers")
        if len({layer is None for layer in self.layers}) > 1:
            raise ValueError("either every copy reads one layer of the stack, or none does")
        start = {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}
        if not start:
            raise ValueError("the model has no trainable parameter (is the whole model frozen?)")
        self.parameters = {
            name: t.unsqueeze(0).repeat(copies, *[1] * t.dim()).requires_grad_() for name, t in start.items()
        }

    @classmethod
    def of_models(cls, models: Sequence[torch.nn.Module], vectorize: bool) -> StackedHeads:
        """Copies that already hold their weights, for inference: the trainable parameters and the buffers of the
        head part of `models` (one architecture and configuration, the backbone frozen and shared), stacked; the first
        model runs them all."""
        heads = cls(models[0], len(models), vectorize)
        own = [head_tensors(model) for model in models]
        with torch.no_grad():
            heads.parameters = {name: torch.stack([tensors[name].detach() for tensors in own]) for name in own[0]}
        return heads

    @torch.no_grad()
    def outputs(self, batch: dict) -> list:
        """Every copy's model output on `batch` (the model in eval mode): one `vmap` over the copies where
        vectorised, else one call per copy."""
        everyone = list(range(len(self.layers)))
        if not self.vectorize:
            return [self._call(self.copy(k), self._input(k, batch)) for k in everyone]
        kind = []

        def fields(out):
            kind.append(type(out))
            return {key: value for key, value in out.items() if value is not None}

        stacked = self._run_all(everyone, batch, fields)
        return [kind[0](**{key: value[k] for key, value in stacked.items()}) for k in everyone]

    def copy(self, k: int) -> dict[str, torch.Tensor]:
        """Copy `k`'s parameters: views into the stacked tensors (gradients flow back into them)."""
        return {name: t[k] for name, t in self.parameters.items()}

    def batches(self, dataset, collator, order: Sequence[int], batch_size: int, device: torch.device):
        """The model's batches of `dataset` in `order`, on `device`."""
        freed = FreedMemoryRelease()  # see `dwatt.linear_probes.LinearProbes.batches`
        for batch in _batches(dataset, collator, order, batch_size):
            yield _to(batch, device)
            freed.release()

    @staticmethod
    def labels(batch: dict) -> torch.Tensor:
        return batch["labels"].cpu()

    def _call(self, parameters: dict, batch: dict):
        # tie_weights=False: the copies hold trainable head tensors only, which no other tensor is tied to, and
        # working the ties out walks every module of the backbone on each call
        return functional_call(self.model, parameters, (), batch, tie_weights=False)

    def _input(self, k: int, batch: dict) -> dict:
        return one_layer(batch, self.layers[k])

    def _active(self, active: list[int]) -> dict[str, torch.Tensor]:
        if active == list(range(len(self.layers))):
            return self.parameters
        index = torch.tensor(active, device=next(iter(self.parameters.values())).device)
        return {name: t.index_select(0, index) for name, t in self.parameters.items()}

    def _run_all(self, active: list[int], batch: dict, output, randomness: str = "error") -> torch.Tensor:
        """`output(model output)` of each active copy, stacked: one vmap over the copies (and over their layers of
        the stack, for probes)."""
        stacked = self._active(active)
        if self.layers[active[0]] is None:
            return vmap(lambda p: output(self._call(p, batch)), randomness=randomness)(stacked)
        chosen = batch[LAYERS_INPUT][:, [self.layers[k] for k in active]].unsqueeze(
            2
        )  # (batch, copies, 1, seq, hidden)
        rest = {key: value for key, value in batch.items() if key != LAYERS_INPUT}
        return vmap(
            lambda p, layer: output(self._call(p, {**rest, LAYERS_INPUT: layer})),
            in_dims=(0, 1),
            randomness=randomness,
        )(stacked, chosen)

    def losses(self, active: list[int], batch: dict) -> torch.Tensor:
        """Training losses of the `active` copies on one batch, each with the dropout masks of a lone run."""
        if self.vectorize:
            return self._run_all(active, batch, lambda out: out.loss, randomness="same")
        device = batch["labels"].device
        state, losses = _rng_state(device), []
        for k in active:
            _set_rng_state(state, device)
            losses.append(self._call(self.copy(k), self._input(k, batch)).loss)
        return torch.stack(losses)

    def predictor(self, active: list[int]) -> Callable[[dict], torch.Tensor]:
        """Decisions (`decided`: arg-max label ids `(copies, batch, seq)`, ...) of the `active` copies on each batch of one eval pass (model in eval
        mode), their weights held still meanwhile: a Concat head's folded maps (`FoldedConcat.fold`) are made on the
        pass's first batch and kept for the others."""
        folds: list[tuple[torch.Tensor, torch.Tensor]] = []

        @torch.no_grad()
        def predicted(batch: dict) -> torch.Tensor:
            if not FoldedConcat.fits(self.model, batch):
                return self._model_predicted_ids(active, batch)
            if not folds:
                folds.extend(FoldedConcat.fold(self.model, self.copy(k)) for k in active)
            return torch.stack(
                [
                    decided(FoldedConcat.logits(self.model, self._input(k, batch), fold), self.problem_type)
                    for k, fold in zip(active, folds)
                ]
            )

        return predicted

    @torch.no_grad()
    def _model_predicted_ids(self, active: list[int], batch: dict) -> torch.Tensor:
        if self.vectorize:
            return decided(self._run_all(active, batch, lambda out: out.logits), self.problem_type)
        return torch.stack(
            [decided(self._call(self.copy(k), self._input(k, batch)).logits, self.problem_type) for k in active]
        )

    def state(self, k: int) -> dict[str, torch.Tensor]:
        return {name: t[k].detach().to("cpu", copy=True) for name, t in self.parameters.items()}


__all__ = ["StackedHeads", "head_tensors", "one_layer"]
