"""`dwatt predict`'s lines in and out: every input line gets exactly one output line, in order.

Inputs are the sentences given as arguments, then `--file`, then `--jsonl`'s file or stdin, read as they are
consumed so that output streams. A line ends at `\\n` alone (a `\\r` before it is dropped, so CRLF files read as their
LF twins; a lone `\\r` is part of the line), as `wc -l` and `paste` count lines; a leading byte-order mark is read
as nothing. A blank line (empty or whitespace only) is not run through the model and gets an empty record: an empty
line in text output, and a record with empty fields in JSONL. JSONL records carry `line`, the input line's number
(1-based, counted over the arguments first, then the files), so `paste input output` and a join on `line` both work.

Sentences given only as arguments print the readable forms (a tagger's word-per-line blocks, a masked LM's candidates
per mask); `--file` and `--jsonl` print one line per input line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator


class InputLines:
    """Every line `dwatt predict` reads, blank ones included, as `(number, text)`; counts the blank and the non-blank
    lines as it goes, and knows how many lines the files hold."""

    def __init__(self, sentences: list[str], sources: list[str]):
        self.sentences, self.sources, self.blank, self.read = sentences, sources, 0, 0

    def total(self) -> int | None:
        """How many lines there are to read, where they come from arguments and files (None for stdin)."""
        if "-" in self.sources:
            return None
        counted = len(self.sentences)
        for source in self.sources:
            with open(source, "rb") as handle:
                counted += sum(1 for _ in handle)
        return counted

    def __iter__(self) -> Iterator[tuple[int, str]]:
        for number, line in enumerate(self._all(), start=1):
            if line.strip():
                self.read += 1
            else:
                self.blank += 1
            yield number, line

    def _all(self) -> Iterator[str]:
        yield from self.sentences
        for source in self.sources:
            if source == "-":
                if sys.stdin is None or sys.stdin.closed:
                    raise ValueError("--jsonl: standard input is closed; give a file, or pipe lines into it")
                handle, name = getattr(sys.stdin, "buffer", sys.stdin), "standard input"
            else:
                handle, name = open(source, "rb"), source
            try:
                for number, raw in enumerate(handle):
                    line = decoded(raw, name, number + 1).removesuffix("\n").removesuffix("\r")
                    yield line.removeprefix("\ufeff") if number == 0 else line
            finally:
                if source != "-":
                    handle.close()


def decoded(raw: bytes | str, source: str, number: int) -> str:
    """One input line as text; bytes that are not UTF-8 are refused naming the source, the line and the byte."""
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{source}:{number}: not UTF-8 ({error.reason} at byte {error.start + 1} of the line)"
        ) from None


def is_blank(text: str) -> bool:
    return not text.strip()


def predicted_in_order(
    chunk: list[tuple[int, str]], predict: Callable[[list[str]], list]
) -> Iterator[tuple[int, str, object]]:
    """`(number, text, result)` for every line of `chunk`, in order: `predict` runs once on the non-blank texts, and
    a blank line's result is None."""
    results = iter(predict([text for _, text in chunk if not is_blank(text)]))
    for number, text in chunk:
        yield number, text, None if is_blank(text) else next(results)


class Writer:
    """Writes one task's results in one of three forms: `"json"` (a JSON record per input line), `"line"` (a text
    line per input line) or `"block"` (the readable multi-line form, for sentences given as arguments)."""

    def __init__(self, form: str, out=None):
        self.form, self.out = form, out or sys.stdout

    def write(self, number: int, text: str, result) -> None:
        if self.form == "json":
            record = {"line": number, "text": text} | self.record(text, result)
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")
        elif self.form == "line":
            self.out.write(("" if result is None else self.line(text, result)) + "\n")
        else:
            self.out.write(self.block(text, result) + "\n")

    def record(self, text: str, result) -> dict:
        raise NotImplementedError

    def line(self, text: str, result) -> str:
        raise NotImplementedError

    def block(self, text: str, result) -> str:
        return "" if result is None else self.line(text, result)


class TagWriter(Writer):
    """A tagger's result: `(words, tags)`. A line: the tags, one per whitespace-separated word."""

    def record(self, text, result):
        words, tags = result if result is not None else ([], [])
        return {"words": words, "tags": tags}

    def line(self, text, result):
        return " ".join(result[1])

    def block(self, text, result):
        if result is None:
            return ""
        return "\n".join(f"{word} {tag}" for word, tag in zip(*result)) + "\n"


class HeadsWriter(Writer):
    """Several taggers' results on one backbone: `(words, {head: tags})`. A line: each head's tags, tab-separated, in
    the order of `--heads`."""

    def __init__(self, form: str, heads: list[str], out=None):
        super().__init__(form, out)
        self.heads = heads

    def record(self, text, result):
        words, tags = result if result is not None else ([], {name: [] for name in self.heads})
        return {"words": words, "tags": tags}

    def line(self, text, result):
        return "\t".join(" ".join(result[1][name]) for name in self.heads)

    def block(self, text, result):
        if result is None:
            return ""
        words, tags = result
        rows = ["word " + " ".join(self.heads)]
        rows += [" ".join([word, *(tags[name][i] for name in self.heads)]) for i, word in enumerate(words)]
        return "\n".join(rows) + "\n"


class LabelWriter(Writer):
    """A text checkpoint's result (`prediction.classify`): its `label` and `scores` (`{label: probability}`, most likely
    first), or a multi-label's `labels`, or a regression's `score`. A line: `label<TAB>probability<TAB>text`, or the
    labels joined by commas, or the score, then the text."""

    def record(self, text, result):
        return {"label": None, "scores": {}} if result is None else result

    def line(self, text, result):
        if "score" in result:
            return f"{result['score']:.4f}\t{text}"
        if "labels" in result:
            return f"{','.join(result['labels'])}\t{text}"
        return f"{result['label']}\t{result['scores'][result['label']]:.3f}\t{text}"


class MaskWriter(Writer):
    """A masked LM's result: per mask, the `(token, probability)` candidates. A line: each mask's candidates,
    tab-separated, as `token (p), token (p), ...`."""

    def record(self, text, result):
        return {"masks": [] if result is None else [[[token, p] for token, p in mask] for mask in result]}

    def line(self, text, result):
        return "\t".join(", ".join(f"{token} ({p:.3f})" for token, p in mask) for mask in result)

    def block(self, text, result):
        if result is None:
            return ""
        lines = [text] + [
            f"  mask {number}: " + ", ".join(f"{token} ({p:.3f})" for token, p in candidates)
            for number, candidates in enumerate(result, start=1)
        ]
        return "\n".join(lines) + "\n"


def write_all(
    lines: Iterable[tuple[int, str]], chunk_size: int, predict: Callable[[list[str]], list], writer: Writer
) -> None:
    """Every input line's result, chunk by chunk (each chunk predicted in one call, then written and flushed)."""
    from .prediction import chunks

    for chunk in chunks(lines, chunk_size):
        for number, text, result in predicted_in_order(chunk, predict):
            writer.write(number, text, result)
        writer.out.flush()


# What `dwatt predict` runs on a chunk of lines and how it writes them, one per task (`LINE_PREDICTORS`). `form`:
# "block", "line" or "json" (see the writers).


def tagging(model, tokenizer, batch_size: int, form: str) -> tuple[Callable[[list[str]], list], Writer]:
    """NER: each line split on whitespace into words, tagged."""
    from .prediction import predict_tags

    def predict(texts: list[str]) -> list:
        sentences = [text.split() for text in texts]
        return list(zip(sentences, predict_tags(model, tokenizer, sentences, batch_size)))

    return predict, TagWriter(form)


def classifying(model, tokenizer, batch_size: int, form: str) -> tuple[Callable[[list[str]], list], Writer]:
    """Text classification: each line's label and probabilities."""
    from .prediction import classify

    return (lambda texts: classify(model, tokenizer, texts, batch_size)), LabelWriter(form)


def mask_filling(model, tokenizer, batch_size: int, form: str) -> tuple[Callable[[list[str]], list], Writer]:
    """Masked LM: each mask's candidates."""
    from .prediction import fill_masks

    return (lambda texts: fill_masks(model, tokenizer, texts, batch_size=batch_size)), MaskWriter(form)


# Serving's own mapping: what `dwatt predict` runs for each task.
LINE_PREDICTORS = {"tagging": tagging, "masked_lm": mask_filling, "classification": classifying}

__all__ = [
    "LINE_PREDICTORS",
    "HeadsWriter",
    "InputLines",
    "LabelWriter",
    "MaskWriter",
    "TagWriter",
    "Writer",
    "classifying",
    "mask_filling",
    "predicted_in_order",
    "tagging",
    "write_all",
]
