"""mkdocs hooks: the README is the site's home page, repository files the pages link to outside `docs/` are served
under `repo/`, and the command-line reference is generated from the argparse parser.

Pages link to repository files by their path relative to the page's own place in the repository (so that the links
also work where the Markdown is read as files, on a forge or in an editor); links that leave `docs/` are rewritten
here to the copies under `repo/`.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SERVED = "repo"  # where repository files outside docs/ appear on the site
LINK = re.compile(r"(\]\()([^)\s]+)(\))|(\bsrc=\")([^\"]+)(\")")
CLI_MARKER = "<!-- generated: dwatt.cli.build_parser -->"


def _targets(text: str, folder: Path) -> set[Path]:
    """The repository files outside docs/ that `text` (a file in `folder`) links to."""
    found = set()
    for match in LINK.finditer(text):
        target = (match.group(2) or match.group(5)).split("#", 1)[0]
        if not target or re.match(r"^[a-z]+:", target) or target.startswith("/"):
            continue
        real = (folder / target).resolve()
        if real.is_file() and REPO in real.parents and DOCS not in real.parents:
            found.add(real)
    return found


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "index.md", abs_src_path=str(REPO / "README.md")))
    pending = [REPO / "README.md", *DOCS.rglob("*.md")]
    served: set[Path] = set()
    while pending:
        source = pending.pop()
        for target in _targets(source.read_text(encoding="utf-8"), source.parent) - served:
            served.add(target)
            files.append(
                File.generated(config, f"{SERVED}/{target.relative_to(REPO).as_posix()}", abs_src_path=str(target))
            )
            if target.suffix == ".md":
                pending.append(target)
    return files


def _site_path(real: Path) -> str:
    if real == REPO / "README.md":
        return "index.md"
    if DOCS in real.parents:
        return real.relative_to(DOCS).as_posix()
    return f"{SERVED}/{real.relative_to(REPO).as_posix()}"


def on_page_markdown(markdown: str, page, config, files) -> str:
    real_page = Path(page.file.abs_src_path)
    here = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match) -> str:
        start, target, end = (
            (match.group(1), match.group(2), match.group(3)) if match.group(1) else match.group(4, 5, 6)
        )
        path, hash_, anchor = target.partition("#")
        if not path or re.match(r"^[a-z]+:", path) or path.startswith("/"):
            return match.group(0)
        real = (real_page.parent / path).resolve()
        if not real.exists() or REPO not in real.parents:
            return match.group(0)  # left for mkdocs to report
        if real.is_dir():
            return match.group(0)
        new = posixpath.relpath(_site_path(real), here or ".")
        return f"{start}{new}{hash_}{anchor}{end}"

    markdown = LINK.sub(rewrite, markdown)
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return markdown


def cli_reference() -> str:
    """Every command's `--help`, from the parser `dwatt` itself runs."""
    import argparse

    from dwatt.cli import build_parser

    os.environ.setdefault("COLUMNS", "100")
    parser = build_parser()
    sections = [f"## dwatt\n\n```text\n{parser.format_help()}```\n"]
    for action in parser._actions:  # argparse keeps its subcommands here and nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                sections.append(f"## dwatt {name}\n\n```text\n{command.format_help()}```\n")
    return "\n".join(sections)
