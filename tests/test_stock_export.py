"""`dwatt export --format transformers` (dwatt.serving.stock_export): a tagger's head on one layer as its family's
stock `<Family>ForTokenClassification`, loaded without remote code and without dwatt, giving the checkpoint's logits
and `dwatt predict`'s tags; everything else refused in one line that says why."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from dwatt import DWAttForSequenceClassification, DWAttForTokenClassification
from dwatt.cli import main

from .conftest import run_without_dwatt, save_tiny_backbone
from .helpers import RELEASES, with_rotary_base
from .helpers import with_random_head as trained_like

LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "B-ORG"}


def expected_logits(checkpoint, tokenizer, texts: list[str], folder, least_labels: int) -> None:
    """The checkpoint's logits on `texts`, padded, saved with the batch into `folder/expected.safetensors` for a process
    without dwatt to compare the stock model's with (`STOCK_LOGITS`); the argmax must tell `least_labels` labels apart,
    so that the comparison can fail."""
    from safetensors.torch import save_file

    model = DWAttForTokenClassification.from_pretrained(checkpoint).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.argmax(-1)[batch["attention_mask"].bool()].unique().numel() >= least_labels
    save_file({"logits": logits, **batch}, str(folder / "expected.safetensors"))


# The stock model loaded from `stock` without remote code gives `expected`'s logits (a script's lines: `.format` them).
STOCK_LOGITS = """
import torch
from safetensors.torch import load_file
from transformers import AutoModelForTokenClassification
stock = AutoModelForTokenClassification.from_pretrained({stock!r}, trust_remote_code=False)
expected = load_file({expected!r})
with torch.no_grad():
    logits = stock.eval()(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"]).logits
mask = expected["attention_mask"].bool()
assert (logits - expected["logits"])[mask].abs().max().item() <= 1e-4
"""


def saved_tagger(backbone, folder, **config):
    torch.manual_seed(0)
    model = DWAttForTokenClassification.from_backbone(str(backbone), num_labels=5, id2label=LABELS, **config)
    trained_like(model).save_pretrained(folder)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(folder)
    return folder


def test_a_head_on_layer_k_exports_as_the_stock_tagger_cut_to_k(tiny_backbone, tmp_path, capsys):
    checkpoint = saved_tagger(tiny_backbone, tmp_path / "model", fusion="base", fused_layers="2")
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    assert "as a stock BertForTokenClassification (layer 2 of 3; no remote code)" in capsys.readouterr().out
    config = json.loads((tmp_path / "stock" / "config.json").read_text())
    assert config["model_type"] == "bert" and config["num_hidden_layers"] == 2 and "auto_map" not in config
    assert config["architectures"] == ["BertForTokenClassification"] and config["id2label"]["1"] == "B-PER"
    assert not list((tmp_path / "stock").glob("*_dwatt.py"))
    record = json.loads((tmp_path / "stock" / "dwatt_stock_export.json").read_text())
    assert record["check"]["max_abs_logit_difference"] <= record["check"]["tolerance"]
    assert record["backbone"] == tiny_backbone.name  # named as committed files name it, no folder of this machine
    text = "peter blackburn rejects brussels eu call"
    (tmp_path / "in.txt").write_text(text + "\n")
    assert main(["predict", str(checkpoint), "--jsonl", str(tmp_path / "in.txt"), "--quiet"]) == 0
    tags = json.loads(capsys.readouterr().out)["tags"]
    assert len(set(tags)) > 2  # a head that tells words apart: the comparison below can fail
    # a process without dwatt and with remote code refused: transformers' own pipeline tags the words alike
    run_without_dwatt(
        f"""
        import json
        from transformers import pipeline
        tagger = pipeline("token-classification", model={str(tmp_path / "stock")!r}, trust_remote_code=False,
                          aggregation_strategy="none")
        found = tagger({text!r})
        # the pipeline leaves "O" out; every other word's label must be dwatt's
        tags = {tags!r}
        words = {text.split()!r}
        for entity in found:
            assert tags[words.index(entity["word"])] == entity["entity"], (entity, tags)
        assert len(found) == sum(tag != "O" for tag in tags), (found, tags)
        """,
        tmp_path,
    )


@pytest.mark.parametrize("mode", ["lora", "ft"])
def test_a_lora_or_fine_tuned_head_on_one_layer_exports_with_its_trained_backbone(tiny_backbone, tmp_path, mode):
    """The stock model holds the backbone as trained: LoRA's updates merged (a head-only save keeps the low-rank
    matrices, merged on load), a fine-tuned backbone's own weights; not the pretrained ones."""
    from transformers import AutoModelForTokenClassification, BertModel

    from dwatt.lora import add_lora
    from dwatt.training import FreezeBackboneCallback

    torch.manual_seed(0)
    model = DWAttForTokenClassification.from_backbone(
        str(tiny_backbone), num_labels=5, id2label=LABELS, fusion="base", fused_layers="2"
    )
    if mode == "lora":
        add_lora(model, rank=4, alpha=8, dropout=0.0)
    FreezeBackboneCallback(mode).apply(model)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn_like(parameter) * 0.2)
    model.eval().save_pretrained(tmp_path / "model", heads_only=mode == "lora")
    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(tmp_path / "model")
    assert main(["export", str(tmp_path / "model"), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    record = json.loads((tmp_path / "stock" / "dwatt_stock_export.json").read_text())
    assert record["check"]["max_abs_logit_difference"] <= record["check"]["tolerance"]
    stock = AutoModelForTokenClassification.from_pretrained(tmp_path / "stock").bert.encoder.layer
    pretrained = BertModel.from_pretrained(tiny_backbone).encoder.layer
    assert len(stock) == 2
    for trained, plain in zip(stock, pretrained, strict=False):
        query, pretrained_query = trained.attention.self.query.weight, plain.attention.self.query.weight
        assert (query - pretrained_query).abs().max() > 1e-3  # the adapted (or fine-tuned) query, not the pretrained
        if mode == "lora":  # the adapters' targets alone changed
            torch.testing.assert_close(trained.attention.self.key.weight, plain.attention.self.key.weight)


def test_a_head_on_the_embedding_output_exports_as_the_stock_tagger_with_no_layer(tiny_backbone, tmp_path, capsys):
    """Layer 0 (a probe's floor, which it may choose): the checkpoint keeps the backbone's first layer unread; the
    stock tagger holds none, its classifier reading the embedding output, with the checkpoint's logits."""
    checkpoint = saved_tagger(tiny_backbone, tmp_path / "model", fusion="base", fused_layers="0")
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    assert "as a stock BertForTokenClassification (layer 0 of 3; no remote code)" in capsys.readouterr().out
    assert json.loads((tmp_path / "stock" / "config.json").read_text())["num_hidden_layers"] == 0
    record = json.loads((tmp_path / "stock" / "dwatt_stock_export.json").read_text())
    assert record["check"]["max_abs_logit_difference"] <= record["check"]["tolerance"]


@pytest.mark.skipif(
    not RELEASES, reason="DWATT_TRANSFORMERS_RELEASES names no folder of a transformers release (CI sets it)"
)
@pytest.mark.parametrize("release", RELEASES or [None], ids=lambda folder: Path(folder or "none").name)
def test_a_stock_export_loads_without_remote_code_with_equal_logits_in_each_supported_release(
    tiny_backbone, tmp_path, release
):
    """The stock tagger written today, loaded by the release's own `AutoModelForTokenClassification` (no remote
    code, no dwatt), gives the checkpoint's logits on a padded batch, and its pipeline tags the words as the
    checkpoint's argmax does."""
    checkpoint = saved_tagger(tiny_backbone, tmp_path / "model", fusion="base", fused_layers="2")
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    text = "peter blackburn rejects brussels eu call"
    expected_logits(
        checkpoint, AutoTokenizer.from_pretrained(checkpoint), [text, "eu rejects german call"], tmp_path, 3
    )
    stock = str(tmp_path / "stock")
    run_without_dwatt(
        STOCK_LOGITS.format(stock=stock, expected=str(tmp_path / "expected.safetensors"))
        + f"""
from pathlib import Path
import transformers
from transformers import pipeline
assert Path({release!r}).name.endswith(transformers.__version__), transformers.__version__
for entity in pipeline("token-classification", model={stock!r}, aggregation_strategy="none")({text!r}):
    assert stock.config.id2label[int(expected["logits"][0, entity["index"]].argmax())] == entity["entity"]
""",
        tmp_path,
        PYTHONPATH=release,
    )


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda backbone, folder: saved_tagger(backbone, folder, fusion="dwatt"), "reads the DWAtt fusion of several"),
        (lambda backbone, folder: saved_tagger(backbone, folder, fusion="base", include_embeddings=True), "embedding"),
    ],
)
def test_what_no_stock_architecture_computes_is_refused_in_one_line(tiny_backbone, tmp_path, capsys, make, why):
    checkpoint = make(tiny_backbone, tmp_path / "model")
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line and "it/s]" not in line]
    assert len(error) == 1 and why in error[0] and "no stock transformers model" in error[0], (
        error
    )  # transformers' bars aside
    assert not (tmp_path / "stock").exists()


@pytest.mark.parametrize("layer, through_final_norm", [(1, True), (3, False)])
def test_a_decoder_s_head_read_through_the_final_norm_exports_as_the_stock_tagger(
    tiny_decoder, tmp_path, capsys, layer, through_final_norm
):
    """A head on layer k of a decoder that reads it through the backbone's final norm, or on its last layer (which
    the backbone returns normed), is the stock `LlamaForTokenClassification` cut to k layers: loaded without remote
    code, it gives the checkpoint's logits on a right-padded batch, and its pipeline tags the words alike."""

    checkpoint = saved_tagger(
        tiny_decoder, tmp_path / "model", fusion="base", fused_layers=str(layer), through_final_norm=through_final_norm
    )
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    assert f"as a stock LlamaForTokenClassification (layer {layer} of 3; no remote code)" in capsys.readouterr().out
    config = json.loads((tmp_path / "stock" / "config.json").read_text())
    assert config["num_hidden_layers"] == layer and "auto_map" not in config
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "stock")
    assert tokenizer.padding_side == "right"
    expected_logits(checkpoint, tokenizer, ["the cat sat on the mat today", "a dog"], tmp_path, 2)
    run_without_dwatt(
        STOCK_LOGITS.format(stock=str(tmp_path / "stock"), expected=str(tmp_path / "expected.safetensors")), tmp_path
    )


def test_a_decoder_probe_read_through_the_final_norm_chooses_a_head_that_exports_stock(
    tiny_decoder, tiny_conll, tmp_path, capsys
):
    """`dwatt probe --through-final-norm` on a decoder: every run reads its layer through the norm (its own run ids
    and feature caches), and the chosen head, saved cut at its layer, exports as the stock tagger."""
    results = tmp_path / "probe" / "results.jsonl"
    argv = ["probe", "--backbone", str(tiny_decoder), "--data-dir", str(tiny_conll), "--n-shot", "2", "--epochs", "2"]
    argv += ["--learning-rates", "1e-3,1e-2", "--widen", "0", "--no-baselines", "--results", str(results)]
    assert main([*argv, "--through-final-norm", "--quiet"]) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert rows and all(row["run_id"].endswith("/final-norm") and row["config"]["through_final_norm"] for row in rows)
    chosen = tmp_path / "probe" / "chosen" / "model"
    assert json.loads((chosen / "config.json").read_text())["through_final_norm"] is True
    capsys.readouterr()
    assert main(["export", str(chosen), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    assert "as a stock LlamaForTokenClassification" in capsys.readouterr().out


def test_a_decoder_classification_probe_read_through_the_final_norm_chooses_a_stock_text_classifier(
    tiny_decoder, tiny_topics, tmp_path, capsys
):
    """`dwatt probe --task cls --through-final-norm` on a decoder: its heads pool the last token through the norm into
    one linear map without a bias, and the chosen one exports as the stock sequence classifier."""
    results = tmp_path / "probe" / "results.jsonl"
    argv = ["probe", "--task", "cls", "--backbone", str(tiny_decoder), "--data-dir", str(tiny_topics), "--n-shot", "3"]
    argv += ["--epochs", "2", "--learning-rates", "1e-2,5e-2", "--layers", "1,2", "--widen", "0", "--no-baselines"]
    assert main([*argv, "--results", str(results), "--through-final-norm", "--quiet"]) == 0
    chosen = tmp_path / "probe" / "chosen" / "model"
    config = json.loads((chosen / "config.json").read_text())
    assert config["through_final_norm"] is True and config["sequence_head"] == "linear" and config["pooling"] == "last"
    capsys.readouterr()
    assert main(["export", str(chosen), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    assert "as a stock LlamaForSequenceClassification" in capsys.readouterr().out


def saved_classifier(backbone, folder, **config):
    torch.manual_seed(0)
    model = DWAttForSequenceClassification.from_backbone(
        str(backbone), fusion="base", num_labels=3, id2label=TOPICS, **config
    )
    trained_like(model).save_pretrained(folder)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(folder)
    return folder


TOPICS = {0: "people", 1: "places", 2: "food"}


@pytest.fixture
def tiny_roberta(tiny_backbone, tmp_path):
    """A tiny random RoBERTa, whose stock classifier keeps a `dense` layer and an `out_proj`, with the tiny BERT's
    word-level tokenizer."""
    folder = save_tiny_backbone(tmp_path / "tiny-roberta", "roberta", pad_token_id=0)
    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(folder)
    return folder


TEXTS = ["peter blackburn rejects brussels eu call", "eu rejects german call to boycott british lamb", "german"]


def stock_classifier_agrees(checkpoint: Path, tmp_path: Path, release: str | None = None) -> torch.Tensor:
    """The checkpoint's logits on `TEXTS`, padded by the stock export's tokenizer (`tmp_path/stock`), after checking in a
    process without dwatt (and with `release`'s transformers first on its path, where given) that the stock sequence
    classifier gives them within 1e-4 and its pipeline gives each text the checkpoint's label."""
    from safetensors.torch import save_file

    batch = AutoTokenizer.from_pretrained(tmp_path / "stock")(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = DWAttForSequenceClassification.from_pretrained(checkpoint).eval()(**batch).logits
    inputs = {name: batch[name] for name in ("input_ids", "attention_mask")}
    save_file({"logits": logits, **inputs}, str(tmp_path / "expected.safetensors"))
    run_without_dwatt(
        f"""
        from pathlib import Path
        import torch, transformers
        from safetensors.torch import load_file
        from transformers import AutoModelForSequenceClassification, pipeline
        release = {release!r}
        assert release is None or Path(release).name.endswith(transformers.__version__), transformers.__version__
        stock = AutoModelForSequenceClassification.from_pretrained({str(tmp_path / "stock")!r}).eval()
        expected = load_file({str(tmp_path / "expected.safetensors")!r})
        with torch.no_grad():
            logits = stock(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"]).logits
        assert (logits - expected["logits"]).abs().max().item() <= 1e-4, (logits, expected["logits"])
        classify = pipeline("text-classification", model={str(tmp_path / "stock")!r}, trust_remote_code=False)
        for text, row in zip({TEXTS!r}, expected["logits"]):
            assert classify(text)[0]["label"] == stock.config.id2label[int(row.argmax())], text
        """,
        tmp_path,
        **({"PYTHONPATH": release} if release else {}),
    )
    return logits


@pytest.mark.parametrize(
    "family, options, architecture",
    [
        ("bert", {"pooling": "first"}, "BertForSequenceClassification"),
        ("roberta", {"pooling": "first"}, "RobertaForSequenceClassification"),
        ("llama", {"fused_layers": "1", "through_final_norm": True}, "LlamaForSequenceClassification"),
        ("llama", {"sequence_head": "linear"}, "LlamaForSequenceClassification"),  # the last layer, normed already
    ],
)
def test_a_text_classifier_on_one_layer_exports_as_the_stock_sequence_classifier(
    tiny_backbone, tiny_decoder, tiny_roberta, tmp_path, capsys, family, options, architecture
):
    """An encoder's head on the first token (RoBERTa's dense, tanh and projection, which BERT's pooler and classifier
    compute too) and a decoder's one linear map on the last token read through the final norm are the family's stock
    sequence classifier: loaded without remote code and without dwatt, it gives the checkpoint's logits on a padded
    batch, and `pipeline("text-classification")` gives each text the checkpoint's label."""
    backbone = {"bert": tiny_backbone, "roberta": tiny_roberta, "llama": tiny_decoder}[family]
    checkpoint = saved_classifier(backbone, tmp_path / "model", **options)
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    assert f"as a stock {architecture}" in capsys.readouterr().out
    config = json.loads((tmp_path / "stock" / "config.json").read_text())
    assert config["architectures"] == [architecture] and "auto_map" not in config
    assert "text-classification" in (tmp_path / "stock" / "README.md").read_text()
    logits = stock_classifier_agrees(checkpoint, tmp_path)
    assert (logits - logits[0]).abs().max() > 1e-3  # texts apart by more than the tolerance: a wrong token shows


@pytest.mark.skipif(
    not RELEASES, reason="DWATT_TRANSFORMERS_RELEASES names no folder of a transformers release (CI sets it)"
)
@pytest.mark.parametrize("release", RELEASES or [None], ids=lambda folder: Path(folder or "none").name)
def test_a_decoder_s_stock_text_classifier_loads_with_equal_logits_in_each_supported_release(
    tiny_decoder, tmp_path, release
):
    """A decoder's text classifier read through the final norm, exported today as the stock
    `LlamaForSequenceClassification`, gives the checkpoint's logits on a right-padded batch in the release's own
    transformers (no remote code, no dwatt), its rotary base (not the default) read by 4.x too, and its pipeline the
    checkpoint's labels (4.x's generic tokenizer told to return no token types, which the decoder refuses)."""
    backbone = with_rotary_base(tiny_decoder, tmp_path / "backbone")
    checkpoint = saved_classifier(backbone, tmp_path / "model", fused_layers="2", through_final_norm=True)
    assert main(["export", str(checkpoint), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    stock_classifier_agrees(checkpoint, tmp_path, release)


def test_a_classifier_the_stock_class_does_not_compute_and_a_decoder_s_head_are_refused(
    tiny_backbone, tiny_decoder, tmp_path, capsys
):
    mean = saved_classifier(tiny_backbone, tmp_path / "cls")  # an encoder's default: the mean over the tokens
    assert main(["export", str(mean), str(tmp_path / "a"), "--format", "transformers"]) == 2
    error = capsys.readouterr().err
    assert "reads the first token through a dense layer and tanh" in error and "--pooling first" in error
    decoder_classifier = saved_classifier(tiny_decoder, tmp_path / "decoder-cls")  # RoBERTa's head on the last token
    assert main(["export", str(decoder_classifier), str(tmp_path / "c"), "--format", "transformers"]) == 2
    error = capsys.readouterr().err
    assert "scores the last token with one linear map without a bias" in error and "--through-final-norm" in error
    decoder = saved_tagger(tiny_decoder, tmp_path / "decoder", fusion="base", fused_layers="1")
    assert main(["export", str(decoder), str(tmp_path / "b"), "--format", "transformers"]) == 2
    error = capsys.readouterr().err
    assert "apply the backbone's final norm after layer 1" in error and "--through-final-norm" in error
    assert main(["export", str(decoder), str(tmp_path / "b"), "--format", "transformers", "--quantize", "int8"]) == 2
    assert "--quantize, --calibration and --allow-lossy are for --format onnx" in capsys.readouterr().err


@pytest.mark.parametrize(
    "scheme, tags",
    [
        ("IOBES", {"peter": "B-FOOD", "blackburn": "E-FOOD", "brussels": "S-DRUG", "lamb": "S-FOOD"}),
        ("plain", {"peter": "NAME", "blackburn": "NAME", "brussels": "PLACE", "lamb": "THING"}),
    ],
)
def test_a_probe_on_a_tag_set_of_ones_own_chooses_a_head_that_serves_stock_as_dwatt_predicts(
    tiny_backbone, tmp_path, capsys, scheme, tags
):
    """A folder whose tags are its own (IOBES spans of new types, or plain tags with no O): the probe reads its tag
    set, names the data by its folder, and its chosen head exports stock with those labels; transformers' pipeline,
    in a process without dwatt, tags the test words as `dwatt predict` does."""
    data = tmp_path / "mine"
    data.mkdir()
    sentences = ["peter blackburn call brussels", "eu rejects british lamb", "boycott lamb to brussels"]
    default = "O" if scheme != "plain" else "THING"
    lines = ["\n".join(f"{w}\t{tags.get(w, default)}" for w in s.split()) + "\n" for s in sentences]
    (data / "train.conll").write_text("\n".join(lines * 3))
    (data / "dev.txt").write_text("\n".join(lines))
    (data / "test.iob").write_text("\n".join(lines))
    argv = ["probe", "--backbone", str(tiny_backbone), "--data-dir", str(data), "--n-shot", "1", "--epochs", "2"]
    argv += ["--learning-rates", "1e-2", "--widen", "0", "--no-baselines", "--test", "--output", str(tmp_path / "p")]
    assert main([*argv, "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert (f"{scheme} spans" if scheme != "plain" else "plain tags") in printed
    assert "served without dwatt: dwatt export " in printed and "--format transformers (a stock model" in printed
    row = json.loads(next((tmp_path / "p" / "questions").glob("*/results.jsonl")).read_text().splitlines()[0])
    assert row["run_id"].startswith("mine/")  # the data by its folder's name, never conll2003
    chosen = tmp_path / "p" / "chosen" / "model"
    assert main(["export", str(chosen), str(tmp_path / "stock"), "--format", "transformers"]) == 0
    labels = json.loads((tmp_path / "stock" / "config.json").read_text())["id2label"]
    assert set(tags.values()) <= set(labels.values())
    capsys.readouterr()
    text = sentences[0]
    (tmp_path / "in.txt").write_text(text + "\n")
    assert main(["predict", str(chosen), "--jsonl", str(tmp_path / "in.txt"), "--quiet"]) == 0
    predicted = json.loads(capsys.readouterr().out)["tags"]
    run_without_dwatt(
        f"""
        from transformers import pipeline
        tagger = pipeline("token-classification", model={str(tmp_path / "stock")!r}, trust_remote_code=False,
                          aggregation_strategy="none")
        found = tagger({text!r})
        tags, words = {predicted!r}, {text.split()!r}
        for entity in found:
            assert tags[words.index(entity["word"])] == entity["entity"], (entity, tags)
        assert len(found) == sum(tag != "O" for tag in tags), (found, tags)
        """,
        tmp_path,
    )
