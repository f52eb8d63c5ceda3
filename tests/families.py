"""The backbone families the tests build tiny random configs of, and what each supports: shared by test_families.py
and test_serving_export.py (test files import this, never each other)."""

from transformers import AutoConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

from backbones_dwatt import FAMILIES as FAMILY_RECORDS
from fusions_dwatt import FUSION_CLASSES
from specs_dwatt import FUSION_SPECS

TINY = dict(
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=37,
    vocab_size=99,
    max_position_embeddings=64,
    pad_token_id=1,
)
DEBERTA_RELATIVE = dict(relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=16)
# The encoder families, with what their tiny config needs beyond TINY (their own position scheme switched on), and
# their attention.
FAMILIES = {
    "bert": ("bidirectional", {}),
    "roberta": ("bidirectional", {}),
    "xlm-roberta": ("bidirectional", {}),
    "camembert": ("bidirectional", {}),
    "mpnet": ("bidirectional, relative position bias", {}),
    "deberta": ("bidirectional, disentangled relative positions", DEBERTA_RELATIVE),
    "deberta-v2": (
        "bidirectional, disentangled relative positions",
        DEBERTA_RELATIVE
        | dict(position_buckets=8, norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False),
    ),  # DeBERTa-v3's settings
    "modernbert": (
        "bidirectional, rotary; local (sliding) and global layers alternating",
        dict(
            pad_token_id=0,
            bos_token_id=2,
            eos_token_id=3,
            cls_token_id=2,
            sep_token_id=3,
            global_attn_every_n_layers=2,
            local_attention=4,
        ),
    ),
    "electra": ("bidirectional", dict(embedding_size=16)),
    "distilbert": ("bidirectional", dict(hidden_dim=37)),
    "albert": ("bidirectional, one layer shared across the depth", dict(embedding_size=16)),
    "xlm-roberta-xl": ("bidirectional", {}),
    "ernie": ("bidirectional", {}),
    "data2vec-text": ("bidirectional", {}),
    "megatron-bert": ("bidirectional", {}),
    "roformer": ("bidirectional, rotary", {}),
}
# Decoder-only LLMs: the ten asked for first, then others people fine-tune for classification. Their tiny configs
# switch on what sets them apart (sliding windows, local/global alternation, experts), with 2 KV heads.
DECODER_TINY = TINY | dict(num_key_value_heads=2, intermediate_size=48, pad_token_id=0, bos_token_id=1, eos_token_id=2)
DECODERS = {
    "llama": ("causal, rotary", {}),
    "qwen2": (
        "causal, rotary; sliding window above `max_window_layers`",
        dict(use_sliding_window=True, sliding_window=4, max_window_layers=1),
    ),
    "qwen3": ("causal, rotary, query/key norms", dict(head_dim=8)),
    "mistral": ("causal, rotary, sliding window", dict(sliding_window=4)),
    "gemma2": ("causal, rotary; local (sliding) and global layers alternating", dict(head_dim=8, sliding_window=4)),
    "gemma3_text": (
        "causal, rotary per attention type; local and global layers (5 : 1, here 1 : 1)",
        dict(head_dim=8, sliding_window=4, sliding_window_pattern=2),
    ),
    "phi3": ("causal, rotary", {}),
    "olmo2": ("causal, rotary", {}),
    "gpt2": ("causal, learned absolute positions", {}),
    "gpt_neox": ("causal, partial rotary", {}),
    "gemma": ("causal, rotary", dict(head_dim=8)),
    "phi": ("causal, partial rotary", {}),
    "mixtral": (
        "causal, rotary, sliding window; mixture of experts",
        dict(num_local_experts=2, num_experts_per_tok=1),
    ),
    "qwen2_moe": (
        "causal, rotary; mixture of experts",
        dict(num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16, shared_expert_intermediate_size=16),
    ),
    "qwen3_moe": (
        "causal, rotary; mixture of experts",
        dict(num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16),
    ),
    "starcoder2": ("causal, rotary, sliding window", dict(sliding_window=4)),
    "smollm3": ("causal, rotary except on every fourth layer", {}),
    "olmo": ("causal, rotary", {}),
    "stablelm": ("causal, partial rotary", {}),
    "falcon": ("causal, rotary", {}),
    "opt": ("causal, learned absolute positions", dict(ffn_dim=37, word_embed_proj_dim=32)),
    "bloom": ("causal, ALiBi", {}),
    "mpt": ("causal, ALiBi", {}),
    "gptj": ("causal, partial rotary", dict(rotary_dim=4)),
    "gpt_bigcode": ("causal, multi-query, learned absolute positions", {}),
    "granite": ("causal, rotary", {}),
    "cohere": ("causal, rotary", {}),
    "glm": ("causal, partial rotary", dict(head_dim=8)),
}


def installed(family: str) -> bool:
    return family in MODEL_MAPPING_NAMES


def has_mlm_head(family: str) -> bool:
    return family in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def refused(family: str, fusion: str) -> str | None:
    """Why `fusion` cannot be built on `family`, or None."""
    record = FAMILY_RECORDS.get(family)  # the families not in the table take BERT's or the decoders' way, which can
    return record.extra_layers_refused if record and FUSION_SPECS[fusion.split(":")[0]].needs_layer_inputs else None


# The fusions the family matrix builds: a fusion that subclasses another (ScalarMix with layer dropout) reads the
# backbone exactly as its parent does, so the parent's cells cover it there; its own behaviour (training-time
# dropout, equal to its parent at eval) is tested in test_fusions.py and test_stacked_heads.py.
MATRIX_FUSIONS = tuple(
    name
    for name, cls in FUSION_CLASSES.items()
    if not any(cls is not other and issubclass(cls, other) for other in FUSION_CLASSES.values())
)


def works(family: str, fusion: str) -> bool:
    return refused(family, fusion) is None


def is_decoder(family: str) -> bool:
    return family in DECODERS


def tasks(family: str) -> list[str]:
    """Token classification everywhere; masked LM on encoders with a head; sequence classification on decoders
    (their `last` pooling; encoders' pooling is tested in test_classification.py)."""
    return ["token", "cls"] if is_decoder(family) else ["token"] + ["mlm"] * has_mlm_head(family)


ALL_FAMILIES = {**FAMILIES, **DECODERS}


def encoder_config(family: str):
    attention, extra = ALL_FAMILIES[family]
    return AutoConfig.for_model(family, **((DECODER_TINY if is_decoder(family) else TINY) | extra))
