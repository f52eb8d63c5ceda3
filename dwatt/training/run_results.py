"""How a run ends: what it records of itself (`run_facts`, `RunClock`), and its results.json and checkpoint, each
written whole or not at all (`finish_run`, `save_checkpoint`)."""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError

from ..atomic import give_usual_modes, replace_folder, scratch_folder, write_json_atomically
from ..distributed import (
    is_main_process,
    launched_processes,
)
from ..lora import ADAPTER_FOLDER, save_adapter
from ..model_cards import base_model_name
from ..portable import portable_results
from ..run_config import RunConfig
from ..tokenization import save_tokenizer
from .placement import spread_over_devices


def run_facts(model, train_metrics: dict, last_checkpoint) -> dict:
    return {
        "resumed_from": Path(last_checkpoint).name if last_checkpoint else None,
        "train_seconds": round(train_metrics["train_runtime"], 3),
        "train_examples_per_second": train_metrics["train_samples_per_second"],
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "lora": model.config.lora,
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "threads": torch.get_num_threads(),
            "processes": launched_processes(),
        },
    }


@dataclass(frozen=True)
class RunClock:
    """When a run started, by the wall clock and by this process's CPU time (every thread's): on a shared machine
    the wall clock also counts the time spent waiting for a core, so a run records both."""

    wall: float = field(default_factory=time.perf_counter)
    cpu: float = field(default_factory=time.process_time)

    def elapsed(self) -> dict[str, float]:
        return {
            "wall_seconds": round(time.perf_counter() - self.wall, 3),
            "cpu_seconds": round(time.process_time() - self.cpu, 3),
        }


def finish_run(config: RunConfig, model, tokenizer, results: dict, started: RunClock) -> dict:
    """Save the checkpoint (unless told not to) and write results.json atomically, its paths portable
    (`portable_results`; the returned results keep this machine's): the main process only, when a launcher
    started several (they hold the same weights and the same gathered scores)."""
    output_dir = Path(config.output_dir)
    results |= started.elapsed()
    if not is_main_process():
        return results
    write_json_atomically(output_dir / "results.json", portable_results(results))  # the scores first: they are the run
    if config.save_model:  # a LoRA run keeps its adapters beside the head: its checkpoint is small, as LoRA's are
        # (and a backbone spread by a device_map is not copied either: its checkpoint loads it from where it came)
        save_checkpoint(
            model, tokenizer, output_dir / "model", heads_only=config.mode == "lora" or spread_over_devices(model)
        )
    return results


def save_checkpoint(model, tokenizer, folder: Path, heads_only: bool = False) -> None:
    """`model` and `tokenizer` saved into a scratch folder beside `folder` and swapped in whole (`replace_folder`):
    a save that fails (a full disk) or is killed leaves the folder as it was, and says where the scores are. A model
    that trains LoRA adapters keeps them in PEFT's format too (`dwatt.lora.save_adapter`, in `adapter/`)."""

    spread = model.__dict__.pop("hf_device_map", None)  # saved head-only: none of the offloaded weights is read
    try:
        with scratch_folder(folder) as staging:
            model.save_pretrained(staging, heads_only=heads_only)
            save_adapter(model, staging / ADAPTER_FOLDER, base_model_name(model.config.backbone_name_or_path))
            save_tokenizer(tokenizer, staging)
            give_usual_modes(staging)
            replace_folder(staging, folder)
    except (OSError, SafetensorError) as error:
        raise OSError(
            f"{folder}: the checkpoint could not be written ({error}); the scores are in "
            f"{folder.parent / 'results.json'}"
        ) from None
    finally:
        if spread is not None:
            model.hf_device_map = spread
