"""The choices the command line offers and what the tables need to know of each fusion, importable without torch or
transformers, so that reading the command line (and running an ONNX export, or writing a report) starts quickly.
`FUSION_FACTS` mirrors the class attributes of `fusions_dwatt.FUSION_CLASSES` (the one table of fusions, which imports
torch) and `POOLINGS` `configuration_dwatt`'s; tests/test_choices.py checks that they agree."""

from dataclasses import dataclass


@dataclass(frozen=True)
class FusionFacts:
    """What a fusion's class in `fusions_dwatt` says of it (see `LayerFusion` there for each fact)."""

    display_name: str  # how tables and figures name it
    per_token: bool  # each token's output depends on that token's hidden states alone
    passes_layer_through: bool  # it returns one layer as it is (Base): a probe of that layer
    weighs_layers: bool  # it mixes layers by weights a run can report
    linear_in_layers: bool  # its output is linear in the layers it reads
    needs_layer_inputs: bool  # it runs layers of the backbone's kind, which take what the backbone hands its own


FUSION_FACTS = {
    "dwatt": FusionFacts("DWAtt", True, False, True, False, False),
    "concat": FusionFacts("Concat", True, False, False, True, False),
    "base_plus_n": FusionFacts("Base+n", False, False, False, False, True),
    "base": FusionFacts("Base", True, True, False, True, False),
    "scalar_mix": FusionFacts("ScalarMix", True, False, True, True, False),
    "scalar_mix_dropout": FusionFacts("ScalarMix+LD", True, False, True, True, False),
}
FUSIONS = tuple(FUSION_FACTS)
POOLINGS = ("mean", "first", "last")
QUANTIZATIONS = ("int8",)  # dwatt.serving.quantization: dynamic int8 linear maps
# dwatt export's int8 graphs (dwatt.serving.int8_graphs): int8 is the backbone family's scheme
EXPORT_QUANTIZATIONS = ("int8", "int8-dynamic", "int8-smooth", "int8-weights")
RUNTIMES = ("torch", "onnx")  # a checkpoint in PyTorch, a `dwatt export` folder in onnxruntime

__all__ = ["EXPORT_QUANTIZATIONS", "FUSIONS", "FUSION_FACTS", "FusionFacts", "POOLINGS", "QUANTIZATIONS", "RUNTIMES"]
