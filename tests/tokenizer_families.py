"""Tokenizers of the families' own classes, written as their Hub folders hold them (tokenizer.json, tokenizer_config.json
naming the class and its flags, config.json naming the model type), each with a small vocabulary learnt from the
vendored CoNLL-03 text: what the tokenizer tests across releases read (test files import this, never each other).
The real ones are too large to ship (Gemma's vocabulary is 262k pieces), and what differs across releases is not the
vocabulary but how each release's class reads the flags and the template."""

import json
from pathlib import Path

from dwatt.data.ner import CONLL_LABELS, read_conll

CONLL = Path(__file__).parents[1] / "dwatt" / "resources" / "conll2003"


def conll_sentences(split: str = "valid", count: int = 40) -> list[list[str]]:
    """The first `count` sentences of a vendored CoNLL-03 split, as words."""
    return [sentence["tokens"] for sentence in read_conll(CONLL / f"{split}.txt", CONLL_LABELS)][:count]


# RoBERTa's special tokens, which XLM-R shares
ROBERTA_SPECIALS = dict(
    bos_token="<s>",
    eos_token="</s>",
    cls_token="<s>",
    sep_token="</s>",
    pad_token="<pad>",
    unk_token="<unk>",
    mask_token="<mask>",
)
# family: (model_type, tokenizer_class, the model: bpe, wordpiece or unigram; byte-level or not, the template's
# special tokens (before, after), the special tokens' names, the flags its Hub tokenizer_config.json carries)
FAMILIES = {
    # EmbeddingGemma and Gemma 3: <bos> text <eos> (EmbeddingGemma) where 4.x's GemmaTokenizerFast defaults to no <eos>
    "gemma": (
        "gemma3_text",
        "GemmaTokenizer",
        "bpe",
        False,
        (["<bos>"], ["<eos>"]),
        dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"),
        dict(add_bos_token=True, add_eos_token=True),
    ),
    # Llama 2/3-style: <s> text, no </s>
    "llama": (
        "llama",
        "LlamaTokenizer",
        "bpe",
        False,
        (["<s>"], []),
        dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>"),
        dict(add_bos_token=True, add_eos_token=False),
    ),
    # SmolLM2: byte-level BPE, nothing added, no prefix space
    "gpt2": (
        "llama",
        "GPT2Tokenizer",
        "bpe",
        True,
        ([], []),
        dict(bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>", unk_token="<|endoftext|>"),
        {},
    ),
    # SmolLM2 as its folder converted by transformers 5 holds it: the generic `TokenizersBackend`, unknown to 4.x
    "tokenizers-backend": (
        "llama",
        "TokenizersBackend",
        "bpe",
        True,
        ([], []),
        dict(bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>", unk_token="<|endoftext|>"),
        {},
    ),
    # Qwen2: byte-level BPE, no BOS
    "qwen2": (
        "qwen2",
        "Qwen2Tokenizer",
        "bpe",
        True,
        ([], []),
        dict(eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None),
        dict(add_prefix_space=False),
    ),
    # RoBERTa: byte-level BPE, <s> text </s>; dwatt reads it with a prefix space
    "roberta": (
        "roberta",
        "RobertaTokenizer",
        "bpe",
        True,
        (["<s>"], ["</s>"]),
        ROBERTA_SPECIALS,
        {},
    ),
    # XLM-R (and the multilingual e5): a unigram model, <s> text </s>
    "xlm-roberta": (
        "xlm-roberta",
        "XLMRobertaTokenizer",
        "unigram",
        False,
        (["<s>"], ["</s>"]),
        ROBERTA_SPECIALS,
        {},
    ),
    # BERT-style WordPiece with [CLS] text [SEP], no BOS/EOS
    "bert": (
        "bert",
        "BertTokenizer",
        "wordpiece",
        False,
        (["[CLS]"], ["[SEP]"]),
        dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]"),
        dict(do_lower_case=True),
    ),
    # MPNet: WordPiece with <s> text </s>
    "mpnet": (
        "mpnet",
        "MPNetTokenizer",
        "wordpiece",
        False,
        (["<s>"], ["</s>"]),
        dict(
            bos_token="<s>",
            eos_token="</s>",
            cls_token="<s>",
            sep_token="</s>",
            pad_token="<pad>",
            unk_token="[UNK]",
            mask_token="<mask>",
        ),
        dict(do_lower_case=True),
    ),
}


def write_family_tokenizer(family: str, folder: Path) -> Path:
    """`family`'s tokenizer as its Hub folder holds it, under `folder`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    model_type, tokenizer_class, kind, byte_level, (before, after), specials, flags = FAMILIES[family]
    special_tokens = list(dict.fromkeys(token for token in specials.values() if token))
    corpus = [" ".join(words) for words in conll_sentences("train", 400)]
    if kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=specials["unk_token"]))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=special_tokens)
    elif kind == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=special_tokens, unk_token="<unk>")
    elif byte_level:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=400, special_tokens=special_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    else:  # SentencePiece-style BPE (Gemma, Llama): spaces as ▁, unknown pieces as bytes
        tokenizer = Tokenizer(models.BPE(unk_token=specials.get("unk_token"), byte_fallback=True))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special_tokens)
    tokenizer.train_from_iterator(corpus, trainer)
    if before or after:
        single = " ".join([*before, "$A", *after])
        pair = " ".join([*before, "$A", *after, *after, "$B", *after])
        tokenizer.post_processor = processors.TemplateProcessing(
            single=single,
            pair=pair,
            special_tokens=[(token, tokenizer.token_to_id(token)) for token in dict.fromkeys(before + after)],
        )
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": tokenizer_class, "model_max_length": 512, **specials, **flags}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    return folder
