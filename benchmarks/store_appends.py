"""What an append to a results store costs as the store grows: 10,000 rows appended one by one, the time and the bytes
written, by today's `ResultsStore.append` (one line at the end) and by the append it replaced (every row read back and
the whole file written again through write-then-rename, as `dwatt.experiment.store` did up to commit 40bc17f, kept
here as `rewrite_append` to measure it).

The row is a real one: the first row of a committed store, its run id changed per append. The rewriting append is
quadratic in the rows, so it runs to `--rewrite-appends` only (its bytes written past that are not measured).

    python benchmarks/store_appends.py

Writes `results/store_appends.json` and `.md` next to this file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import results_files

from dwatt.atomic import write_text_atomically
from dwatt.experiment.store import ResultsStore

REPO = Path(__file__).resolve().parents[1]
ROW_SOURCE = "docs/results/fair-cpu/fair.all-MiniLM-L6-v2.shard-0-of-2.jsonl"


def rewrite_append(store: ResultsStore, row: dict) -> int:
    """The append as it was: every row read back, the whole file written again; the bytes it wrote."""
    lines = [json.dumps(r, sort_keys=True, default=str) for r in store.rows() + [row]]
    text = "\n".join(lines) + "\n"
    write_text_atomically(store.path, text)
    return len(text.encode())


def line_append(store: ResultsStore, row: dict) -> int:
    """Today's append; the bytes it wrote (the file's growth: it writes nothing else)."""
    before = store.path.stat().st_size if store.path.exists() else 0
    store.append(row)
    return store.path.stat().st_size - before


def measure(append, row: dict, appends: int, marks: list[int]) -> list[dict]:
    """`appends` rows appended to a new store by `append`: at each of `marks`, the appends so far, the seconds and
    bytes written in all, and the last 100 appends' mean milliseconds."""
    found, seconds, written, recent = [], 0.0, 0, []
    with tempfile.TemporaryDirectory() as folder:
        store = ResultsStore(Path(folder) / "results.jsonl")
        for index in range(1, appends + 1):
            start = time.perf_counter()
            written += append(store, row | {"run_id": f"{row['run_id']}-{index}"})
            took = time.perf_counter() - start
            seconds += took
            recent = (recent + [took])[-100:]
            if index in marks:
                found.append(
                    {
                        "appends": index,
                        "seconds": round(seconds, 3),
                        "bytes_written": written,
                        "store_bytes": store.path.stat().st_size,
                        "last_100_mean_ms": round(1000 * sum(recent) / len(recent), 3),
                    }
                )
        assert len(store.rows()) == appends
    return found


def markdown(result: dict) -> str:
    lines = [
        "# Appends to a results store: one line, or the whole file again",
        "",
        f"A row of {result['row_bytes']} bytes (the first of `{ROW_SOURCE}`), appended to a new store one at a time. "
        "`line`: today's `ResultsStore.append`; `rewrite`: the append it replaced (every row read back, the whole "
        f"file written again), run to {result['rewrite_appends']} appends. One process, one thread, in turn.",
        "",
        "| append | rows appended | seconds in all | bytes written in all | store's size | ms per append (last 100) |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("rewrite", "line"):
        for mark in result[name]:
            lines.append(
                f"| {name} | {mark['appends']:,} | {mark['seconds']:.2f} | {mark['bytes_written']:,} | "
                f"{mark['store_bytes']:,} | {mark['last_100_mean_ms']:.3f} |"
            )
    lines += ["", results_files.commands_line([result["command"]]).rstrip("\n"), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=10_000)
    parser.add_argument("--rewrite-appends", type=int, default=1_000)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" / "store_appends"))
    args = parser.parse_args(argv)
    row = ResultsStore(REPO / ROW_SOURCE).rows()[0]
    marks = sorted({100, 500, 1_000, 5_000, args.appends} | {args.rewrite_appends})
    result = {
        "row_bytes": len(json.dumps(row, sort_keys=True, default=str)) + 1,
        "rewrite_appends": args.rewrite_appends,
        "rewrite": measure(rewrite_append, row, args.rewrite_appends, [m for m in marks if m <= args.rewrite_appends]),
        "line": measure(line_append, row, args.appends, [m for m in marks if m <= args.appends]),
        "environment": results_files.cpu_facts(),
        "command": results_files.command("store_appends.py", argv),
    }
    output = Path(args.output)
    output.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    output.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
