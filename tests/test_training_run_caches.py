"""dwatt.training.run_caches: before the backbone pass of a probe or a sweep, whose runs are quiet, the cache's size,
where it lives and the tokens the backbone runs over are said, then one bar for the whole pass shows the time left."""

import re
import time

from base_model_dwatt import DWAttModel


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
    assert re.search(r"backbone pass: 100%", err) and "runs:" in err


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
