"""`Trainer` callbacks of every run: the FE/FT freezing, best-dev tracking, exact losses under data parallelism, and
the run's one progress bar."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm
from transformers import (
    TrainerCallback,
)

from ..atomic import give_usual_modes, read_json, write_json_atomically
from ..lora import is_lora_parameter
from ..run_config import MODES

# What `BestDevCallback` keeps beside each Trainer checkpoint, so that a resumed run continues its curve and best.
BEST_STATE, BEST_WEIGHTS = "dwatt_best_dev.json", "dwatt_best_weights.safetensors"


def trainable_parameter_names(model: torch.nn.Module) -> list[str]:
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


class FreezeBackboneCallback(TrainerCallback):
    """
    The paper's training modes, and LoRA. `"fe"` (feature extraction): the backbone is frozen and kept in eval mode
    (no dropout) from the moment the `Trainer` is built, so the optimizer only ever sees fusion and head parameters;
    at train start the callback checks that exactly those are trainable. `"ft"`: everything trains. `"lora"`: the
    backbone's own weights are frozen and its low-rank adapters (`dwatt.lora.add_lora`) train with the fusion and
    head, the backbone in train mode (its dropout and the adapters' on), as PEFT trains them.
    """

    def __init__(self, mode: str = "fe"):
        if mode not in MODES:
            raise ValueError(f"unknown training mode {mode!r}; expected one of {', '.join(MODES)}")
        self.mode = mode

    def apply(self, model) -> None:
        model.freeze_backbone(self.mode == "fe")
        if self.mode == "lora":
            for name, parameter in model.dwatt.backbone.named_parameters():
                parameter.requires_grad_(is_lora_parameter(name))

    def on_init_end(self, args, state, control, model=None, **kwargs):
        self.apply(model)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.apply(model)
        head = set(model.head_parameters())
        trainable = trainable_parameter_names(model)
        in_backbone = [name for name in trainable if name not in head]
        outside = [name for name in trainable if name in head]
        if not outside:
            raise RuntimeError("no fusion or head parameter is trainable")
        if self.mode == "fe" and (in_backbone or model.dwatt.backbone.training):
            raise RuntimeError(f"FE mode, yet backbone parameters train: {in_backbone[:5]}")
        if self.mode == "ft" and len(in_backbone) != len(list(model.dwatt.backbone.parameters())):
            raise RuntimeError("FT mode, yet some backbone parameters are frozen")
        if self.mode == "lora":
            adapters = [name for name, _ in model.named_parameters() if is_lora_parameter(name)]
            if not adapters or sorted(in_backbone) != sorted(adapters):
                raise RuntimeError(
                    f"LoRA mode, yet the trainable backbone parameters are not its adapters: {in_backbone[:5]}"
                )


class BestDevCallback(TrainerCallback):
    """
    Records the dev score after every evaluation (the learning curve), and keeps a copy of the trainable weights
    at the best score so the run ends with the best dev model, as the paper reports it. Only trainable tensors are
    copied: in FE mode that is the small fusion module and head.
    """

    def __init__(self, metric: str = "eval_f1", greater_is_better: bool = True, key: str = "f1"):
        self.metric, self.greater_is_better, self.key = metric, greater_is_better, key
        self.curve: list[dict] = []
        self.best: dict | None = None
        self._best_state: dict[str, torch.Tensor] | None = None

    def on_evaluate(self, args, state, control, metrics=None, model=None, **kwargs):
        if self.metric not in metrics:  # an evaluation of another split (e.g. test)
            return
        point = {"epoch": round(state.epoch or 0, 4), "step": state.global_step, self.key: metrics[self.metric]}
        self.curve.append(point)
        sign = 1 if self.greater_is_better else -1
        if self.best is None or sign * (point[self.key] - self.best[self.key]) > 0:
            self.best = dict(point, metrics=dict(metrics))
            self._best_state = {
                name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters() if p.requires_grad
            }

    def restore_best(self, model) -> None:
        if self._best_state is not None:
            model.load_state_dict(self._best_state, strict=False)

    def on_save(self, args, state, control, **kwargs):
        """Keep the curve and the best weights next to the Trainer's checkpoint, so a resumed run continues them
        (written by the main process, which is the one that writes the checkpoint)."""
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir() and self.best is not None:
            save_file({k: v.contiguous() for k, v in self._best_state.items()}, str(folder / BEST_WEIGHTS))
            write_json_atomically(folder / BEST_STATE, {"curve": self.curve, "best": self.best})
        if state.is_world_process_zero and folder.is_dir():
            give_usual_modes(folder)  # the Trainer's model.safetensors is written 0600

    def load(self, checkpoint: str | Path) -> None:
        """The curve and best weights kept beside a Trainer checkpoint (`on_save`); a record that does not read is
        refused naming its file, since resuming without it would lose the best epoch."""

        folder = Path(checkpoint)
        if not (folder / BEST_STATE).is_file():
            return
        try:
            saved = read_json(folder / BEST_STATE)
            self.curve, self.best = saved["curve"], saved["best"]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{folder / BEST_STATE}: not a best-dev record ({type(error).__name__}: {error}); remove "
                f"{folder} to resume from the checkpoint before it, or start again without --resume"
            ) from None
        try:
            self._best_state = load_file(str(folder / BEST_WEIGHTS))
        except (OSError, SafetensorError) as error:
            raise ValueError(
                f"{folder / BEST_WEIGHTS}: does not load ({error}); remove {folder} to resume from the "
                "checkpoint before it, or start again without --resume"
            ) from None


class DataParallelLossCallback(TrainerCallback):
    """
    Under data parallelism (`torchrun`, `accelerate launch`) the losses a run trains on and the losses it is scored
    by must both equal a one-process run's. Training: the mean over the labelled tokens of the whole global batch
    (the `Trainer`'s `average_tokens_across_devices`, with the models' `num_items_in_batch`), not a mean of the
    processes' means, so the gradients are those of one process on the same batch. Evaluation: each batch's own
    mean, as on one process (the batches are dealt whole to the processes and gathered back in order), not
    rescaled by the global token count of each step, so dev perplexities and losses do not depend on the number
    of processes. One process: no effect.
    """

    def on_epoch_begin(self, args, state, control, **kwargs):
        args.average_tokens_across_devices = True

    def on_epoch_end(self, args, state, control, **kwargs):
        args.average_tokens_across_devices = False

    on_train_end = on_epoch_end


class RunProgress(TrainerCallback):
    """
    One bar over the epochs of a `Trainer` run, updated after each dev evaluation with the epoch's training loss,
    the dev score and the best dev score so far. A resumed run starts the bar at the epoch it resumes from.
    """

    def __init__(
        self,
        metric: str = "eval_f1",
        label: str = "dev F1",
        show: Callable[[float], str] | None = None,
        greater_is_better: bool = True,
    ):
        self.metric, self.label, self.greater_is_better = metric, label, greater_is_better
        self.show = show or (lambda value: f"{100 * value:.2f}")
        self.bar: tqdm | None = None
        self.loss: float | None = None
        self.best: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = tqdm(
            total=int(math.ceil(args.num_train_epochs)),
            initial=int(state.epoch or 0),
            unit="epoch",
            desc="training",
            dynamic_ncols=True,
        )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.loss = float(logs["loss"])

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.bar is None or not metrics or self.metric not in metrics:  # another split (e.g. test)
            return
        value = float(metrics[self.metric])
        if self.best is None or (value > self.best if self.greater_is_better else value < self.best):
            self.best = value
        postfix = {"loss": f"{self.loss:.4f}"} if self.loss is not None else {}
        postfix |= {self.label: self.show(value), "best": self.show(self.best)}
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(int(round(state.epoch or 0)) - self.bar.n)

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self) -> None:
        """The bar closed, where training ended or stopped on an error (so that the error prints on a line of its
        own)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
