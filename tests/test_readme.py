"""The README and the site's pages stay true: their generated blocks (`<!-- what: source -->` ... `<!-- end of what -->`)
are what their sources give today, the quick start runs (offline, with the MiniLM folder in place of the Hub name),
and the front page starts with the two commands CI runs."""

import json
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = README.parent / "docs"
PAGES = [README, *sorted(p for p in DOCS.rglob("*.md") if "results" not in p.parts)]


def test_readme_starts_with_the_install_run_and_test_commands():
    lines = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert lines[0].startswith('pip install -e ".[default-model]" && dwatt train')
    assert lines[1].startswith('pip install -e ".[test]" && python -m pytest -q')
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]" && python -m pytest -q' in ci.splitlines()


@pytest.mark.real_weights
def test_quick_start_runs(minilm_path, tmp_path, monkeypatch):
    code = re.search(
        r"## A model in Python\n.*?```python\n(.*?)```", (DOCS / "getting-started.md").read_text(), re.S
    ).group(1)
    code = code.replace('"roberta-large"', repr(str(minilm_path)))
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code, "README quick start", "exec"), namespace)
    assert namespace["out"].logits.shape == (1, 6, 9)
    assert namespace["out"].layer_weights.shape == (1, 6, 6)
    assert type(namespace["reloaded"]).__name__ == "DWAttForTokenClassification"


def test_readme_parameter_table_matches_the_models():
    import torch
    from transformers import RobertaConfig

    from dwatt import DWAttConfig, RobertaDWAttForTokenClassification, count_parameters
    from dwatt.defaults import ROBERTA_LARGE_SHAPE as ROBERTA_LARGE

    table = README.read_text().split("| fusion | what the head sees", 1)[1].split("\n\n", 1)[0]
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        fusion, ours = cells[0].strip("`"), cells[-1].split("/")[0].strip()
        with torch.device("meta"):
            model = RobertaDWAttForTokenClassification(
                DWAttConfig(encoder_config=RobertaConfig(**ROBERTA_LARGE), fusion=fusion, num_labels=9)
            )
        added = count_parameters(model.dwatt.fusion)
        expected = f"{added / 1e6:.2f}M" if added >= 1e6 else str(added)
        assert ours == expected, f"README says {ours} for {fusion}; the model has {expected}"


REPORT_TABLES = README.parent / "docs" / "results" / "report" / "tables"


def readme_blocks() -> dict[str, str]:
    """The generated blocks (`<!-- what: source -->` ... `<!-- end of what -->`) of the README and the site's pages,
    by source. A source quoted on two pages must be quoted alike."""
    blocks: dict[str, str] = {}
    for page in PAGES:
        found = re.findall(r"<!-- ([^:\n]+): (\S+) -->\n(.*?)<!-- end of \1 -->", page.read_text(), re.S)
        for _, source, body in found:
            assert blocks.setdefault(source, body) == body, (
                f"{page}: the block from {source} differs from another page's"
            )
    return blocks


def test_committed_report_and_readme_tables_are_generated_from_the_committed_results(tmp_path):
    import pandas as pd

    from dwatt.experiment.report import write_report

    write_report(sorted((README.parent / "docs" / "results").glob("*/results*.jsonl")), tmp_path, title="check")
    for table in sorted(
        REPORT_TABLES.glob("*.csv")
    ):  # numbers to rounding: another scipy may differ in the last digit
        pd.testing.assert_frame_equal(
            pd.read_csv(tmp_path / "tables" / table.name),
            pd.read_csv(table),
            rtol=1e-9,
            obj=f"{table} (stale? run docs/results/report.sh)",
        )
    for table in sorted(REPORT_TABLES.glob("*.md")):
        assert (tmp_path / "tables" / table.name).read_text() == table.read_text(), (
            f"{table}: stale, run docs/results/report.sh"
        )
    assert {path.name for path in (tmp_path / "tables").iterdir()} == {path.name for path in REPORT_TABLES.iterdir()}


def test_readme_blocks_quote_the_committed_report_tables():
    blocks = {source: body for source, body in readme_blocks().items() if source.startswith("docs/results/report/")}
    assert {
        "docs/results/report/tables/paper_comparison.md",
        "docs/results/report/tables/text_classification.md",
        "docs/results/report/tables/fusion_gains.md",
        "docs/results/report/tables/training_modes.md",
    } <= set(blocks)
    for source, body in blocks.items():
        assert body == (README.parent / source).read_text(), f"README.md: the block from {source} is stale"
    assert (
        "**Text classification, ag_news, all-MiniLM-L6-v2, FE: accuracy**"
        in blocks["docs/results/report/tables/text_classification.md"]
    )


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(README.parent)) for p in PAGES])
def test_generated_blocks_keep_the_page_s_outline(page):
    """A generated block (`<!-- what: source -->` ... `<!-- end of what -->`) holds no heading at or above the level
    of the section it sits in: its titles are bold or one level deeper, so the page's outline stays the authors'."""
    level, inside, fenced, offenders = 0, None, False, []
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            continue
        elif line.startswith("<!-- end of "):
            inside = None
        elif re.match(r"<!-- (?!needs:)[^:\n]+: \S+ -->$", line) and inside is None:
            inside = line
        elif line.startswith("#"):
            depth = len(line) - len(line.lstrip("#"))
            if inside is None:
                level = depth
            elif depth <= level:
                offenders.append(f"{page.name}:{number}: {line!r} (inside {inside}, a level-{level} section)")
    assert not offenders, "\n".join(offenders)


def benchmark_module(name: str):
    import importlib.util
    import sys

    benchmarks = README.parent / "benchmarks"
    sys.path.insert(0, str(benchmarks))
    try:
        spec = importlib.util.spec_from_file_location(name, benchmarks / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(benchmarks))
    return module


def test_readme_serving_ratios_are_the_committed_cpu_benchmark_s():
    rows = json.loads((README.parent / "benchmarks" / "results" / "fusion_speed_cpu.json").read_text())["rows"]
    assert readme_blocks()["benchmarks/results/fusion_speed_cpu.json"] == benchmark_module("fusion_speed").ratio_table(
        rows
    )


def test_readme_bulk_prediction_table_is_the_committed_benchmark_s():
    result = json.loads((README.parent / "benchmarks" / "results" / "predict_speed_cpu.json").read_text())
    module = benchmark_module("predict_speed")
    blocks = readme_blocks()
    assert blocks["benchmarks/results/predict_speed_cpu.json"] == module.table(result["rows"])
    assert blocks["benchmarks/results/predict_speed_cpu.json#ratios"] == module.readme_text(result)
    assert all(check.get("differing", check.get("differing_labels")) == 0 for check in result["equality"])


def test_readme_shows_what_dwatt_train_prints_for_the_committed_default_run():
    """The README's output block is the console summary of the committed embedded-default results."""
    import json

    from dwatt.console import summary

    results = json.loads((README.parent / "docs/results/embedded-default/results.json").read_text())
    block = README.read_text().split("<!-- dwatt train output: docs/results/embedded-default -->\n```text\n", 1)[1]
    shown = block.split("```\n<!-- end of dwatt train output -->", 1)[0].splitlines()
    assert shown[0].startswith("training: 100%") and f"best={100 * results['best_dev_f1']:.2f}" in shown[0]
    assert shown[1:] == summary(results)
    output = (README.parent / "docs/results/embedded-default/output.txt").read_text()
    assert all(line in output for line in shown[1:])


def test_readme_shared_heads_numbers_come_from_the_committed_benchmark():
    import json

    result = json.loads((README.parent / "benchmarks/results/shared_heads_cpu.json").read_text())
    k4 = next(row for row in result["rows"] if row["heads"] == 4)
    text = readme_blocks()["benchmarks/results/shared_heads_cpu.json"]
    assert f"{k4['shared_ms']:.1f} ms against {k4['separate_ms']:.1f} ms" in text and f"({k4['speedup']:.2f}×" in text
    assert f"{result['k4_shared_over_parts']:.3f}×" in text


def test_readme_grid_and_feature_cache_numbers_come_from_the_committed_benchmarks():
    results = README.parent / "benchmarks" / "results"
    blocks = readme_blocks()
    grid = json.loads((results / "grid_speed_cpu.json").read_text())
    assert blocks["benchmarks/results/grid_speed_cpu.json"] == benchmark_module("grid_speed").readme_text(grid)
    cache = json.loads((results / "fe_cache_cpu.json").read_text())
    assert blocks["benchmarks/results/fe_cache_cpu.json"] == benchmark_module("fe_cache").readme_text(cache)


def test_readme_says_how_long_the_committed_main_job_took():
    results = json.loads((README.parent / "docs/results/embedded-default/results.json").read_text())
    said = f"it took {round(results['wall_seconds'])} s and reached {100 * results['best_dev_f1']:.2f} dev F1"
    assert said in " ".join(README.read_text().split()), f"README.md: say '{said}'"


def table_lines(markdown: str) -> str:
    return "".join(line + "\n" for line in markdown.splitlines() if line.startswith("|"))


def test_readme_serving_numbers_come_from_the_committed_benchmarks():
    results = README.parent / "benchmarks" / "results"
    blocks = readme_blocks()
    for source in ("int8_accuracy_cpu.md", "quantization_speed_cpu.md"):
        assert blocks[f"benchmarks/results/{source}"] == table_lines((results / source).read_text()), source


def test_every_generated_block_is_what_its_source_gives_today():
    """`python docs/generated.py` would change nothing (it rewrites the blocks from their sources)."""
    generated = benchmark_module_at(README.parent / "docs", "generated")
    assert not generated.regenerate(write=False), "stale generated blocks: run python docs/generated.py"


def benchmark_module_at(folder: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The prose a reader takes a verdict from: a comparative claim there must rest on a cell the tables mark.
PROSE_PAGES = ("README.md", "docs/results.md", "docs/guides/which-layer.md")
CLAIM = re.compile(
    r"\b(ahead|behind|beats?|trails?|trailing|collapses?|collapsed|outperforms?|complete|every backbone)\b", re.I
)
HEDGE = re.compile(
    r"\b(level|not shown|nothing is shown|no difference|not (?:yet )?(?:measured|tested|run|reproduced)|unmarked|"
    r"whether|if any|hypothesis|likely|the paper finds)\b",
    re.I,
)
INTERVAL = re.compile(r"[+\-−]?(\d+\.\d+) ± (\d+\.\d+)")


def fair_table_marks() -> dict[tuple[str, str], set[str]]:
    """Every `mean ± CI` of the fair comparisons' generated tables, with the marks (▲/▼) it carries there."""
    marks: dict[tuple[str, str], set[str]] = {}
    for table in (DOCS / "results").glob("fair*/**/tables/*.md"):
        for found in re.finditer(r"[+-]?(\d+\.\d+) ± (\d+\.\d+)( [▲▼])?", table.read_text()):
            marks.setdefault((found.group(1), found.group(2)), set()).update(
                [found.group(3).strip()] if found.group(3) else []
            )
    return marks


def prose_sentences(text: str) -> list[str]:
    """The hand-written sentences of a page: no generated block, code, table, heading or figure, and no **term**
    (a word in bold names a verdict, it does not claim one)."""
    text = re.sub(r"<!-- ([^:\n]+): (\S+) -->\n.*?<!-- end of \1 -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"\*\*[^*]+\*\*", "", text)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("|", "#", "!["))]
    return re.split(r"(?<=[.!?])\s+", " ".join(lines))


def unsupported_claims(text: str, marks: dict) -> list[str]:
    """The sentences that claim a lead, a deficit, a collapse or completeness without a hedge and without citing an
    interval the fair tables mark (▲/▼); an interval those tables hold unmarked supports nothing, one from another
    table (the paper-protocol runs) only where it excludes 0; "complete" needs the coverage table."""

    def supported(sentence: str) -> bool:
        if HEDGE.search(sentence):
            return True
        for found in INTERVAL.finditer(sentence):
            key = (found.group(1), found.group(2))
            if marks.get(key) or (key not in marks and float(key[0]) > float(key[1])):
                return True
        return bool(re.search(r"\bcomplete\b", sentence, re.I)) and "coverage" in sentence.lower()

    return [s for s in prose_sentences(text) if CLAIM.search(s) and not supported(s)]


def test_the_prose_claims_no_more_than_the_tables_mark():
    marks = fair_table_marks()
    for page in PROSE_PAGES:
        claims = unsupported_claims((README.parent / page).read_text(), marks)
        assert not claims, f"{page}: claims the tables do not mark:\n" + "\n".join(c[:300] for c in claims)
    planted = [
        "SmolLM2's ScalarMix trails its best layer at N = 16 (-5.31 ± 2.64).",  # level after Holm
        "The top-3 ensemble is ahead on EmbeddingGemma.",  # no interval at all
        "The grid is complete.",
        "Windows ran on every backbone.",
    ]
    assert unsupported_claims(" ".join(planted), marks) == planted
    marked = "Its last layer trails the best one by 43.42 ± 0.93."  # ▼ in the CoNLL-03 answer
    assert unsupported_claims(marked, marks) == []
