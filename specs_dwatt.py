# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""What a DWAtt configuration may choose, as facts: the fusions (`FUSION_SPECS`) and the poolings (`POOLINGS`).

The one table of what each fusion is and needs, before any weight exists. `configuration_dwatt` validates a config
against it, `fusions_dwatt` maps each name to the module that computes it, and the library (the command line's
choices, the tables of results) reads it too. It imports only the standard library, so a report over stored results
reads it without loading torch or transformers.

Part of DWAtt's remote code: travels with every checkpoint beside `configuration_dwatt.py`.
"""

from dataclasses import dataclass
from typing import Any, Literal

POOLINGS = ("mean", "first", "last")
"""How sequence classification pools the fused tokens into one vector (`DWAttConfig.pooling`)."""
WORD_READOUTS = ("first", "last", "mean", "echo-last", "echo-mean")
"""Which vector of a word a token-classification head reads (`DWAttConfig.word_readout`): the state at its first
sub-token (BERT's convention), at its last (the first position of a causal decoder that has seen the whole word), or
the mean over its sub-tokens; `echo-` gives the backbone the input twice and reads the word in the second copy, whose
every position has seen the whole sentence, even in a causal decoder (Springer et al., 2024, "Repetition Improves
Language Model Embeddings")."""


def word_readout_parts(readout: str) -> tuple[bool, str]:
    """What a `WORD_READOUTS` value asks for: whether the backbone is given the input twice (`echo-`), and how a
    word's sub-token states become its vector (`"first"`, `"last"` or `"mean"`)."""
    if readout not in WORD_READOUTS:
        raise ValueError(f"unknown word readout {readout!r}; expected one of {', '.join(WORD_READOUTS)}")
    return readout.startswith("echo-"), readout.removeprefix("echo-")


SEQUENCE_HEADS = ("dense_tanh", "linear")
"""What sequence classification applies to the pooled vector (`DWAttConfig.sequence_head`): RoBERTa's head (a dense
layer, tanh, a projection) or one linear map without a bias (the decoder LLMs' stock classifiers' `score`)."""


@dataclass(frozen=True)
class FusionSpec:
    """
    One fusion as the configuration knows it: what it is called, what it reads and what the model may do with it.

    - `name`: its value of `DWAttConfig.fusion`; `display_name`: how tables and figures name it; `color`: the colour
      figures draw it in; `table_rank`: where tables list it, from the simplest fusion (low) to the paper's (ties by
      name); `headline`: whether the one-table answer of the fair comparison gives it a column (a variant the full
      tables hold need not);
      `hyperparameters`: the config keys of its own (as a model card lists them);
    - `per_token`: each token's output depends on that token's hidden states alone, so it can run on some positions;
    - `weighs_layers`: it returns per-layer weights (`output_layer_weights`);
    - `needs_layer_inputs`: it runs layers of the backbone's own kind (Base+n), which take what the backbone hands its
      own layers besides the hidden states;
    - `linear_in_layers`: each token's output is a linear map of its layers, so a mean over tokens may be taken
      before it (a mean-pooled classifier's cache then keeps one mean vector per layer);
    - `passes_layer_through`: its output is the one layer it reads, unchanged (a head on it is a linear probe);
    - `reads`: which hidden states it reads: `"fused"` (the layers `fused_layers` names, and the embedding output
      with `include_embeddings`), `"one"` (the one layer `fused_layers` names, else the last) or `"last"` (z_L).
    """

    name: str
    display_name: str
    hyperparameters: tuple[str, ...] = ()
    per_token: bool = True
    weighs_layers: bool = False
    needs_layer_inputs: bool = False
    linear_in_layers: bool = False
    passes_layer_through: bool = False
    reads: Literal["fused", "one", "last"] = "fused"
    color: str | None = None
    table_rank: int = 100
    headline: bool = True

    @property
    def lowest_layer(self) -> int:
        """The shallowest hidden state `fused_layers` may name: 0 (the embedding output) for a head on one layer, whose
        probe of it is the floor the backbone's layers are measured against; 1 for the others, which fuse the
        embedding output with `include_embeddings` instead."""
        return 0 if self.reads == "one" else 1

    @property
    def mixes_layers(self) -> bool:
        """Whether it mixes several layers token by token (what a window of layers around a probe's choice takes)."""
        return self.per_token and not self.passes_layer_through

    def read_layers(self, config: Any) -> list[int]:
        """The hidden states (0 = the embedding output, 1..L the layers) it reads under `config`, z_L last."""
        if self.reads == "one":
            return [config.read_layer]
        if self.reads == "last":
            return [config.encoder_config.num_hidden_layers]
        return [0] * config.include_embeddings + config.fused_layer_numbers

    def check_config(self, config: Any) -> None:
        """Raise `ValueError`, naming the key, where `config.fused_layers` asks what this fusion cannot read."""
        depth = config.encoder_config.num_hidden_layers
        names_all = config.fused_layer_numbers == list(range(1, depth + 1))
        if self.reads == "one" and config.single_fused_layer is None and not names_all:
            raise ValueError(
                f"DWAttConfig: `fused_layers` {config.fused_layers!r} names several layers, but the {self.name!r} "
                f"head reads one: give one layer number (0..{depth}, 0: the embedding output), or mix layers with "
                f"{mixing_fusions()}"
            )
        if self.reads == "last" and not names_all:
            reader = next(spec.name for spec in FUSION_SPECS.values() if spec.reads == "one")
            raise ValueError(
                f"DWAttConfig: `fused_layers` {config.fused_layers!r} chooses layers, but the {self.name!r} fusion "
                f"builds on the last layer only; leave it 'all', read one layer with {reader}, or mix with "
                f"{mixing_fusions()}"
            )


FUSION_SPECS: dict[str, FusionSpec] = {
    spec.name: spec
    for spec in (
        FusionSpec(
            "dwatt",
            "DWAtt",
            ("d_pos", "query_bottleneck", "value_bottleneck"),
            weighs_layers=True,
            color="#d62728",
            table_rank=6,
        ),
        FusionSpec("concat", "Concat", linear_in_layers=True, color="#ff7f0e", table_rank=4),
        FusionSpec(
            "base_plus_n",
            "Base+n",
            ("num_extra_layers",),
            per_token=False,
            needs_layer_inputs=True,
            reads="last",
            color="#1f77b4",
            table_rank=5,
        ),
        FusionSpec(
            "base",
            "Base",
            linear_in_layers=True,
            passes_layer_through=True,
            reads="one",
            color="#7f7f7f",
            table_rank=0,
        ),
        FusionSpec(
            "scalar_mix", "ScalarMix", weighs_layers=True, linear_in_layers=True, color="#2ca02c", table_rank=1
        ),
        FusionSpec(
            "scalar_mix_dropout",
            "ScalarMix+LD",
            ("layer_dropout",),
            weighs_layers=True,
            linear_in_layers=True,
            color="#9467bd",
            table_rank=2,
            headline=False,  # a regularised ScalarMix: the full tables hold it
        ),
        FusionSpec("scalar_mix_layer_norm", "ScalarMix+LN", weighs_layers=True, color="#8c564b", table_rank=3),
    )
}
"""Every fusion by its `DWAttConfig.fusion` name, in the order choices list them (`table_order` for tables'). A fusion
of the user's own is one more entry here and one in `fusions_dwatt.FUSION_CLASSES`: everything that lists fusions
reads these tables when it runs."""

FUSIONS = tuple(FUSION_SPECS)
"""The fusions this file declares (a snapshot: `FUSION_SPECS` is the live table)."""


def table_order() -> list[str]:
    """Every fusion's name in the order tables list them: by `table_rank`, then by name."""
    return sorted(FUSION_SPECS, key=lambda name: (FUSION_SPECS[name].table_rank, name))


def fusion_spec(name: str) -> FusionSpec:
    """The spec of the fusion called `name`; `ValueError` naming the choices for any other name."""
    if name not in FUSION_SPECS:
        raise ValueError(f"unknown fusion {name!r}; expected one of {', '.join(FUSIONS)}")
    return FUSION_SPECS[name]


def layers_to_run(read: Any) -> int:
    """How many backbone layers a model runs to read the hidden states `read` (numbers, 0 the embedding output): the
    deepest of them, and one at least, since a family's layer hooks need a layer to run even for a head on layer 0."""
    return max(1, *read)


def mixing_fusions() -> str:
    """The fusions that mix several layers token by token, for messages: "dwatt, concat, ... or scalar_mix"."""
    names = [name for name, spec in FUSION_SPECS.items() if spec.mixes_layers]
    return ", ".join(names[:-1]) + " or " + names[-1]


__all__ = [
    "FUSIONS",
    "FUSION_SPECS",
    "POOLINGS",
    "WORD_READOUTS",
    "word_readout_parts",
    "SEQUENCE_HEADS",
    "FusionSpec",
    "fusion_spec",
    "layers_to_run",
    "mixing_fusions",
    "table_order",
]
