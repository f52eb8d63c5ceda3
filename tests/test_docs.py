"""The README and the documentation site stay true: the site builds offline in strict mode (every link and anchor
resolves), the README is a front page of at most 300 lines whose links resolve, and every fenced shell or Python
block of the README and the site runs, unless the line before it says what it needs (`<!-- needs: network ... -->`, `vllm`,
`<!-- needs: gpu ... -->`).

A block runs in a fresh folder that holds the repository's files (linked, as in a clone), the runs the pages refer to
(`runs/default`, a tagger; `runs/conll` and
`runs/wikiann-en`, two taggers on one backbone; `runs/agnews`, a classifier), `sentences.txt` and `texts.txt`, and the
placeholders the pages use for the reader's own files: `path/to/encoder` (a tiny random BERT), `path/to/llama` (a
tiny random Llama), `path/to/wikiann`, `path/to/wikitext-2` and `path/to/folder` (tiny datasets in each loader's
layout). To run on tiny configs, the commands are shrunk before they run (`shrink`): `dwatt train`, `probe` and `sweep`
get one epoch, 2 examples per class or entity type, one trial, 20 dev sentences and the tiny BERT where the page
gives no backbone, and Python's `"roberta-large"` becomes the tiny BERT. Everything else runs as written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import write_tiny_datasets

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if "results" not in p.parts)]
FENCE = re.compile(r"^```(\w*)[ \t]*$")
NEEDS = re.compile(r"^<!-- needs: (network|gpu|vllm)\b.*-->$")
RUNNABLE = {"bash", "sh", "python"}
README_LINES = 160
# The remote-code files by their pattern: a block run from the clone imports them from there, and a checkpoint it saves
# copies each one the models file imports relatively.
REPOSITORY_FILES = (
    "mkdocs.yml",
    "docs",
    "README.md",
    "SECURITY.md",
    "dwatt",
    "benchmarks",
    "notebooks",
    *sorted(path.name for path in REPO.glob("*_dwatt.py")),
)


def fenced_blocks() -> list[tuple[str, str, str, str | None]]:
    """(place, language, code, what it needs) of every fenced block of the README and the site's pages."""
    blocks = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        number = 0
        while number < len(lines):
            opening = FENCE.match(lines[number])
            if not opening:
                number += 1
                continue
            end = next(i for i in range(number + 1, len(lines)) if lines[i].startswith("```"))
            before = next((line for line in reversed(lines[:number]) if line.strip()), "")
            needs = NEEDS.match(before)
            place = f"{page.relative_to(REPO)}:{number + 1}"
            blocks.append(
                (place, opening.group(1), "\n".join(lines[number + 1 : end]) + "\n", needs and needs.group(1))
            )
            number = end + 1
    return blocks


BLOCKS = fenced_blocks()
TO_RUN = [block for block in BLOCKS if block[1] in RUNNABLE and block[3] is None]


def test_every_command_block_says_its_language_and_the_shell_and_python_ones_run_or_say_what_they_need():
    unnamed = [place for place, language, _, _ in BLOCKS if not language]
    assert not unnamed, f"fenced blocks without a language (text, bash, python...): {unnamed}"
    marked = [block for block in BLOCKS if block[3] is not None]
    assert all(language in RUNNABLE for _, language, _, _ in marked), "only command blocks take a needs: mark"
    assert len(TO_RUN) >= 12 and marked, "the docs have lost their runnable examples?"


def shrink(code: str, tiny: str) -> str:
    """`code` with `dwatt train` and `dwatt sweep` cut to tiny runs (see the module docstring)."""
    lines = []
    for line in re.sub(r"[ \t]*\\\n[ \t]*", " ", code).splitlines():  # continued lines joined first
        command = re.sub(r"\s+#.*$", "", line)
        if re.search(r"\bdwatt (train|sweep|probe)\b", command):
            command = re.sub(r"--epochs \d+", "--epochs 1", command)
            command = re.sub(r"--n-shot \d+", "--n-shot 2", command)
            command = re.sub(r"--trials \d+", "--trials 1", command)
            command = re.sub(r"--dev-sentences \d+", "--dev-sentences 20", command)
            if "dwatt train" in command or "dwatt probe" in command:
                command += "" if "--backbone" in command else f" --backbone {tiny}"
                command += "" if "--dev-sentences" in command or "--task mlm" in command else " --dev-sentences 20"
                command += "" if "--epochs" in command else " --epochs 1"
            else:
                command += f" --backbones {tiny} --n-shots 2 --epochs 1 --trials 1 --dev-sentences 20"
        lines.append(command)
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_backbone, tiny_decoder) -> Path:
    """What the pages refer to, made once: the placeholders' folders and the runs (see the module docstring)."""
    from dwatt.cli import main

    root = tmp_path_factory.mktemp("docs-workspace")
    for name in REPOSITORY_FILES:  # a clone's files, for the blocks that work on the repository itself (mkdocs)
        (root / name).symlink_to(REPO / name)
    places = root / "path" / "to"
    places.mkdir(parents=True)
    shutil.copytree(tiny_backbone, places / "encoder")
    shutil.copytree(tiny_decoder, places / "llama")
    data = write_tiny_datasets(root / "data")
    shutil.copytree(data["wikiann"], places / "wikiann")
    shutil.copytree(data["wikitext"], places / "wikitext-2")
    for name, repeats in (("valid.txt", 20), ("test.txt", 10)):  # enough text for 128-token blocks in every split
        text = (places / "wikitext-2" / name).read_text()
        (places / "wikitext-2" / name).write_text(text * repeats)
    folder = places / "folder"
    folder.mkdir()
    for name in ("train.csv", "dev.csv"):
        rows = (data["topics"] / name).read_text().splitlines()[1:]
        (folder / name).write_text("review,stars\n" + "".join(f"{row}\n" for row in rows * 4))  # 16 a class and more
    (root / "sentences.txt").write_text("Peter Blackburn visited Brussels .\n\nEU rejects German call .\n")
    (root / "texts.txt").write_text(
        "Stocks rallied after the central bank held rates steady .\nA late goal won it .\n"
    )
    tiny = str(places / "encoder")
    common = ["--backbone", tiny, "--epochs", "1", "--n-shot", "2", "--quiet"]
    for output, extra in (
        ("runs/default", ["--dev-sentences", "20"]),
        ("runs/conll", ["--dev-sentences", "20"]),
        ("runs/wikiann-en", ["--dataset", "wikiann:sw", "--data-dir", str(places / "wikiann")]),
        ("runs/agnews", ["--task", "cls", "--dev-sentences", "20"]),
    ):
        assert main(["train", *common, *extra, "--output-dir", str(root / output)]) == 0, output
    return root


@pytest.mark.parametrize(("place", "language", "code", "needs"), TO_RUN, ids=[block[0] for block in TO_RUN])
def test_the_block_runs(workspace, tmp_path, place, language, code, needs):
    here = tmp_path / "work"
    shutil.copytree(workspace, here, symlinks=True)
    tiny = "path/to/encoder"
    if language == "python":
        code = code.replace('"roberta-large"', f'"{tiny}"')
        command = [sys.executable, "-c", code]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", shrink(code, tiny)]
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    done = subprocess.run(command, cwd=here, env=environment, capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, (
        f"{place}: the block failed\n{command[-1]}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )


def test_the_shrunk_commands_are_the_pages_commands_cut_to_tiny_runs():
    code = "dwatt train --fusion dwatt \\\n    --n-shot 16 --epochs 25   # comment\ndwatt sweep --preset smoke --trials 3\nls\n"
    assert shrink(code, "T") == (
        "dwatt train --fusion dwatt --n-shot 2 --epochs 1 --backbone T --dev-sentences 20\n"
        "dwatt sweep --preset smoke --trials 1 --backbones T --n-shots 2 --epochs 1 --trials 1"
        " --dev-sentences 20\nls\n"
    )


def test_the_readme_is_a_front_page_whose_links_resolve():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_LINES, (
        f"README.md has {len(text.splitlines())} lines (at most {README_LINES})"
    )
    answer = re.search(r"<!-- fair answer: \S+ -->\n(.*?)<!-- end of fair answer -->", text, re.S).group(1)
    assert answer.startswith("| setting | best single layer |"), "the README's answer is a table"
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        path, _, anchor = target.partition("#")
        if re.match(r"^[a-z]+:", path):
            continue
        file = REPO / path if path else REPO / "README.md"
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in {slug(h) for h in headings(file)}:
            broken.append(target)
    assert not broken, f"README.md links that resolve to nothing: {broken}"


def headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")]


def slug(heading: str) -> str:
    """The anchor Markdown renderers (GitHub, mkdocs' toc) give a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_site_builds_offline_in_strict_mode_with_every_page(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    pages = sorted(path.relative_to(tmp_path / "site") for path in (tmp_path / "site").rglob("index.html"))
    assert len(pages) >= 8, pages
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert all(f"dwatt {command}" in cli for command in ("train", "evaluate", "predict", "export", "sweep", "report"))
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "DWAttConfig" in api and "SharedBackboneHeads" in api and "quantize_int8" in api


def dwatt_command_lines() -> list[tuple[str, str]]:
    """(place, command line) of every `dwatt ...` command in every shell block of the README and the site, marked
    `needs:` or not: continued lines joined, comments dropped, each command of a `&&`, `;` or `|` chain apart."""
    import shlex

    found = []
    for place, language, code, _ in BLOCKS:
        if language not in ("bash", "sh"):
            continue
        for line in re.sub(r"[ \t]*\\\n[ \t]*", " ", code).splitlines():
            for part in re.split(r"&&|\|\||;|\||&", re.sub(r"\s+#.*$", "", line)):
                words = shlex.split(part.strip(), posix=True) if part.strip() else []
                while words and re.match(r"^\w+=", words[0]):  # VARIABLE=value before the command
                    words = words[1:]
                if words[:1] == ["dwatt"]:
                    found.append((place, " ".join(shlex.quote(word) for word in words)))
    return found


COMMAND_LINES = dwatt_command_lines()


def test_the_pages_have_dwatt_command_lines_to_check():
    assert len(COMMAND_LINES) >= 40 and any("needs" in str(block[3]) or block[3] for block in BLOCKS)


@pytest.mark.parametrize(
    ("place", "line"), COMMAND_LINES, ids=[f"{place} {line[:60]}" for place, line in COMMAND_LINES]
)
def test_every_dwatt_command_line_in_the_docs_parses(place, line):
    """With the command line's own parser, as `dwatt.cli.main` reads it (sentences may follow a prediction's options):
    a block that needs the network or a GPU is not run, but an option it misspells is still caught."""
    import shlex

    from dwatt.cli import build_parser

    arguments = shlex.split(line)[1:]
    try:
        args, unparsed = build_parser().parse_known_args(arguments)
    except SystemExit:
        pytest.fail(f"{place}: `{line}` does not parse")
    assert not unparsed or (args.command == "predict" and not any(a.startswith("-") for a in unparsed)), (
        f"{place}: `{line}`: unrecognized arguments {unparsed}"
    )
