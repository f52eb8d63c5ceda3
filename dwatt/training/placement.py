"""Where a run's model goes: the process's device, or its backbone spread over devices, memory and disk by a
`device_map` within the memory budget; and where caches too large for memory are kept."""

from __future__ import annotations

from pathlib import Path

from ..distributed import (
    device,
    launched_processes,
)
from ..features.memory import WORKING_MARGIN
from ..run_config import RunConfig

BACKBONE_SHARE = 0.75  # of a memory budget beyond the working margin, what a backbone spread by a device_map takes


def backbone_placement(config: RunConfig) -> dict:
    """`from_pretrained`'s arguments for where the run's backbone goes: none (the process's device), or with
    `config.device_map` its layers spread over the devices there are, on the CPU within `BACKBONE_SHARE` of what
    `config.max_memory` leaves beside the working margin, and the rest read from disk as it runs (the weights offloaded
    beside the
    caches, where the backbone's own files cannot serve)."""
    if config.device_map is None:
        return {}
    if launched_processes() > 1:
        raise ValueError(
            "--device-map spreads one backbone over every device; under torchrun/accelerate launch each "
            "process would take them all: run it as one process"
        )
    placement = {"device_map": config.device_map, "offload_folder": str(feature_cache_folder(config) / "offload")}
    if config.max_memory is not None:
        from accelerate.utils import get_max_memory

        share = int(BACKBONE_SHARE * max(config.max_memory - WORKING_MARGIN, 0))  # the rest: fusion, head, caches
        placement["max_memory"] = get_max_memory() | {"cpu": share}
    return placement


def place_on_device(model) -> None:
    """The model on this process's device; a backbone spread by a `device_map` stays where accelerate put it (its
    hooks move each layer's inputs), and the model then says where its parts are (`hf_device_map`, which the `Trainer`
    reads before moving a model)."""
    if not spread_over_devices(model):
        model.to(device())
        return
    backbone = model.dwatt.backbone
    where_kept = next(name for name, module in model.named_modules() if module is backbone)
    model.dwatt._modules.pop("backbone")  # out of the way of `to`: its offloaded weights cannot move
    try:
        model.to(device())
    finally:
        model.dwatt._modules["backbone"] = backbone
    model.hf_device_map = {
        f"{where_kept}.{name}" if name else where_kept: where for name, where in backbone.hf_device_map.items()
    }
    model.hf_device_map[""] = str(device())


def spread_over_devices(model) -> bool:
    """Whether the model's backbone was spread over devices (and disk) by a `device_map`."""
    return getattr(model.dwatt.backbone, "hf_device_map", None) is not None


def feature_cache_folder(config: RunConfig) -> Path:
    """Where caches too large for memory are kept: `config.feature_cache_dir` (a sweep's or a probe's, which all their
    runs share), else `.feature-cache` beside the run's folder, which a rerun of the command shares."""
    if config.feature_cache_dir:
        return Path(config.feature_cache_dir).resolve()
    return Path(config.output_dir).resolve().parent / ".feature-cache"
