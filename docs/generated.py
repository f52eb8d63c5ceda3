"""Rewrite the generated blocks of the README and the site's pages from their sources.

A generated block is `<!-- what: source -->`, the text its source gives, `<!-- end of what -->`. After a benchmark or
`docs/results/report.sh` has run, `python docs/generated.py` brings every block up to date and names the pages it
changed; `tests/test_readme.py` fails while any block differs from its source. Blocks whose source this module does
not know (the main job's output, the shared-heads sentence) are checked by their own tests and left alone.

    python docs/generated.py
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if "results" not in p.parts)]
BLOCK = re.compile(r"(<!-- ([^:\n]+): (\S+) -->\n)(.*?)(<!-- end of \2 -->)", re.DOTALL)


def _module(folder: str, name: str):
    """A benchmark script or test module by file, with its own folder importable (benchmarks import
    `results_files`)."""
    path = REPO / folder / f"{name}.py"
    sys.path.insert(0, str(path.parent))
    sys.path.insert(0, str(REPO))
    try:
        spec = importlib.util.spec_from_file_location(f"_generated_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
        sys.path.remove(str(REPO))
    return module


def _json(source: str) -> dict:
    return json.loads((REPO / source.split("#")[0]).read_text())


def _table_lines(source: str) -> str:
    """The tables of a Markdown file, a blank line between two tables (else they would read as one)."""
    tables, previous = [], False
    for line in (REPO / source).read_text().splitlines():
        table = line.startswith("|")
        if table and not previous and tables:
            tables.append("")
        if table:
            tables.append(line)
        previous = table
    return "".join(line + "\n" for line in tables)


def _support(kind: str) -> Callable[[str], str]:
    def text(_: str) -> str:
        import importlib

        sys.path.insert(0, str(REPO))
        try:
            families = importlib.import_module("tests.test_families")
        finally:
            sys.path.remove(str(REPO))
        return getattr(families, kind)() + "\n"

    return text


GENERATORS: dict[str, Callable[[str], str]] = {
    "benchmarks/results/predict_speed_cpu.json": lambda s: _module("benchmarks", "predict_speed").table(
        _json(s)["rows"]
    ),
    "benchmarks/results/predict_speed_cpu.json#ratios": lambda s: _module("benchmarks", "predict_speed").readme_text(
        _json(s)
    ),
    "benchmarks/results/fusion_speed_cpu.json": lambda s: _module("benchmarks", "fusion_speed").ratio_table(
        _json(s)["rows"]
    ),
    "benchmarks/results/grid_speed_cpu.json": lambda s: _module("benchmarks", "grid_speed").readme_text(_json(s)),
    "benchmarks/results/fe_cache_cpu.json": lambda s: _module("benchmarks", "fe_cache").readme_text(_json(s)),
    "benchmarks/results/probe_speed_cpu.json": lambda s: _module("benchmarks", "probe_speed").readme_text(_json(s)),
    "benchmarks/results/probe_serving_all-MiniLM-L6-v2.json": lambda s: _module(
        "benchmarks", "probe_serving"
    ).readme_text(_json(s)),
    "benchmarks/results/probe_serving_SmolLM2-135M-Instruct-q4.json": lambda s: _module(
        "benchmarks", "probe_serving"
    ).readme_text(_json(s)),
    "benchmarks/results/probe_serving_Qwen2.5-Coder-1.5B-Instruct-q4.json": lambda s: _module(
        "benchmarks", "probe_serving"
    ).readme_text(_json(s)),
    "benchmarks/results/backbone_dtype_cpu.json": lambda s: _module("benchmarks", "backbone_dtype").readme_text(
        _json(s)
    ),
    "benchmarks/results/memory_SmolLM2-135M-Instruct-q4.json": lambda s: _module("benchmarks", "memory").readme_text(
        _json(s)
    ),
    "benchmarks/results/memory_embeddinggemma-300m.json": lambda s: _module("benchmarks", "memory").readme_text(
        _json(s)
    ),
    "benchmarks/results/memory_Qwen2.5-Coder-1.5B-Instruct-q4.json": lambda s: _module(
        "benchmarks", "memory"
    ).readme_text(_json(s)),
    "benchmarks/results/int8_accuracy_cpu.md": _table_lines,
    "benchmarks/results/int8_decoders_cpu.json": lambda s: _module("benchmarks", "int8_decoders").table(_json(s)),
    "docs/results/floor/floor.json": lambda s: _module("benchmarks", "floor").tables_text(_json(s)),
    "docs/results/rerun-noise/rerun_noise.json#readme": lambda s: _module("benchmarks", "rerun_noise").readme_text(
        _json(s)
    ),
    **{
        f"benchmarks/results/engine_throughput_{name}.md": _table_lines
        for name in ("all-MiniLM-L6-v2_cpu", "all-mpnet-base-v2_cpu", "random-large_cuda")
    },
    "benchmarks/results/quantization_speed_cpu.md": _table_lines,
    "benchmarks/results/vllm_serving.md": _table_lines,
    "benchmarks/results/stock_releases.json": lambda s: _module("benchmarks", "stock_releases").table(_json(s)),
    "benchmarks/results/int8_choice.json": lambda s: _module("benchmarks", "int8_choice").table(_json(s)),
    "benchmarks/results/final_norm.json": lambda s: _module("benchmarks", "final_norm").tables_text(_json(s)),
    "benchmarks/results/rerun_cost.md": _table_lines,
    "benchmarks/results/word_readouts_cpu.md": _table_lines,
    "tests/test_families.py#support_table": _support("support_table"),
    "tests/test_families.py#support_summary": _support("support_summary"),
}


def _rank_pass(source: str) -> str:
    """What one `dwatt rank-layers` pass took, from its rank_layers.json."""
    record = _json(source)
    return (
        f"{record['peak_memory_bytes'] / 2**30:.2f} GiB and took {record['seconds']:.0f} s ({record['texts']} texts, "
        f"{record['tokens']} tokens)\n"
    )


def expected(source: str) -> str | None:
    """What the block quoting `source` holds today, or None for a source this module leaves to its own test."""
    if source.startswith("docs/results/rank-layers") and source.endswith("/rank_layers.json"):
        return _rank_pass(source)
    if source.startswith("docs/results/") and "/report/tables/" in source:
        return (REPO / source).read_text()
    generator = GENERATORS.get(source)
    return generator(source) if generator else None


def regenerate(pages: list[Path] = PAGES, write: bool = True) -> list[str]:
    """Bring every known block up to date; returns `page: source` for each block that was stale."""
    stale = []
    for page in pages:
        text = page.read_text()

        def fresh(match: re.Match, page: Path = page) -> str:
            body = expected(match.group(3))
            if body is None or body == match.group(4):
                return match.group(0)
            stale.append(f"{page.relative_to(REPO)}: {match.group(3)}")
            return match.group(1) + body + match.group(5)

        updated = BLOCK.sub(fresh, text)
        if write and updated != text:
            page.write_text(updated)
    return stale


if __name__ == "__main__":
    changed = regenerate()
    print("\n".join(changed) if changed else "every generated block is up to date")
