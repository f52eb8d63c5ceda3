# Copyright 2026 The dwatt authors. Licensed under the Apache License, Version 2.0.
"""Layer fusions for DWAtt: the modules that mix a backbone's layer outputs z_1..z_L into one representation per token
(DWAtt, Concat, ScalarMix, Base on one layer, Base+n), each a `LayerFusion` built on its spec (what it is and
reads: `specs_dwatt.FUSION_SPECS`, the one table of those facts), and `FUSION_CLASSES`, from a config's `fusion` name
to the class that computes it.

Part of DWAtt's remote code: travels with every checkpoint beside `modeling_dwatt.py`; imports only torch and
transformers.
"""

import torch
import torch.nn.functional as F
from torch import nn

try:
    from transformers import initialization as init
except ImportError:  # transformers without the checkpoint-aware initialisers
    from torch.nn import init

try:
    from .backbones_dwatt import backbone_family, layer_norm_eps
    from .configuration_dwatt import DWAttConfig
    from .specs_dwatt import FUSION_SPECS, FusionSpec
except ImportError:  # a top-level module of the installed project, not remote code
    # Nested, so that the import scan of older transformers (4.46: a regular expression that skips the body of a `try`,
    # not of its `except`) does not take these modules for packages the remote code needs.
    try:
        from backbones_dwatt import backbone_family, layer_norm_eps
        from configuration_dwatt import DWAttConfig
        from specs_dwatt import FUSION_SPECS, FusionSpec
    except ImportError as error:
        raise ImportError(f"{__name__} needs the other *_dwatt.py files beside it") from error


class LayerFusion(nn.Module):
    """
    The base of every fusion. A fusion is built from the config and the backbone, `fusion(config, backbone)`, and
    called as `fusion(layers, last_layer, layer_inputs)`: the layers it reads (`read_layers`; a stack
    `(batch, N, seq, hidden)`, or the list of N layers where it reads them one by one), z_L `(batch, seq, hidden)`,
    and, for a fusion that `needs_layer_inputs`, what the backbone hands each of its layers besides the hidden
    states. It returns the fused representation `(batch, seq, hidden)` and, where it `weighs_layers`, each token's
    weight per layer `(batch, seq, N)` (else None).

    What a fusion is and reads (its name, whether it is per token, which layers, ...) is its `spec`
    (`specs_dwatt.FusionSpec`), the configuration's; what only the computation knows is declared here:
    - `stack_dim`: the memory layout it reads the stacked layers in (1: batch-major), so that stacking costs no copy;
    - `reads_layer_by_layer(device)`: whether it takes the layers as a list there;
    - `linear_map()`: where each token's output is one affine map of its layers side by side, that map;
    - `init_weights(std)`: the initialisation of its own parameters (linear maps and norms get the model's).
    """

    spec: FusionSpec
    stack_dim: int = 1

    def __init__(self, config: DWAttConfig | None = None, backbone: nn.Module | None = None):
        super().__init__()

    def reads_layer_by_layer(self, device: torch.device) -> bool:
        return False

    def linear_map(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The weight `(hidden, layers x hidden)` and bias `(hidden,)` of the affine map each token's output is of its
        layers side by side (in the order it reads them), where it is one such map in eval mode; else None."""
        return None

    def init_weights(self, std: float) -> None:
        """Initialise the parameters this module holds itself (none by default)."""

    def forward(self, layers, last_layer: torch.Tensor, layer_inputs=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    def fuse_positions(self, layers, last_layer: torch.Tensor, token_mask: torch.Tensor) -> tuple:
        """A per-token fusion on the positions of `token_mask` only; the other positions stay zero. `layers` is a
        stack, or the list of layers a fusion that reads them one by one takes (each then selected alone)."""
        if isinstance(layers, list):
            selected = [layer[token_mask][None] for layer in layers]  # N x (1, positions, hidden)
        else:
            selected = layers.permute(0, 2, 1, 3)[token_mask].transpose(0, 1)[None]  # (1, layers, positions, hidden)
        fused_selected, weights_selected = self(selected, last_layer[token_mask][None])
        # Out-of-place scatters, so the model also runs under torch.func.vmap (several heads trained at once).
        fused = last_layer.new_zeros(last_layer.shape).index_put((token_mask,), fused_selected[0])
        weights = None
        if weights_selected is not None:
            zeros = weights_selected.new_zeros(*token_mask.shape, weights_selected.shape[-1])
            weights = zeros.index_put((token_mask,), weights_selected[0])
        return fused, weights


class DWAttMLP(nn.Module):
    """f(x) = W · LN(gelu(U · x)): the paper's bottleneck MLP, used for the DWAtt query."""

    def __init__(self, hidden_size: int, bottleneck_size: int, eps: float):
        super().__init__()
        self.up = nn.Linear(hidden_size, bottleneck_size)
        self.norm = nn.LayerNorm(bottleneck_size, eps=eps)
        self.down = nn.Linear(bottleneck_size, hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.down(self.norm(F.gelu(self.up(hidden_states))))


class DepthWiseAttention(LayerFusion):
    r"""
    Depth-Wise Attention: every token attends over its own representations in the N fused layers.

    - keys    k_n = W^K p_n, where p_n ~ U(0, 1) is a static (never trained) `d_pos`-vector per layer;
    - values  v_n = LN_n(f^V_n(z_n)), one bottleneck MLP and one LayerNorm per layer;
    - query   q = 1 + elu(z_L + f^Q(z_L));
    - output  h = z_L + sum_n softmax_n(q . k_n) v_n.

    The N value MLPs are stored as stacked weights and evaluated with one batched matmul per projection over the
    layer axis. Input `layers` is `(batch, N, seq, hidden)` or, for inference on a CPU, the N `(batch, seq, hidden)`
    layers as a list (nothing stacked); `last_layer` is z_L `(batch, seq, hidden)`.

    Inference on a CPU takes the layers one at a time instead (`reads_layer_by_layer`): each layer's value MLP
    stays in the cache between its steps, the mid-norm's affine is folded into the down projection and the output
    norm's into `layer_norm`, and each value is added into the mix as soon as it exists, so no (N, tokens, width)
    tensor is ever written (benchmarks/fusion_speed.py measures what it saves). The same numbers either way, within
    float rounding (tested).
    """

    spec = FUSION_SPECS["dwatt"]
    stack_dim = 0  # reads the layers layer-major: its value MLPs are one batched matmul over the layer axis

    def __init__(self, config: DWAttConfig, backbone: nn.Module | None = None):
        super().__init__()
        encoder = config.encoder_config
        hidden, layers = encoder.hidden_size, config.num_fused_layers
        value_size = max(1, round(hidden * config.value_bottleneck))
        self.eps = layer_norm_eps(encoder)
        self.query = DWAttMLP(hidden, max(1, round(hidden * config.query_bottleneck)), self.eps)
        self.key = nn.Linear(config.d_pos, hidden, bias=False)
        self.register_buffer("layer_positions", torch.empty(layers, config.d_pos))
        self.value_up_weight = nn.Parameter(torch.empty(layers, hidden, value_size))
        self.value_up_bias = nn.Parameter(torch.empty(layers, 1, value_size))
        self.value_mid_norm_weight = nn.Parameter(torch.empty(layers, 1, value_size))
        self.value_mid_norm_bias = nn.Parameter(torch.empty(layers, 1, value_size))
        self.value_down_weight = nn.Parameter(torch.empty(layers, value_size, hidden))
        self.value_down_bias = nn.Parameter(torch.empty(layers, 1, hidden))
        self.value_norm_weight = nn.Parameter(torch.empty(layers, 1, hidden))
        self.value_norm_bias = nn.Parameter(torch.empty(layers, 1, hidden))

    def extra_repr(self) -> str:
        layers, hidden, value_size = self.value_up_weight.shape
        return f"layers={layers}, hidden={hidden}, value_bottleneck={value_size}, d_pos={self.key.in_features}"

    def values(self, layers: torch.Tensor) -> torch.Tensor:
        """v_n for every layer: `(batch, N, seq, hidden)` -> `(N, batch * seq, hidden)`."""
        num_layers, hidden = layers.shape[1], layers.shape[-1]
        # Free when `layers` is a view of a layer-major stack (as `DWAttModel` builds it); a copy otherwise.
        stacked = layers.transpose(0, 1).reshape(num_layers, -1, hidden)
        up = torch.baddbmm(self.value_up_bias, stacked, self.value_up_weight)
        up = F.layer_norm(F.gelu(up), up.shape[-1:], eps=self.eps)
        up = torch.addcmul(self.value_mid_norm_bias, up, self.value_mid_norm_weight)  # per-layer affine, one pass
        down = torch.baddbmm(self.value_down_bias, up, self.value_down_weight)
        down = F.layer_norm(down, (hidden,), eps=self.eps)
        return torch.addcmul(self.value_norm_bias, down, self.value_norm_weight)

    def init_weights(self, std: float) -> None:
        init.uniform_(self.layer_positions, 0.0, 1.0)
        init.normal_(self.value_up_weight, mean=0.0, std=std)
        init.normal_(self.value_down_weight, mean=0.0, std=std)
        for bias in (self.value_up_bias, self.value_mid_norm_bias, self.value_down_bias, self.value_norm_bias):
            init.zeros_(bias)
        init.ones_(self.value_mid_norm_weight)
        init.ones_(self.value_norm_weight)

    def reads_layer_by_layer(self, device: torch.device) -> bool:
        """Inference on a CPU: one layer at a time pays there (see the class docstring); training, and GPUs, whose
        small batches are bound by kernel launches, keep the batched matmuls."""
        return device.type == "cpu" and not torch.is_grad_enabled()

    def mix_layer_by_layer(self, layers, flat_last: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """z_L + sum_n weights_n v_n, computing and adding one layer's values at a time (inference only)."""
        hidden, value_size = flat_last.shape[-1], self.value_up_weight.shape[-1]
        # LN(x) * g + b feeds the down projection W: fold it into W' = diag(g) W and b' = b W + bias.
        down_weight = self.value_mid_norm_weight.transpose(1, 2) * self.value_down_weight
        down_bias = torch.baddbmm(self.value_down_bias, self.value_mid_norm_bias, self.value_down_weight)
        mixed, weights = flat_last, weights.to(flat_last.dtype)
        for n, layer in enumerate(layers):  # out-of-place throughout, so that it also runs under torch.func.vmap
            up = torch.addmm(self.value_up_bias[n], layer.reshape(-1, hidden), self.value_up_weight[n])
            normed = F.layer_norm(F.gelu(up), (value_size,), eps=self.eps)
            down = torch.addmm(down_bias[n], normed, down_weight[n])
            value = F.layer_norm(down, (hidden,), self.value_norm_weight[n, 0], self.value_norm_bias[n, 0], self.eps)
            mixed = torch.addcmul(mixed, value, weights[:, n : n + 1])
        return mixed

    def forward(self, layers, last_layer: torch.Tensor, layer_inputs=None) -> tuple[torch.Tensor, torch.Tensor]:
        batch, seq, hidden = last_layer.shape
        as_list = isinstance(layers, (list, tuple))
        if (len(layers) if as_list else layers.shape[1]) != self.layer_positions.shape[0]:
            shape = (
                f"{len(layers)} layers"
                if as_list
                else f"a stack of shape {tuple(layers.shape)} (batch, layers, seq, hidden)"
            )
            raise ValueError(f"DepthWiseAttention was built for {self.layer_positions.shape[0]} layers, got {shape}")
        flat_last = last_layer.reshape(-1, hidden)
        query = 1 + F.elu(flat_last + self.query(flat_last))
        keys = self.key(self.layer_positions)  # the buffer follows the model's dtype; a quantized `key` takes it as is
        weights = torch.softmax(query @ keys.t(), dim=-1)
        if self.reads_layer_by_layer(last_layer.device):
            mixed = self.mix_layer_by_layer(layers if as_list else layers.unbind(1), flat_last, weights)
        else:
            layers = torch.stack(tuple(layers), dim=1) if as_list else layers
            mixed = flat_last + torch.einsum(
                "tn,ntd->td", weights.to(layers.dtype), self.values(layers)
            )  # batched matmul
        return mixed.view(batch, seq, hidden), weights.view(batch, seq, keys.shape[0])


class LayerConcat(LayerFusion):
    """h = sum_n W_n z_n, i.e. one `Linear(N * hidden -> hidden)` over the concatenated layers of each token."""

    spec = FUSION_SPECS["concat"]
    stack_dim = 2  # reads the layers token-major: each token's N layers side by side are one matmul's input

    def __init__(self, config: DWAttConfig, backbone: nn.Module | None = None):
        super().__init__()
        hidden = config.encoder_config.hidden_size
        self.proj = nn.Linear(config.num_fused_layers * hidden, hidden)

    def linear_map(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.proj.weight, self.proj.bias

    def forward(self, layers: torch.Tensor, last_layer: torch.Tensor, layer_inputs=None) -> tuple[torch.Tensor, None]:
        batch, num_layers, seq, hidden = layers.shape
        return self.proj(layers.transpose(1, 2).reshape(batch, seq, num_layers * hidden)), None


class ScalarMix(LayerFusion):
    """
    ELMo's scalar mix (AllenNLP `ScalarMix` without layer norm): h = gamma * sum_n softmax(s)_n z_n, with one
    learned scalar s_n per layer and a learned scale gamma. The same weights apply to every token.
    """

    spec = FUSION_SPECS["scalar_mix"]

    def __init__(self, config: DWAttConfig, backbone: nn.Module | None = None):
        super().__init__()
        self.scalar_parameters = nn.Parameter(torch.empty(config.num_fused_layers))
        self.gamma = nn.Parameter(torch.empty(1))

    def extra_repr(self) -> str:
        return f"layers={self.scalar_parameters.numel()}"

    def init_weights(self, std: float) -> None:
        init.zeros_(self.scalar_parameters)
        init.ones_(self.gamma)

    def layer_scores(self) -> torch.Tensor:
        """The scalars the softmax weighs the layers by."""
        return self.scalar_parameters

    def forward(
        self, layers: torch.Tensor, last_layer: torch.Tensor, layer_inputs=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weights = torch.softmax(self.layer_scores(), dim=0)
        mixed = self.gamma * torch.einsum("n,bntd->btd", weights.to(layers.dtype), layers)
        batch, seq = last_layer.shape[:2]
        return mixed, weights.expand(batch, seq, -1)


class ScalarMixLayerDropout(ScalarMix):
    """
    ScalarMix with layer dropout (Kondratyuk and Straka 2019, UDify; AllenNLP's `ScalarMix(dropout=...)`): in
    training, each layer's scalar is replaced by -1e20 with probability `config.layer_dropout` before the softmax, so
    that the head cannot lean on one layer alone; with every layer dropped the weights are uniform. At inference it is
    ScalarMix, and its weights are ScalarMix's.
    """

    spec = FUSION_SPECS["scalar_mix_dropout"]

    def __init__(self, config: DWAttConfig, backbone: nn.Module | None = None):
        super().__init__(config, backbone)
        self.layer_dropout = config.layer_dropout

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, layer_dropout={self.layer_dropout}"

    def layer_scores(self) -> torch.Tensor:
        scores = self.scalar_parameters
        if not self.training or self.layer_dropout == 0:
            return scores
        kept = torch.rand_like(scores) >= self.layer_dropout
        return torch.where(kept, scores, torch.full_like(scores, -1e20))


class ScalarMixLayerNorm(ScalarMix):
    """
    ScalarMix over normalised layers (AllenNLP's `ScalarMix(do_layer_norm=True)`): h = gamma * sum_n softmax(s)_n
    norm(z_n), norm(z) = (z - mean(z)) / sqrt(var(z) + eps), with no learned scale or shift, so that layers of very
    different norms (a decoder's middle layers, Gemma's up to 4e4) are weighed on one scale. AllenNLP takes the mean
    and variance over every unpadded element of the batch; here over each token's hidden vector, so that a token's
    output depends neither on padding nor on its batch-mates (what per-token feature caches, serving and exports need)
    and no mask is needed. Over one layer it is that layer's normalisation, times gamma.
    """

    spec = FUSION_SPECS["scalar_mix_layer_norm"]

    def forward(
        self, layers: torch.Tensor, last_layer: torch.Tensor, layer_inputs=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        eps = 1e-4 if layers.dtype == torch.float16 else 1e-12  # AllenNLP's; 1e-12 is below float16's range
        return super().forward(F.layer_norm(layers, layers.shape[-1:], eps=eps), last_layer)


class LastLayer(LayerFusion):
    """The `base` fusion: h = z_L, or the one layer z_k that `fused_layers` names (a probe of layer k)."""

    spec = FUSION_SPECS["base"]

    def forward(self, layers: torch.Tensor, last_layer: torch.Tensor, layer_inputs=None) -> tuple[torch.Tensor, None]:
        return last_layer, None


class ExtraLayers(LayerFusion):
    """
    `n` freshly initialised layers of the backbone's own layer class on top of z_L (the paper's Base+n). They
    are called like the backbone calls its own (see `BackboneFamily.layer_inputs`): with its attention-mask format
    and its position signal (MPNet's relative bias, DeBERTa's relative positions, ModernBERT's rotary embeddings).
    """

    spec = FUSION_SPECS["base_plus_n"]

    def __init__(self, config: DWAttConfig, backbone: nn.Module | None = None):
        super().__init__()
        encoder = config.encoder_config
        family = backbone_family(encoder)
        if family.extra_layers_refused:
            working = ", ".join(name for name in FUSION_CLASSES if name != self.spec.name)
            raise ValueError(
                f"fusion {self.spec.name!r} cannot be built on the {encoder.model_type!r} family "
                f"({family.extra_layers_refused}); the fusions that work here: {working}"
            )
        layers = family.layers(backbone)
        if layers is None:
            raise ValueError(
                f"fusion 'base_plus_n' needs the transformer layers of the {encoder.model_type!r} backbone "
                f"({type(backbone).__name__}); they are not at `{family.layer_list}`"
            )
        depth = encoder.num_hidden_layers
        # The backbone's own config object (never cut here: Base+n reads z_L), with the settings it was built with
        # (the attention implementation, which decides the format of the mask the extra layers get).
        self.layer = nn.ModuleList(
            family.new_layer(type(layers[0]), backbone.config, depth + i) for i in range(config.num_extra_layers)
        )
        for part in self.layer.modules():  # initialised the backbone's way (`DWAttPreTrainedModel._init_weights`)
            part._dwatt_extra_layer_part = True

    def forward(
        self, layers, last_layer: torch.Tensor, layer_inputs: list[tuple[tuple, dict]]
    ) -> tuple[torch.Tensor, None]:
        hidden_states = last_layer
        for layer, (args, kwargs) in zip(self.layer, layer_inputs):
            output = layer(hidden_states, *args, **kwargs)
            hidden_states = output[0] if isinstance(output, tuple) else output
        return hidden_states, None


FUSION_CLASSES: dict[str, type[LayerFusion]] = {
    fusion.spec.name: fusion
    for fusion in (
        DepthWiseAttention,
        LayerConcat,
        ExtraLayers,
        LastLayer,
        ScalarMix,
        ScalarMixLayerDropout,
        ScalarMixLayerNorm,
    )
}
"""The class that computes each fusion of `specs_dwatt.FUSION_SPECS`, by its `DWAttConfig.fusion` name: the one place
a name meets its class."""

__all__ = [
    "FUSION_CLASSES",
    "DWAttMLP",
    "DepthWiseAttention",
    "ExtraLayers",
    "LastLayer",
    "LayerConcat",
    "LayerFusion",
    "ScalarMix",
    "ScalarMixLayerDropout",
    "ScalarMixLayerNorm",
]
