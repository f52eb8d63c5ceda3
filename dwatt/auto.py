"""DWAtt in transformers' Auto classes: with them registered, `AutoConfig`/`AutoModelFor...from_pretrained` load a
DWAtt checkpoint with this package's classes and without `trust_remote_code` (with it, the code the checkpoint
carries runs instead). This is the one place that registers them: the remote-code files only declare, through
`register_for_auto_class`, which Auto class each model belongs to (the `auto_map` a checkpoint's config records)."""

from __future__ import annotations

_registered = False


def register_auto_classes() -> None:
    """Registers `DWAttConfig` and the DWAtt task models with the Auto classes; once per process. Importing a model
    name from `dwatt` (`from dwatt import DWAttForTokenClassification`) and `dwatt.checkpoints.load_checkpoint` call
    it; `import dwatt` alone does not, so that it imports neither torch nor transformers' models."""
    global _registered
    if _registered:
        return
    import transformers

    from configuration_dwatt import DWAttConfig
    from modeling_dwatt import AUTO_MODELS

    transformers.AutoConfig.register(DWAttConfig.model_type, DWAttConfig, exist_ok=True)
    for auto_class, model_class in AUTO_MODELS.items():
        getattr(transformers, auto_class).register(DWAttConfig, model_class, exist_ok=True)
    _registered = True


__all__ = ["register_auto_classes"]
