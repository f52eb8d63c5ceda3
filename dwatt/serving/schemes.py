"""The serving choices the command line offers, importable without torch: the int8 schemes and the runtimes."""

QUANTIZATIONS = ("int8",)
"""`dwatt predict --quantize` (`dwatt.serving.quantization`): dynamic int8 linear maps in PyTorch."""
INT8_SCHEMES = ("dynamic", "weights", "smooth")
"""The int8 graphs of `dwatt export` (`dwatt.serving.int8_graphs`, whose docstring says what each quantizes)."""
EXPORT_QUANTIZATIONS = ("int8", *sorted(f"int8-{scheme}" for scheme in INT8_SCHEMES))
"""`dwatt export --quantize`: `int8` tries the family's schemes (`schemes_for`) and keeps the fastest on this CPU of
those that keep the answers; `int8-<scheme>` forces one."""
RUNTIMES = ("torch", "onnx")
"""`dwatt predict --runtime`: a checkpoint in PyTorch, a `dwatt export` folder in onnxruntime."""


def schemes_for(quantize: str, model) -> tuple[str, ...]:
    """The int8 schemes `--quantize` asks the export to try: `int8-<scheme>` that one; `int8` every scheme that may
    keep the backbone family's answers (all three for an encoder; `weights` and `smooth` for a decoder-only LLM, whose
    massive activations `dynamic`'s one scale per tensor cannot hold: 92% of SmolLM2's words). The export measures
    each on this machine and keeps the fastest that keeps the answers (`dwatt.serving.export.check_int8`)."""
    from configuration_dwatt import is_decoder_only

    if quantize not in EXPORT_QUANTIZATIONS:
        raise ValueError(f"--quantize: {quantize!r} is not one of {', '.join(EXPORT_QUANTIZATIONS)}")
    if quantize != "int8":
        return (quantize.removeprefix("int8-"),)
    return ("weights", "smooth") if is_decoder_only(model.config.encoder_config) else INT8_SCHEMES


__all__ = ["EXPORT_QUANTIZATIONS", "INT8_SCHEMES", "QUANTIZATIONS", "RUNTIMES", "schemes_for"]
