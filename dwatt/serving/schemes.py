"""The serving choices the command line offers, importable without torch: the int8 schemes and the runtimes."""

QUANTIZATIONS = ("int8",)
"""`dwatt predict --quantize` (`dwatt.serving.quantization`): dynamic int8 linear maps in PyTorch."""
INT8_SCHEMES = ("dynamic", "weights", "smooth")
"""The int8 graphs of `dwatt export` (`dwatt.serving.int8_graphs`, whose docstring says what each quantizes)."""
EXPORT_QUANTIZATIONS = ("int8", *sorted(f"int8-{scheme}" for scheme in INT8_SCHEMES))
"""`dwatt export --quantize`: `int8` is the backbone family's scheme, `int8-<scheme>` forces one."""
RUNTIMES = ("torch", "onnx")
"""`dwatt predict --runtime`: a checkpoint in PyTorch, a `dwatt export` folder in onnxruntime."""

__all__ = ["EXPORT_QUANTIZATIONS", "INT8_SCHEMES", "QUANTIZATIONS", "RUNTIMES"]
