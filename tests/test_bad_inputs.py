"""Bad input gives a clear error that names the place, and loses nothing. One table, one line per case.

Each case is (id, action, exception type, message pattern). `action(env)` gets an `Env` with a scratch folder, a
tiny saved backbone and a tiny CoNLL folder, and must raise; the message must name the place (file:line, key,
shape or argument).
"""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from dwatt import DWAttConfig, RobertaDWAttForTokenClassification
from dwatt.cli import main
from dwatt.data import (
    CONLL_LABELS,
    DataFormatError,
    group_texts_for_mlm,
    load_conll2003,
    load_tokenizer,
    load_wikiann,
    load_wikitext2,
    read_conll,
    read_tagged_jsonl,
)
from dwatt.experiment.report import load_rows
from dwatt.experiment.store import ResultsStore
from dwatt.sampling import SamplingError, few_shot_split
from dwatt.training import RunConfig, run_ner

from .conftest import ENCODERS, save_tiny_backbone, tiny_config


@dataclass
class Env:
    tmp: Path
    backbone: Path
    conll: Path

    def file(self, name: str, content: str | bytes) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    def checkpoint(self, name: str, heads_only: bool = False) -> Path:
        model = RobertaDWAttForTokenClassification.from_backbone(str(self.mlm_backbone), num_labels=5)
        model.save_pretrained(self.tmp / name, heads_only=heads_only)
        return self.tmp / name

    @property
    def mlm_backbone(self) -> Path:
        folder = self.tmp / "mlm-backbone"
        return folder if folder.exists() else save_tiny_backbone(folder, "bert")

    def cli(self, *argv: str) -> None:
        """Run `dwatt train` on the tiny setup; a refused argument exits 2 with the message on stderr."""
        base = ["train", "--backbone", str(self.backbone), "--data-dir", str(self.conll), "--quiet", "--epochs", "1"]
        if "--output-dir" not in argv:
            base += ["--output-dir", str(self.tmp / "out")]
        code = main(base + list(argv))
        raise SystemExit(code)


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def truncate(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def reshape_tensor(folder: Path, key: str, shape: tuple) -> Path:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    tensors[key] = torch.zeros(shape)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def load(folder: Path, **kwargs):
    return RobertaDWAttForTokenClassification.from_pretrained(folder, **kwargs)


def conll(env: Env, text: str | bytes):
    return read_conll(env.file("bad.txt", text), CONLL_LABELS)


CASES = [
    # data files
    (
        "conll: token without tag",
        lambda e: conll(e, "EU B-ORG\nrejects\n"),
        DataFormatError,
        r"bad\.txt:2: a token without a tag",
    ),
    (
        "conll: unknown tag",
        lambda e: conll(e, "EU B-ORG\nGerman B-FOOD\n"),
        DataFormatError,
        r"bad\.txt:2: unknown tag 'B-FOOD'",
    ),
    (
        "tagged json lines: tag ids instead of names",
        lambda e: read_tagged_jsonl(e.file("bad.jsonl", '{"tokens": ["EU"], "tags": [3]}\n')),
        DataFormatError,
        r"bad\.jsonl:1: tags must be tag names",
    ),
    ("conll: empty file", lambda e: conll(e, ""), DataFormatError, r"bad\.txt:1: no sentences"),
    (
        "conll: only DOCSTART lines",
        lambda e: conll(e, "-DOCSTART- O\n\n-DOCSTART- O\n"),
        DataFormatError,
        r"bad\.txt:1: no sentences",
    ),
    (
        "conll: non-UTF-8 bytes",
        lambda e: conll(e, b"EU B-ORG\nM\xfcnchen B-LOC\n"),
        DataFormatError,
        r"bad\.txt:2: not UTF-8 \(invalid start byte at byte 1\)",
    ),
    (
        "conll: missing validation split",
        lambda e: (e.file("c/train.txt", "EU B-ORG\n"), load_conll2003(e.tmp / "c")),
        FileNotFoundError,
        r"c: no validation split \(looked for valid\.txt\)",
    ),
    (
        "conll: missing folder",
        lambda e: load_conll2003(e.tmp / "nowhere"),
        FileNotFoundError,
        r"no data folder .*nowhere",
    ),
    (
        "wikiann: unknown language folder",
        lambda e: load_wikiann("xx", e.tmp),
        FileNotFoundError,
        r"no data folder .*xx",
    ),
    (
        "wikitext: non-UTF-8 line",
        lambda e: (e.file("w/wiki.valid.tokens", b"ok\n\xff\n"), load_wikitext2(e.tmp / "w")["validation"]),
        DataFormatError,
        r"wiki\.valid\.tokens:2: not UTF-8",
    ),
    ("wikitext: no files", lambda e: load_wikitext2(e.tmp), FileNotFoundError, r"no WikiText-2 files"),
    (
        "wikitext: too short for one block",
        lambda e: (
            e.file("w/valid.txt", "eu rejects german call\n" * 20),
            group_texts_for_mlm(load_wikitext2(e.tmp / "w"), load_tokenizer(e.backbone), 128),
        ),
        ValueError,
        r"masked LM: the (train|validation) split has \d+ tokens, fewer than one block of 128: give it more text, or a smaller --block-size",
    ),
    # configs
    (
        "config: unknown fusion",
        lambda e: DWAttConfig(encoder_config=ENCODERS["bert"](), fusion="attn"),
        ValueError,
        r"unknown fusion 'attn'",
    ),
    (
        "config: bottleneck 0",
        lambda e: DWAttConfig(encoder_config=ENCODERS["bert"](), value_bottleneck=0),
        ValueError,
        r"`value_bottleneck` must be a number in \(0, 1\]",
    ),
    (
        "config: bottleneck above 1",
        lambda e: DWAttConfig(encoder_config=ENCODERS["bert"](), query_bottleneck=2),
        ValueError,
        r"`query_bottleneck` must be a number in \(0, 1\]",
    ),
    (
        "config: d_pos 0",
        lambda e: DWAttConfig(encoder_config=ENCODERS["bert"](), d_pos=0),
        ValueError,
        r"`d_pos` must be an integer >= 1, got 0",
    ),
    (
        "config: d_pos not an integer",
        lambda e: DWAttConfig(encoder_config=ENCODERS["bert"](), d_pos=2.5),
        ValueError,
        r"`d_pos` must be an integer >= 1, got 2\.5",
    ),
    (
        "config: negative extra layers",
        lambda e: DWAttConfig(encoder_config=ENCODERS["bert"](), num_extra_layers=-1),
        ValueError,
        r"`num_extra_layers` must be an integer >= 0, got -1",
    ),
    (
        "config: encoder without model_type",
        lambda e: DWAttConfig(encoder_config={"hidden_size": 8}),
        ValueError,
        r"`encoder_config` has no `model_type`",
    ),
    # checkpoints
    (
        "checkpoint: weights file missing",
        lambda e: ((e.checkpoint("m") / "model.safetensors").unlink(), load(e.tmp / "m")),
        OSError,
        r"model\.safetensors",
    ),
    (
        "checkpoint: truncated weights",
        lambda e: load(truncate(e.checkpoint("t") / "model.safetensors").parent),
        ValueError,
        r"t: the weights file is corrupted or truncated",
    ),
    (
        "checkpoint: tensor of another shape",
        lambda e: load(reshape_tensor(e.checkpoint("s"), "dwatt.fusion.key.weight", (32, 20))),
        ValueError,
        r"dwatt\.fusion\.key\.weight: checkpoint \(32, 20\) vs model \(32, 24\)",
    ),
    (
        "checkpoint: label map disagrees with the head",
        lambda e: (
            edit_json(
                e.checkpoint("l") / "config.json",
                id2label={"0": "O", "1": "B-PER", "2": "I-PER"},
                label2id={"O": 0, "B-PER": 1, "I-PER": 2},
            ),
            load(e.tmp / "l"),
        ),
        ValueError,
        r"classifier\.weight: checkpoint \(5, 32\) vs model \(3, 32\)",
    ),
    (
        "checkpoint: backbone of another architecture",
        lambda e: load(
            e.checkpoint("h", heads_only=True), backbone_name_or_path=str(save_tiny_backbone(e.tmp / "mp", "mpnet"))
        ),
        ValueError,
        r"not the one this model was built for: model_type 'mpnet' instead of 'bert'",
    ),
    (
        "checkpoint: hidden states of the wrong depth",
        lambda e: RobertaDWAttForTokenClassification(tiny_config())(backbone_hidden_states=torch.zeros(1, 2, 4, 32)),
        ValueError,
        r"has 2 layers \(shape \(1, 2, 4, 32\)\)",
    ),
    # CLI arguments
    ("cli: N-shot larger than the pool", lambda e: e.cli("--n-shot", "1000"), SystemExit, r"^2$"),
    ("cli: epochs 0", lambda e: e.cli("--epochs", "0"), SystemExit, r"^2$"),
    ("cli: unknown backbone path", lambda e: e.cli("--backbone", "./no/such/model"), SystemExit, r"^2$"),
    (
        "run: unknown dataset",
        lambda e: run_ner(RunConfig(backbone=str(e.backbone), dataset="ontonotes", output_dir=str(e.tmp / "o"))),
        ValueError,
        r"--dataset: unknown dataset 'ontonotes'",
    ),
    (
        "run: unknown fusion",
        lambda e: RunConfig(fusion="sum").validate(),
        ValueError,
        r"--fusion: unknown fusion 'sum'",
    ),
    (
        "sampling: more than the pool",
        lambda e: few_shot_split(load_conll2003(e.conll)["train"], 100, 0),
        SamplingError,
        r"cannot sample 100 x 4 = 400 sentences from a pool of 20",
    ),
    # results
    (
        "results: output dir under a file",
        lambda e: run_ner(
            RunConfig(backbone=str(e.backbone), data_dir=str(e.conll), output_dir=str(e.file("plain", "x") / "run"))
        ),
        PermissionError,
        r"--output-dir: .*plain/run is not writable",
    ),
    (
        "results: corrupted sweep store",
        lambda e: ResultsStore(e.file("r.jsonl", '{"run_id": "a"}\n{oops\n')).rows(),
        ValueError,
        r"r\.jsonl:2: not a JSON row",
    ),
    (
        "results: unreadable results file",
        lambda e: load_rows([e.file("results.json", "{")]),
        ValueError,
        r"results\.json: not a JSON results row",
    ),
]

CLI_MESSAGES = {
    "cli: N-shot larger than the pool": "cannot sample 1000 x 4",
    "cli: epochs 0": "--epochs must be > 0, got 0",
    "cli: unknown backbone path": "--backbone: no model folder ./no/such/model",
}


def test_the_table_covers_enough_cases():
    assert len(CASES) >= 25 and len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("name, action, error, pattern", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_refused_with_a_message_naming_the_place(
    name, action, error, pattern, tmp_path, tiny_backbone, tiny_conll, capsys
):
    env = Env(tmp_path, tiny_backbone, tiny_conll)
    with pytest.raises(error, match=pattern):
        action(env)
    if name in CLI_MESSAGES:
        assert CLI_MESSAGES[name] in capsys.readouterr().err


def test_a_failed_run_leaves_the_previous_results_in_place(tmp_path, tiny_backbone, tiny_conll):
    previous = tmp_path / "results.json"
    previous.write_text('{"best_dev_f1": 0.5}\n')
    with pytest.raises(SamplingError):
        run_ner(
            RunConfig(backbone=str(tiny_backbone), data_dir=str(tiny_conll), n_shot=1000, output_dir=str(tmp_path))
        )
    assert previous.read_text() == '{"best_dev_f1": 0.5}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


ACCEPTED = [
    # (id, file content, sentences as (tokens, tags)) — inputs that are not errors, and the policy applied to them.
    (
        "windows line endings",
        "EU B-ORG\r\nrejects O\r\n\r\nPeter B-PER\r\n",
        [(["EU", "rejects"], ["B-ORG", "O"]), (["Peter"], ["B-PER"])],
    ),
    ("I- after O is kept as written", "EU O\nCommission I-ORG\n", [(["EU", "Commission"], ["O", "I-ORG"])]),
    ("tabs between columns", "EU\tB-ORG\n", [(["EU"], ["B-ORG"])]),
    ("no trailing blank line", "EU B-ORG", [(["EU"], ["B-ORG"])]),
]


@pytest.mark.parametrize("name, content, expected", ACCEPTED, ids=[case[0] for case in ACCEPTED])
def test_accepted_odd_inputs_follow_the_stated_policy(name, content, expected, tmp_path):
    sentences = read_conll(Env(tmp_path, tmp_path, tmp_path).file("ok.txt", content), CONLL_LABELS)
    assert [(s["tokens"], s["tags"]) for s in sentences] == expected


def test_i_after_o_counts_as_an_entity_in_scoring():
    """The policy's consequence: seqeval's default (CoNLL) mode reads O I-ORG as an ORG entity."""
    from dwatt.metrics import entity_scores

    assert entity_scores([["O", "I-ORG"]], [["O", "B-ORG"]])["f1"] == 1.0


# --- Through the command line: each case exits 2 with one line on stderr that names the place. ---


def tagger(env: Env, name: str = "tagger") -> Path:
    """A tagger checkpoint on the tiny backbone, with its tokenizer: what `dwatt predict` and `evaluate` read."""
    folder = env.tmp / name
    if not folder.exists():
        from transformers import AutoTokenizer

        model = RobertaDWAttForTokenClassification.from_backbone(
            str(env.backbone), num_labels=len(CONLL_LABELS), id2label=dict(enumerate(CONLL_LABELS))
        )
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(env.backbone).save_pretrained(folder)
    return folder


def classifier(env: Env) -> Path:
    """A text classifier on the tiny backbone for labels a and b, with its tokenizer."""
    folder = env.tmp / "classifier"
    if not folder.exists():
        from transformers import AutoTokenizer

        from dwatt import DWAttForSequenceClassification

        model = DWAttForSequenceClassification.from_backbone(str(env.backbone), id2label={0: "a", 1: "b"})
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(env.backbone).save_pretrained(folder)
    return folder


def edited(folder: Path, file: str, content: str | None = None, **changes) -> Path:
    path = folder / file
    if content is not None:
        path.write_text(content)
    else:
        edit_json(path, **changes)
    return folder


def train_args(env: Env, *extra: str) -> list[str]:
    return [
        "train",
        "--backbone",
        str(env.backbone),
        "--data-dir",
        str(env.conll),
        "--quiet",
        "--epochs",
        "1",
        "--n-shot",
        "2",
        "--output-dir",
        str(env.tmp / "out"),
        *extra,
    ]


def interrupted_run(env: Env, damage: str) -> list[str]:
    """A run trained with --checkpoint-every-epoch, its last checkpoint then damaged: the command that resumes it."""
    assert main(train_args(env, "--checkpoint-every-epoch", "--no-save")) == 0
    [checkpoint] = sorted((env.tmp / "out" / "trainer").glob("checkpoint-*"))
    if damage == "record":
        (checkpoint / "dwatt_best_dev.json").write_text("{garbage")
    else:
        truncate(checkpoint / "model.safetensors")
    return train_args(env, "--resume", "--no-save")


def swept_without_test(env: Env) -> list[str]:
    store = env.tmp / "probe.jsonl"
    assert (
        main(
            [
                "sweep",
                "--fusions",
                "base",
                "--probe-layers",
                "1",
                "--learning-rates",
                "1e-3",
                "--n-shots",
                "1",
                "--epochs",
                "1",
                "--trials",
                "1",
                "--backbone",
                str(env.backbone),
                "--data-dir",
                str(env.conll),
                "--engine",
                "budgets",
                "--results",
                str(store),
                "--quiet",
            ]
        )
        == 0
    )
    return [
        "probe",
        "--backbone",
        str(env.backbone),
        "--data-dir",
        str(env.conll),
        "--layers",
        "1",
        "--n-shot",
        "1",
        "--epochs",
        "1",
        "--learning-rates",
        "1e-3",
        "--results",
        str(store),
        "--quiet",
        "--test",
    ]


def run_with_results(env: Env, text: str) -> Path:
    import shutil

    folder = env.tmp / "run"
    shutil.copytree(tagger(env), folder / "model")
    (folder / "results.json").write_text(text)
    return folder


def swept_on_trainer(env: Env) -> list[str]:
    """A store one sweep filled on the Trainer, and a sweep of another dev subset into it: only that is named."""
    store = env.tmp / "trainer.jsonl"
    common = [
        "sweep",
        "--fusions",
        "base",
        "--n-shots",
        "1",
        "--epochs",
        "1",
        "--trials",
        "1",
        "--backbone",
        str(env.backbone),
        "--data-dir",
        str(env.conll),
        "--results",
        str(store),
        "--quiet",
    ]
    assert main(common + ["--engine", "trainer", "--dev-sentences", "2"]) == 0
    return common + ["--dev-sentences", "3"]


def csv_folder(env: Env) -> Path:
    rows = "".join(f"{text},{topic}\n" for text, topic in (("eu rejects", "a"), ("peter call", "b")) * 3)
    env.file("csv/train.csv", "headline,topic\n" + rows)
    env.file("csv/dev.csv", "headline,topic\n" + rows)
    return env.tmp / "csv"


def ensemble_without_weights(env: Env) -> Path:
    """A probe ensemble of two taggers, the second's weights file gone."""
    import shutil

    from dwatt.checkpoints import write_ensemble

    folder = env.tmp / "ensemble"
    for name in ("a", "b"):
        shutil.copytree(tagger(env), folder / name)
    write_ensemble(folder, ["a", "b"], {})
    (folder / "b" / "model.safetensors").unlink()
    return folder


def store_holding_a_run_twice(env: Env) -> Path:
    """A results store with one run on lines 1 and 2, its dev F1 different."""
    from .helpers import fair_row

    row = fair_row("dwatt", 0, 1e-3, 0.5, 0.6)
    return env.file("dup-conflict.jsonl", json.dumps(row) + "\n" + json.dumps(row | {"best_dev_f1": 0.7}) + "\n")


def export_being_written(env: Env) -> list[str]:
    """An export folder another process holds the lock of (it is writing it)."""
    from filelock import FileLock

    env.held = FileLock(env.tmp / ".onnx.lock")  # kept on the Env: released when the test ends
    env.held.acquire()
    return ["export", str(tagger(env)), str(env.tmp / "onnx")]


CLI_CASES = [
    (
        "push: results.json not JSON",
        lambda e: ["push", str(run_with_results(e, "{\n\n  nope")), "me/tagger"],
        r"run/results\.json:3: not JSON",
    ),
    (
        "train: infinite learning rate",
        lambda e: train_args(e, "--lr", "inf"),
        r"--lr must be a finite number > 0, got inf",
    ),
    ("train: NaN learning rate", lambda e: train_args(e, "--lr", "nan"), r"--lr must be a finite number > 0, got nan"),
    (
        "train: layers with a superscript digit",
        lambda e: train_args(e, "--layers", "²-3"),
        r"`fused_layers` '²-3': a range is 'a-b' with integers",
    ),
    ("train: --threads 0", lambda e: train_args(e, "--threads", "0"), r"--threads must be >= 1, got 0"),
    (
        "train: resume from a garbage best-dev record",
        lambda e: interrupted_run(e, "record"),
        r"checkpoint-\d+/dwatt_best_dev\.json: not a best-dev record",
    ),
    (
        "train: resume from truncated weights",
        lambda e: interrupted_run(e, "weights"),
        r"checkpoint-\d+/model\.safetensors: the weights file is corrupted or truncated",
    ),
    (
        "predict: checkpoint path that does not exist",
        lambda e: ["predict", str(e.tmp / "runs/x/model"), "eu"],
        r"runs/x/model: no checkpoint folder there",
    ),
    (
        "predict: folder without config.json",
        lambda e: ["predict", str(e.file("empty/notes.txt", "x").parent), "eu"],
        r"empty/config\.json: missing; .* is not a checkpoint folder",
    ),
    (
        "predict: config.json not JSON",
        lambda e: ["predict", str(edited(tagger(e), "config.json", "{\n  oops")), "eu"],
        r"tagger/config\.json:2: not JSON",
    ),
    (
        "predict: tokenizer.json not JSON",
        lambda e: ["predict", str(edited(tagger(e), "tokenizer.json", "[")), "eu"],
        r"tagger/tokenizer\.json:1: not JSON",
    ),
    (
        "predict: dtype that is not torch's",
        lambda e: ["predict", str(edited(tagger(e), "config.json", dtype="nope")), "eu"],
        r"tagger/config\.json: dtype 'nope' is not a torch dtype",
    ),
    (
        "predict: --batch-size 0",
        lambda e: ["predict", str(tagger(e)), "--batch-size", "0", "eu"],
        r"--batch-size must be >= 1, got 0",
    ),
    (
        "predict: --batch-size -4",
        lambda e: ["predict", str(tagger(e)), "--batch-size", "-4", "eu"],
        r"--batch-size must be >= 1, got -4",
    ),
    (
        "predict: invalid UTF-8 at line 3",
        lambda e: ["predict", str(tagger(e)), "--file", str(e.file("in.txt", b"eu\nrejects\nM\xfcnchen\n"))],
        r"in\.txt:3: not UTF-8 \(invalid start byte at byte 2 of the line\)",
    ),
    (
        "predict: --heads A B",
        lambda e: ["predict", "--heads", str(tagger(e)), str(tagger(e, "second")), "eu"],
        r"--heads takes the checkpoints comma-separated, with no space: --heads .*tagger,.*second",
    ),
    (
        "predict: --heads with another backbone's tokenizer",
        lambda e: ["predict", "--heads", str(tagger(e)), "--tokenizer", str(big_tokenizer(e)), "eu"],
        r"--tokenizer .*big: the tokenizer has 40 tokens, the shared backbone 16 embeddings",
    ),
    (
        "evaluate: --split nope",
        lambda e: ["evaluate", str(tagger(e)), "--data-dir", str(e.conll), "--split", "nope"],
        r"--split: tiny-conll\d* \(.*\) has no 'nope' split; it has train, validation, test",
    ),
    (
        "sweep: --learning-rates ''",
        lambda e: [
            "sweep",
            "--fusions",
            "base",
            "--learning-rates",
            "",
            "--quiet",
            "--results",
            str(e.tmp / "r.jsonl"),
        ],
        r"--learning-rates: no value given",
    ),
    (
        "sweep: --fusions ','",
        lambda e: ["sweep", "--fusions", ",", "--quiet", "--results", str(e.tmp / "r.jsonl")],
        r"--fusions: no value given",
    ),
    (
        "sweep: --trials 0",
        lambda e: ["sweep", "--fusions", "base", "--trials", "0", "--quiet", "--results", str(e.tmp / "r.jsonl")],
        r"--trials must be >= 1, got 0",
    ),
    (
        "probe: --learning-rates ''",
        lambda e: ["probe", "--learning-rates", "", "--results", str(e.tmp / "r.jsonl")],
        r"--learning-rates: no value given",
    ),
    (
        "sweep: a store of another dev subset names only that",
        swept_on_trainer,
        r"^(?!.*engine).*trainer\.jsonl:1: run tiny-conll\d*/.* other settings \(dev_sentences: 2 there, 3 here\)",
    ),
    (
        "sweep: --learning-rates=-1e-3",
        lambda e: [
            "sweep",
            "--fusions",
            "base",
            "--learning-rates=-1e-3",
            "--quiet",
            "--results",
            str(e.tmp / "r.jsonl"),
        ],
        r"--learning-rates: every rate must be a finite number > 0, got -0\.001",
    ),
    (
        "probe: --learning-rates nan",
        lambda e: ["probe", "--learning-rates", "1e-3,nan", "--results", str(e.tmp / "r.jsonl")],
        r"--learning-rates: every rate must be a finite number > 0, got nan",
    ),
    (
        "probe: --train-in-parts 0",
        lambda e: ["probe", "--train-in-parts", "0", "--results", str(e.tmp / "r.jsonl")],
        r"--train-in-parts must be >= 1 \(heads trained at a time\), got 0",
    ),
    (
        "probe: --text-column no file has",
        lambda e: [
            "probe",
            "--task",
            "cls",
            "--backbone",
            str(e.backbone),
            "--data-dir",
            str(csv_folder(e)),
            "--text-column",
            "title",
            "--label-column",
            "topic",
            "--n-shot",
            "1",
            "--epochs",
            "1",
            "--results",
            str(e.tmp / "r.jsonl"),
            "--quiet",
            "--no-save",
        ],
        r"csv/train\.csv: no text column 'title'; the columns are \['headline', 'topic'\]",
    ),
    (
        "evaluate: --label-column no file has",
        lambda e: [
            "evaluate",
            str(classifier(e)),
            "--data-dir",
            str(csv_folder(e)),
            "--text-column",
            "headline",
            "--label-column",
            "class",
        ],
        r"csv/(train|dev)\.csv: no label column 'class'; the columns are \['headline', 'topic'\]",
    ),
    (
        "predict: an ensemble member without its weights",
        lambda e: ["predict", str(ensemble_without_weights(e)), "eu"],
        r"ensemble/b/model\.safetensors: missing; the member b of .*ensemble\.json has no weights",
    ),
    (
        "report: a store holding a run twice",
        lambda e: ["report", str(store_holding_a_run_twice(e)), "--output", str(e.tmp / "rep")],
        r"at .*dup-conflict\.jsonl:1 and at .*dup-conflict\.jsonl:2; keep one of them, or name the one to take with --prefer .*dup-conflict\.jsonl:1",
    ),
    (
        "export: a folder another export is writing",
        export_being_written,
        r"onnx: another process is writing this folder now",
    ),
    (
        "probe: a store a sweep filled without --test",
        swept_without_test,
        r"probe\.jsonl:1: run tiny-conll\d*/.* other settings \(evaluate_test: False there, True here\)",
    ),
]


def big_tokenizer(env: Env) -> Path:
    """Another backbone's tokenizer: 40 tokens where the tiny backbone has 16 embeddings."""
    import shutil

    from transformers import BertTokenizerFast

    folder = env.tmp / "big"
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    BertTokenizerFast(
        vocab={token: i for i, token in enumerate(specials + [f"w{i}" for i in range(35)])}
    ).save_pretrained(folder)
    shutil.copy(env.backbone / "config.json", folder / "config.json")
    return folder


@pytest.mark.parametrize("name, argv, pattern", CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_bad_input_on_the_command_line_is_one_line_naming_the_place(
    name, argv, pattern, tmp_path, tiny_backbone, tiny_conll, capsys
):
    import re

    env = Env(tmp_path, tiny_backbone, tiny_conll)
    arguments = argv(env)
    capsys.readouterr()
    assert main(arguments) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(pattern, err[0]), err


def test_a_full_disk_at_the_final_save_keeps_the_scores_and_leaves_no_scratch(
    tmp_path, tiny_backbone, tiny_conll, monkeypatch, capsys
):
    from safetensors import SafetensorError

    env = Env(tmp_path, tiny_backbone, tiny_conll)

    def full_disk(self, *args, **kwargs):
        raise SafetensorError("No space left on device (os error 28)")

    monkeypatch.setattr(RobertaDWAttForTokenClassification, "save_pretrained", full_disk)
    assert main(train_args(env)) == 2
    err = capsys.readouterr().err
    assert re_search(
        r"out/model: the checkpoint could not be written \(No space left on device.*\); the scores are in .*out/results\.json",
        err,
    )
    assert json.loads((tmp_path / "out" / "results.json").read_text())["best_dev_f1"] >= 0
    left = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert "results.json" in left and not [name for name in left if "model" in name], left  # no scratch, no half model


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    from dwatt.atomic import write_text_atomically

    target = tmp_path / "results.json"
    target.write_text("old")

    def no_room(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.replace", no_room)
    with pytest.raises(OSError):
        write_text_atomically(target, "new" * 1000)
    assert [path.name for path in tmp_path.iterdir()] == ["results.json"] and target.read_text() == "old"


@pytest.mark.parametrize("stream", ["stdin", "stdout"])
def test_a_closed_standard_stream_is_one_line(stream, tmp_path, tiny_backbone, tiny_conll, monkeypatch, capsys):
    import io

    env = Env(tmp_path, tiny_backbone, tiny_conll)
    checkpoint = str(tagger(env))
    if stream == "stdin":
        monkeypatch.setattr("sys.stdin", None)
        assert main(["predict", checkpoint, "--jsonl"]) == 2
        assert "--jsonl: standard input is closed" in capsys.readouterr().err
    else:
        closed = io.StringIO()
        closed.close()
        monkeypatch.setattr("sys.stdout", closed)
        assert main(["predict", checkpoint, "eu"]) == 2
        assert "standard output is closed" in capsys.readouterr().err


def test_invalid_utf8_on_stdin_names_the_line(tmp_path, tiny_backbone, tiny_conll, monkeypatch, capsys):
    import io

    env = Env(tmp_path, tiny_backbone, tiny_conll)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"eu\n\xff rejects\n"), encoding="utf-8"))
    assert main(["predict", str(tagger(env)), "--jsonl", "--quiet"]) == 2
    assert "standard input:2: not UTF-8 (invalid start byte at byte 1 of the line)" in capsys.readouterr().err


def test_every_command_that_computes_takes_threads_and_predict_s_help_says_what_heads_excludes(monkeypatch, capsys):
    import torch

    from dwatt.cli import build_parser, use_threads

    parser = build_parser()
    for command in ("train", "evaluate", "predict", "export", "sweep", "probe"):
        extra = {"evaluate": ["x"], "predict": ["x"], "export": ["x", "y"]}.get(command, [])
        assert parser.parse_args([command, *extra, "--threads", "1"]).threads == 1, command
    before = torch.get_num_threads()
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # set through monkeypatch, so that teardown restores them
        monkeypatch.setenv(variable, "2")
    try:
        use_threads(1)
        assert torch.get_num_threads() == 1 and __import__("os").environ["OMP_NUM_THREADS"] == "1"
    finally:
        torch.set_num_threads(before)
    with pytest.raises(SystemExit):
        parser.parse_args(["predict", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(not with --heads, which runs fp32)" in help_text and "comma-separated with no space (A,B)" in help_text


@pytest.mark.parametrize("command", ["sweep", "train", "export"])
def test_ctrl_c_is_one_line_that_says_how_to_go_on(command, monkeypatch, capsys):
    """The console script stopped by Ctrl-C: exit 130 and one line (not a 30-line traceback) saying what is kept."""
    import sys

    import dwatt.cli as cli

    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "main", interrupted)
    monkeypatch.setattr(sys, "argv", ["dwatt", command, "x"])
    with pytest.raises(SystemExit) as stopped:
        cli.entry()
    assert stopped.value.code == 130
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"dwatt {command}: stopped (Ctrl-C); "), err
    assert ("resume" in err[0]) == (command in ("sweep", "train"))
