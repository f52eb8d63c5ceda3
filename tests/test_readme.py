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
    r"\b(ahead|behind|beats?|trails?|trailing|collapses?|collapsed|outperforms?|pays?|complete|every backbone)\b", re.I
)
HEDGE = re.compile(
    r"\b(level|not shown|nothing is shown|no difference|not (?:yet )?(?:measured|tested|run|reproduced)|unmarked|"
    r"whether|if any|hypothesis|likely|the paper finds)\b",
    re.I,
)
NEGATED = re.compile(r"\b(not|no|nothing|none|neither|nor|whether)\b", re.I)
INTERVAL = re.compile(r"[+\-−]?(\d+\.\d+) ± (\d+\.\d+)")


def marks_by_mean(marks: dict[tuple[str, str], set[str]]) -> dict[str, set[str]]:
    """The marks each mean of the fair tables carries, whatever its interval (a sentence may cite the mean alone)."""
    by_mean: dict[str, set[str]] = {}
    for (mean, _), found in marks.items():
        by_mean.setdefault(mean, set()).update(found)
    return by_mean


MARKED_AS = re.compile(r"marked ([▲▼])[^.;]*?\(([^)]*)\)")


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

    by_mean = marks_by_mean(marks)

    def supported(sentence: str) -> bool:
        cited = [(found.group(1), found.group(2)) for found in INTERVAL.finditer(sentence)]
        if any(marks.get(key) or (key not in marks and float(key[0]) > float(key[1])) for key in cited):
            return True
        if any(key in marks for key in cited):  # only cells the tables leave unmarked: no hedge makes them a claim
            return False
        if HEDGE.search(sentence):
            return True
        return bool(re.search(r"\bcomplete\b", sentence, re.I)) and "coverage" in sentence.lower()

    def marked_as_said(sentence: str) -> bool:
        """Every number a sentence says is "marked ▲/▼ (...)" carries that mark in the tables."""
        for found in MARKED_AS.finditer(sentence):
            for mean in re.findall(r"(\d+\.\d+)", found.group(2)):
                if mean in by_mean and found.group(1) not in by_mean[mean]:
                    return False
        return True

    def claims(sentence: str) -> bool:
        """A word of lead or deficit not negated just before it ("not shown behind", "nothing is shown ahead")."""
        return any(not NEGATED.search(sentence[max(0, w.start() - 40) : w.start()]) for w in CLAIM.finditer(sentence))

    return [s for s in prose_sentences(text) if (claims(s) and not supported(s)) or not marked_as_said(s)]


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
    # Statements the pages once made, each claiming more than its cell's mark: a word of lead or deficit beside
    # unmarked cells (hedged or not), and a mark the table does not give.
    once_said = [
        "AG News (EmbeddingGemma's ScalarMix and Concat fall 36 points behind its best layer, whose deeper layers reach "
        "norms of 4e4: ScalarMix over per-layer-normalised layers (ScalarMix+LN) is level with that layer "
        "(+1.25 ± 3.09), 34 to 41 points above plain ScalarMix in each of 3 trials, so the norms are the likely cause).",
        "On the 800 texts DWAtt went from level with the best single layer (-0.64 ± 0.78) to trailing it (-0.75 ± 0.75).",
        "On EmbeddingGemma it is level with the best layer (+1.25 ± 3.09, 3 trials), while plain ScalarMix and Concat "
        "are marked ▼ there (-36.39, -36.53).",
        "At the last position the last layer already sums up the text; on a decoder, fusion pays for tagging, where each "
        "token's last layer describes the next token rather than its own.",
    ]
    for sentence in once_said:
        assert unsupported_claims(sentence, marks) == [sentence], sentence


def _fair_table(grid: str):
    import pandas as pd

    return pd.read_csv(DOCS / "results" / grid / "report" / "tables" / "fair_comparison.csv")


def _rates_at(backbone: str, rate: str) -> tuple[int, int]:
    """How many of a backbone's AG News N = 16 trials chose DWAtt at `rate` on dev, of how many."""
    table = _fair_table("fair-agnews")
    [rates] = table[(table.backbone == backbone) & (table.n_shot == 16) & (table.method == "DWAtt")].learning_rates
    chosen = [float(r) for r in rates.split(", ")]
    return sum(r == float(rate) for r in chosen), len(chosen)


def _last_layer_chosen() -> tuple[int, int]:
    """In how many AG News trials the dev-chosen layer is the last, of how many."""
    table = _fair_table("fair-agnews")
    best = table[table.method == "best single layer"]
    depth = {"Qwen2.5-Coder-1.5B-Instruct-q4": 28, "SmolLM2-135M-Instruct-q4": 30}
    depth |= {"all-MiniLM-L6-v2": 6, "embeddinggemma-300m": 24}
    layers = [(depth[b], int(layer)) for b, ls in zip(best.backbone, best.layers) for layer in ls.split(", ")]
    return sum(last == layer for last, layer in layers), len(layers)


def _rerun_effects_median() -> str:
    return f"{benchmark_module('rerun_noise').effects()['median']:.2f}"


# Numbers and counts the prose states that the committed tables decide: (page, the words with the numbers as groups,
# what the tables give for them). A page that says another number, or drops the words, fails.
COUNTED_CLAIMS = [
    (
        "docs/results.md",
        r"fusions' differences from the best single layer \(median (\d+\.\d+) F1\)",
        lambda: (_rerun_effects_median(),),
    ),
    (
        "docs/results.md",
        r"was 3e-4 in (\d+) of MiniLM's (\d+) trials",
        lambda: tuple(map(str, _rates_at("all-MiniLM-L6-v2", "3e-4"))),
    ),
    (
        "docs/guides/which-layer.md",
        r"the last layer is the dev choice in (\d+) of (\d+) trials",
        lambda: tuple(map(str, _last_layer_chosen())),
    ),
    (
        "docs/guides/which-layer.md",
        r"the last layer is marked behind it in each of the (\d+) settings",
        lambda: (str(sum(_fair_table("fair-cpu").query("method == 'last layer'").verdict == "trails")),),
    ),
]


def _layers_chosen(backbone: str) -> tuple[str, str]:
    """The lowest and the highest layer a backbone's CoNLL-03 probe chose on dev, over its settings and trials."""
    table = _fair_table("fair-cpu")
    best = table[(table.method == "best single layer") & (table.backbone == backbone)]
    layers = [int(layer) for chosen in best.layers for layer in chosen.split(", ")]
    return str(min(layers)), str(max(layers))


COUNTED_CLAIMS += [
    (
        "docs/results.md",
        r"the median cell's 95% interval is ±(\d+\.\d+) F1",
        lambda: (f"{_fair_table('fair-cpu').minus_best_layer_ci95.median():.2f}",),
    ),
    (
        "docs/guides/which-layer.md",
        r"SmolLM2 layers (\d+)–(\d+) of 30",
        lambda: _layers_chosen("SmolLM2-135M-Instruct-q4"),
    ),
    ("docs/guides/which-layer.md", r"MiniLM (\d+)–(\d+) of 6", lambda: _layers_chosen("all-MiniLM-L6-v2")),
    ("docs/guides/which-layer.md", r"MPNet (\d+)–(\d+) of 12", lambda: _layers_chosen("all-mpnet-base-v2")),
    (
        "docs/guides/which-layer.md",
        r"Qwen2.5-Coder (\d+)–(\d+) of 28",
        lambda: _layers_chosen("Qwen2.5-Coder-1.5B-Instruct-q4"),
    ),
]


def test_the_floor_pairs_each_backbone_with_the_best_layer_the_fair_tables_give():
    """The floor's table (benchmarks/floor.py, floor.json) is computed from the fair stores; its best single layers
    must be the fair tables' as they stand, or the floor was not run again after them."""
    floor = json.loads((DOCS / "results" / "floor" / "floor.json").read_text())
    grids = {"CoNLL-03": _fair_table("fair-cpu"), "AG News": _fair_table("fair-agnews")}
    for table in floor["tables"]:
        fair = grids[table["grid"]]
        best = fair[fair.method == "best single layer"].set_index(["backbone", "n_shot"]).test_score
        for setting in table["settings"]:
            expected = best[setting["backbone"], setting["n_shot"]]
            assert setting["best_single_layer"] == pytest.approx(expected, abs=5e-3), (table["grid"], setting)


@pytest.mark.parametrize("page, words, expected", COUNTED_CLAIMS, ids=[c[1][:40] for c in COUNTED_CLAIMS])
def test_the_numbers_the_prose_states_are_the_tables(page, words, expected):
    found = re.search(words, " ".join((README.parent / page).read_text().split()))
    assert found, f"{page} no longer says {words!r}: update COUNTED_CLAIMS with what it says instead"
    assert found.groups() == expected(), f"{page}: {found.group(0)!r}, the tables give {expected()}"


def test_the_counted_claims_catch_what_the_pages_once_said():
    once = {
        r"fusions' differences from the best single layer \(median (\d+\.\d+) F1\)": "from the best single layer "
        "(median 1.69 F1)",
        r"was 3e-4 in (\d+) of MiniLM's (\d+) trials": "was 3e-4 in 4 of MiniLM's 6 trials",
        r"SmolLM2 layers (\d+)–(\d+) of 30": "SmolLM2 layers 9–11 of 30",
        r"MiniLM (\d+)–(\d+) of 6": "MiniLM 3–4 of 6",
    }
    claims = {words: expected for _, words, expected in COUNTED_CLAIMS}
    for words, text in once.items():
        assert re.search(words, "fusions' differences " + text).groups() != claims[words]()
