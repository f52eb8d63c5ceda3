"""The choices the command line offers, importable without torch or transformers, so that reading the command line
(and running an ONNX export) starts quickly. `FUSIONS` and `POOLINGS` mirror `configuration_dwatt`'s, which imports
transformers' configuration machinery and with it torch; tests/test_layout.py checks that the two agree."""

FUSIONS = ("dwatt", "concat", "base_plus_n", "base", "scalar_mix")
POOLINGS = ("mean", "first", "last")
QUANTIZATIONS = ("int8",)  # dwatt.quantization: dynamic int8 linear maps
RUNTIMES = ("torch", "onnx")  # a checkpoint in PyTorch, a `dwatt export` folder in onnxruntime

__all__ = ["FUSIONS", "POOLINGS", "QUANTIZATIONS", "RUNTIMES"]
