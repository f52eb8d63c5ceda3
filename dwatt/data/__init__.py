"""Data: each kind of data its module, read into `datasets` objects.

- `files`: what every loader shares (`DataFormatError`, which names the file and line; UTF-8 lines; folder or Hub id);
- `ner`: CoNLL-2003 and WikiAnn, and tokenisation with label alignment;
- `mlm`: WikiText-2 and its blocks of tokens;
- `classification`: CSV, TSV and JSONL text classification files, Hub datasets, and the vendored AG News split.

The names below are the API; `from dwatt.data import load_conll2003` reads as it always has. Each is imported from its
module when first asked for, so that a module that needs `dwatt.data.files` alone (the experiment side's tables)
imports neither `datasets` nor the tokenizers.
"""

from importlib import import_module

_MODULE_OF = {
    **dict.fromkeys(
        ("BYTE_LEVEL_BPE_MODELS", "as_in_running_text", "drops_running_text_spaces", "encode_words", "load_tokenizer"),
        "dwatt.tokenization",
    ),
    **dict.fromkeys(("DataFormatError", "is_local_path"), "dwatt.data.files"),
    **dict.fromkeys(("group_texts_for_mlm", "load_wikitext2", "mlm_collator"), "dwatt.data.mlm"),
    **dict.fromkeys(
        (
            "CONLL_LABELS",
            "WIKIANN_LABELS",
            "entity_types",
            "load_conll2003",
            "load_tagged_folder",
            "load_ner_dataset",
            "load_wikiann",
            "ner_features",
            "read_conll",
            "read_tagged_jsonl",
            "tokenize_and_align",
        ),
        "dwatt.data.ner",
    ),
}


def __getattr__(name: str):
    if name in _MODULE_OF:
        return getattr(import_module(_MODULE_OF[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_MODULE_OF)
