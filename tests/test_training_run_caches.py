"""dwatt.training.run_caches: before the backbone pass of a probe or a sweep, whose runs are quiet, the cache's size,
where it lives and the tokens the backbone runs over are said, then one bar for the whole pass shows the time left; caches on disk known by their contents and read by a
later run without the backbone."""

import re
import time

import torch

from base_model_dwatt import DWAttModel
from dwatt.training import run_ner

from .helpers import tiny_ner_run_config


def test_a_probe_shows_its_backbone_pass_with_the_tokens_and_the_time_left(
    tiny_backbone, tiny_conll, tmp_path, capsys, monkeypatch
):
    from dwatt.cli import main
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    batches = []
    run_backbone = DWAttModel.run_backbone

    def slowed(self, **inputs):  # a slow backbone: the bar moves batch by batch, with the time left
        time.sleep(0.3)
        batches.append(int(inputs["attention_mask"].sum()))
        return run_backbone(self, **inputs)

    monkeypatch.setattr(DWAttModel, "run_backbone", slowed)
    argv = ["probe", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--n-shot", "2"]
    argv += ["--epochs", "1", "--learning-rates", "5e-3", "--results", str(tmp_path / "probe.jsonl"), "--test"]
    argv += ["--no-baselines"]  # the shuffled-label control's own pass over its sample aside
    assert main(argv) == 0
    err = capsys.readouterr().err
    FEATURE_MEMO.clear()
    # said before each pass: the training sample's and the dev split's, then the test split's once the heads chose
    said = re.findall(
        r"feature cache: [\d.]+ GiB .*the backbone runs 3 layers over ([\d,]+) tokens of (\d) split", err
    )
    assert [int(splits) for _, splits in said] == [2, 1], err
    assert sum(int(tokens.replace(",", "")) for tokens, _ in said) == sum(batches)
    assert err.index("feature cache:") < err.index("backbone pass")
    assert re.search(r"backbone pass:\s+\d+%\|.*\| [\d.]+k?/[\d.]+k? \[\d\d:\d\d<\d\d:\d\d", err), err
    assert re.search(r"backbone pass: 100%", err) and "runs (more if a rate is added past an edge):" in err


def test_a_quiet_probe_shows_no_backbone_pass(tiny_backbone, tiny_conll, tmp_path, capsys):
    from dwatt.cli import main
    from dwatt.training import FEATURE_MEMO

    FEATURE_MEMO.clear()
    argv = ["probe", "--backbone", str(tiny_backbone), "--data-dir", str(tiny_conll), "--n-shot", "2", "--quiet"]
    argv += ["--epochs", "1", "--learning-rates", "5e-3", "--results", str(tmp_path / "probe.jsonl"), "--no-baselines"]
    assert main(argv) == 0
    FEATURE_MEMO.clear()
    err = capsys.readouterr().err
    assert "backbone pass" not in err and "feature cache:" not in err


def test_disk_caches_are_known_by_their_contents_a_changed_backbone_tokenizer_or_data_building_new_ones(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """Caches sent to disk (a budget that keeps nothing in memory) are named by what they hold: the same backbone and
    data read the kept files again, and a backbone whose weights changed in the same folder, another tokenizer or
    other sentences each get files of their own, never the stale ones."""
    import shutil

    from transformers import BertModel, BertTokenizerFast

    from dwatt.training import FEATURE_MEMO

    monkeypatch.setattr("dwatt.features.memory.MEMORY_SHARE", 0.0)
    backbone, data = tmp_path / "backbone", tmp_path / "data"
    shutil.copytree(tiny_backbone, backbone)
    shutil.copytree(tiny_conll, data)
    caches = tmp_path / "runs" / ".feature-cache"

    def run(name):
        FEATURE_MEMO.clear()
        results = run_ner(tiny_ner_run_config(backbone, data, tmp_path / "runs" / name, save_model=False))
        assert results["cache_storage"] == "disk"
        return results, {path.name for path in caches.glob("*.bin")}

    first, files = run("first")
    again, same = run("again")
    assert same == files and again["dev_curve"] == first["dev_curve"]
    torch.manual_seed(1)
    BertModel(BertModel.config_class.from_pretrained(backbone)).save_pretrained(backbone)  # other weights, same folder
    _, grown = run("new-weights")
    assert files < grown and len(grown) == 2 * len(files)
    contents = {name: (caches / name).read_bytes() for name in grown}
    assert not {contents[name] for name in grown - files} & {contents[name] for name in files}  # other features
    tokenizer = BertTokenizerFast.from_pretrained(backbone)
    vocab = sorted(tokenizer.vocab, key=tokenizer.vocab.get)
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab[:5] + vocab[5:][::-1])}).save_pretrained(
        backbone
    )
    _, grown_again = run("new-tokenizer")
    assert grown < grown_again and len(grown_again) == 3 * len(files)
    blocks = [block for block in (data / "valid.txt").read_text().split("\n\n") if block.strip()]
    (data / "valid.txt").write_text("\n\n".join(blocks[:-1]) + "\n")  # one dev sentence fewer: other dev features
    _, last = run("new-data")
    assert grown_again < last and len(last) == len(grown_again) + 1  # the same training sample, another dev set
    FEATURE_MEMO.clear()


def test_caches_kept_on_disk_however_small_are_read_by_a_later_run_without_the_backbone(
    tiny_backbone, tiny_conll, tmp_path, monkeypatch
):
    """--cache-on-disk: even caches that fit in memory go to the keyed files, which a later process (here: the memo
    cleared, the backbone made to fail) reads instead of running the backbone again."""
    from dwatt.training import FEATURE_MEMO, RunConfig, run

    settings = dict(
        backbone=str(tiny_backbone),
        data_dir=str(tiny_conll),
        n_shot=2,
        epochs=2,
        cache_dtype="float32",
        progress=False,
        save_model=False,
        cache_on_disk=True,
    )
    first = run(RunConfig(**settings, output_dir=str(tmp_path / "first")))
    assert first["cache_storage"] == "disk" and len(list((tmp_path / ".feature-cache").glob("*.bin"))) == 2
    FEATURE_MEMO.clear()

    def no_backbone(self, **inputs):
        raise AssertionError("the backbone ran again")

    from dwatt import DWAttModel

    monkeypatch.setattr(DWAttModel, "run_backbone", no_backbone)
    again = run(RunConfig(**settings, output_dir=str(tmp_path / "again")))
    FEATURE_MEMO.clear()
    assert again["dev_curve"] == first["dev_curve"]
