"""The choices the command line offers, importable without torch or transformers, so that reading the command line
(and running an ONNX export) starts quickly. `FUSIONS` is the names of `fusions_dwatt.FUSION_CLASSES` (the one table of
fusions, which imports torch) and `POOLINGS` `configuration_dwatt`'s; tests/test_choices.py checks that they
agree."""

FUSIONS = ("dwatt", "concat", "base_plus_n", "base", "scalar_mix", "scalar_mix_dropout")
POOLINGS = ("mean", "first", "last")
QUANTIZATIONS = ("int8",)  # dwatt.serving.quantization: dynamic int8 linear maps
RUNTIMES = ("torch", "onnx")  # a checkpoint in PyTorch, a `dwatt export` folder in onnxruntime

__all__ = ["FUSIONS", "POOLINGS", "QUANTIZATIONS", "RUNTIMES"]
