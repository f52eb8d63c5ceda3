"""DWAtt in transformers' Auto classes: with them registered, `AutoConfig`/`AutoModelFor...from_pretrained` load a
DWAtt checkpoint with this package's classes and without `trust_remote_code` (with it, the code the checkpoint
carries runs instead)."""

from __future__ import annotations

_registered = False


def register_auto_classes() -> None:
    """Registers `DWAttConfig` and the DWAtt task models with the Auto classes; once per process. Importing a model
    name from `dwatt` (`from dwatt import DWAttForTokenClassification`) and `dwatt.checkpoints.load_checkpoint` call
    it; `import dwatt` alone does not, so that it imports neither torch nor transformers' models."""
    global _registered
    if _registered:
        return
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForMaskedLM,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    from configuration_dwatt import DWAttConfig
    from modeling_dwatt import (
        DWAttModel,
        DWAttForMaskedLM,
        DWAttForSequenceClassification,
        DWAttForTokenClassification,
    )

    AutoConfig.register(DWAttConfig.model_type, DWAttConfig, exist_ok=True)
    AutoModel.register(DWAttConfig, DWAttModel, exist_ok=True)
    AutoModelForTokenClassification.register(DWAttConfig, DWAttForTokenClassification, exist_ok=True)
    AutoModelForMaskedLM.register(DWAttConfig, DWAttForMaskedLM, exist_ok=True)
    AutoModelForSequenceClassification.register(DWAttConfig, DWAttForSequenceClassification, exist_ok=True)
    _registered = True


__all__ = ["register_auto_classes"]
