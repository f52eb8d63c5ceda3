"""Data: each kind of data its module, read into `datasets` objects.

- `files`: what every loader shares (`DataFormatError`, which names the file and line; UTF-8 lines; folder or Hub id);
- `ner`: CoNLL-2003 and WikiAnn, and tokenisation with label alignment;
- `mlm`: WikiText-2 and its blocks of tokens;
- `classification`: CSV, TSV and JSONL text classification files, Hub datasets, and the vendored AG News split.

The names below are the API; `from dwatt.data import load_conll2003` reads as it always has.
"""

from ..tokenization import (  # noqa: F401  (re-exported: data's API tokenises too)
    BYTE_LEVEL_BPE_MODELS,
    as_in_running_text,
    drops_running_text_spaces,
    encode_words,
    load_tokenizer,
)
from .files import DataFormatError, is_local_path
from .mlm import group_texts_for_mlm, load_wikitext2, mlm_collator
from .ner import (CONLL_LABELS, WIKIANN_LABELS, entity_types, load_conll2003, load_ner_dataset, load_wikiann, ner_features,
                  read_conll, tokenize_and_align)

__all__ = [
    "BYTE_LEVEL_BPE_MODELS", "CONLL_LABELS", "DataFormatError", "WIKIANN_LABELS", "as_in_running_text",
    "drops_running_text_spaces", "encode_words", "entity_types", "group_texts_for_mlm", "is_local_path",
    "load_conll2003", "load_ner_dataset", "load_tokenizer", "load_wikiann", "load_wikitext2", "mlm_collator",
    "ner_features", "read_conll", "tokenize_and_align",
]
