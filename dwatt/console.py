"""What `dwatt train` shows a person: a short summary at the end of a run (the run's progress bar is the
`training.callbacks.RunProgress` callback).

Three levels, chosen on the command line: the default (one bar over the epochs with the last loss, the dev score
and the best so far, then the summary), `--quiet` (the summary's last line only) and `--verbose` (the `Trainer`'s
own bars and log dictionaries, as transformers prints them, then the summary).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from .tasks import task_named

VERBOSITIES = ("quiet", "normal", "verbose")


def quiet_libraries() -> None:
    """Turn off the progress bars and notices of datasets and transformers (map, weight loading, shard writing):
    the run's own bar and summary say what matters. datasets is told through its environment variable when it is not
    imported yet, so that a command that never reads a dataset (`dwatt predict`) does not pay for importing it."""

    import transformers

    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()
    else:
        os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def _percent(value: float) -> str:
    return f"{100 * value:.2f}"


def scores_table(scores: dict, types: list[str], average: str = "micro") -> list[str]:
    """Per-type (or per-class) precision, recall, F1 and support (in %), then their average over all: `"micro"`
    (seqeval's, NER) or `"macro"` (text classification)."""
    rows = [("type" if average == "micro" else "class", "precision", "recall", "F1", "support")]
    for name in types:
        if f"{name}_f1" in scores:
            rows.append(
                (
                    name,
                    _percent(scores[f"{name}_precision"]),
                    _percent(scores[f"{name}_recall"]),
                    _percent(scores[f"{name}_f1"]),
                    str(scores[f"{name}_support"]),
                )
            )
    support = sum(int(scores.get(f"{name}_support", 0)) for name in types)
    prefix = "" if average == "micro" else "macro_"
    rows.append(
        (
            f"all ({average})",
            _percent(scores[f"{prefix}precision"]),
            _percent(scores[f"{prefix}recall"]),
            _percent(scores[f"{prefix}f1"]),
            str(support),
        )
    )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return [
        "  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        for row in rows
    ]


def headline(results: dict) -> str:
    """The summary's last line: the run's result in one line (all that `--quiet` prints)."""
    where = Path(results["config"]["output_dir"]) / "results.json"
    return f"{console_of(results).headline(results)}; results in {where}"


class RunConsole:
    """How the console tells a run of one task: its headline and its score tables (`CONSOLES`: each task's)."""

    def headline(self, results: dict) -> str:
        raise NotImplementedError

    def score_lines(self, results: dict) -> list[str]:
        return []


def unseen_label_lines(results: dict) -> list[str]:
    """The labels an evaluation split holds that no training example carries (warned about while the run starts;
    said again where the scores are read)."""
    unseen = results.get("unseen_labels") or {}
    if not unseen:
        return []
    described = (
        f"{label!r} ({', '.join(f'{rows} in {split}' for split, rows in counts.items())})"
        for label, counts in unseen.items()
    )
    return [f"labels no training example carries, scored as errors wherever they occur: {', '.join(described)}"]


class TaggingConsole(RunConsole):
    def headline(self, results: dict) -> str:
        test = f", test F1 {_percent(results['test_scores']['f1'])}" if "test_scores" in results else ""
        return (
            f"best dev F1 {_percent(results['best_dev_f1'])} at epoch {results['best_epoch']:g} "
            f"(final {_percent(results['final_dev_f1'])}){test}; {results['num_train_sentences']} training sentences, "
            f"{results['wall_seconds']:.0f} s"
        )

    def score_lines(self, results: dict) -> list[str]:
        lines = [
            f"dev scores at the best epoch ({results['best_epoch']:g}), {results['num_dev_sentences']} sentences:"
        ]
        lines += scores_table(results["best_dev_scores"], results.get("entity_types", []))
        if "test_scores" in results:
            lines.append("test scores of the best dev model:")
            lines += scores_table(results["test_scores"], results.get("entity_types", []))
        return lines + unseen_label_lines(results)


class ClassificationConsole(RunConsole):
    """A text task's run: its score (accuracy, micro-F1 or Spearman, `Task.score`) and, for classes, the table."""

    def headline(self, results: dict) -> str:
        task = task_named(results.get("task", "cls"))
        score, name = task.score, task.score_name
        test = f", test {name} {_percent(results['test_scores'][score])}" if "test_scores" in results else ""
        macro = (
            f" (macro-F1 {_percent(results['best_dev_macro_f1'])})"
            if results.get("best_dev_macro_f1") is not None
            else ""
        )
        return (
            f"best dev {name} {_percent(results[f'best_dev_{score}'])}{macro} at epoch {results['best_epoch']:g}"
            f"{test}; {results['num_train_examples']} training examples, {results['wall_seconds']:.0f} s"
        )

    def score_lines(self, results: dict) -> list[str]:
        task = task_named(results.get("task", "cls"))
        score, name = task.score, task.score_name
        lines = []
        for heading, scores in (
            (
                f"dev scores at the best epoch ({results['best_epoch']:g}), {results['num_dev_examples']} examples",
                results["best_dev_scores"],
            ),
            ("test scores of the best dev model", results.get("test_scores")),
        ):
            if scores is None:
                continue
            lines.append(f"{heading}, {name} {_percent(scores[score])}:")
            if "macro_f1" in scores:
                lines += scores_table(scores, results["labels"], "macro")
            else:
                lines.append("  " + ", ".join(f"{key} {scores[key]:.4f}" for key in sorted(scores)))
        lines += unseen_label_lines(results)
        return lines


class MaskedLMConsole(RunConsole):
    def headline(self, results: dict) -> str:
        test = f", test perplexity {results['test_perplexity']:.2f}" if "test_perplexity" in results else ""
        return (
            f"best dev perplexity {results['best_dev_perplexity']:.2f} at epoch {results['best_epoch']:g}{test}; "
            f"{results['wall_seconds']:.0f} s"
        )


# The console's own mapping: how it tells a run of each task.
CONSOLES = {"tagging": TaggingConsole, "masked_lm": MaskedLMConsole, "classification": ClassificationConsole}


def console_of(results: dict) -> RunConsole:
    return CONSOLES[task_named(results.get("task", "ner")).kind]()


EXAMPLE_WORDS = 12  # a readable length for the `next` hint's example

# The `next` hint's input, from the run's own evaluation data so that it is in the run's language and task, cut to
# `EXAMPLE_WORDS` words; None when the split has nothing to show. Each task's run takes its own.


def _cut(text) -> str:
    return " ".join(str(text).split()[:EXAMPLE_WORDS])


def first_sentence(evaluation) -> str | None:
    """NER: the first sentence's words."""
    return (_cut(" ".join(evaluation[0]["tokens"])) or None) if len(evaluation) else None


def first_text(evaluation, separator: str | None = None) -> str | None:
    """Classification: the first text (a pair joined by the tokenizer's `separator`, as `dwatt predict` reads pairs)."""
    if len(evaluation) == 0:
        return None
    first = evaluation[0]
    pair = first.get("text_pair")
    return _cut(first["text"]) + (f" {separator} {_cut(pair)}" if pair and separator else "")


def masked_prose_line(evaluation, mask_token: str | None) -> str | None:
    """Masked LM: the first line of prose (WikiText headings are "= ... =") with its longest word replaced by
    `mask_token`."""
    for line in evaluation["text"] if len(evaluation) else []:
        words = line.split()[:EXAMPLE_WORDS]
        candidates = [i for i, word in enumerate(words) if i > 0 and word.isalpha() and len(word) > 3]
        if len(words) >= 6 and not line.lstrip().startswith("=") and candidates and mask_token:
            longest = max(candidates, key=lambda i: len(words[i]))
            return " ".join(words[:longest] + [mask_token] + words[longest + 1 :])
    return None


def summary(results: dict, mask_token: str = "[MASK]") -> list[str]:
    """The lines printed at the end of a run: the scores, where the results and the model are, what to try next,
    and the headline last."""
    output_dir = Path(results["config"]["output_dir"])
    lines = console_of(results).score_lines(results)
    lines.append(f"results   {output_dir / 'results.json'}")
    model = output_dir / "model"
    if results["config"].get("save_model", True):
        task = task_named(results.get("task", "ner"))
        example = results.get("example_input") or task.example_input.format(mask=mask_token)
        lines.append(f"model     {model}")
        lines.append(f"next      dwatt predict {shlex.quote(str(model))} {shlex.quote(example)}")
    else:
        lines.append("model     not saved (--no-save)")
    lines.append(headline(results))
    return lines


__all__ = [
    "CONSOLES",
    "VERBOSITIES",
    "ClassificationConsole",
    "MaskedLMConsole",
    "RunConsole",
    "TaggingConsole",
    "console_of",
    "first_sentence",
    "first_text",
    "headline",
    "masked_prose_line",
    "quiet_libraries",
    "scores_table",
    "summary",
]
