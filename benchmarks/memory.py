"""Memory, measured: the peak memory of `dwatt probe`, `dwatt train`, `dwatt predict` and `dwatt export` (fp32, and
with `--quantize int8`) on one backbone, each run as a user runs it (the console script, in a process of its own), its
memory read from `/proc/<pid>/status` every 50 ms (the process and any it starts).

Two figures per command:
- `peak_anon_gib`: the peak of anonymous memory (`RssAnon`: the weights, activations, heads and every cache kept in
  memory). It leaves out the pages of memory-mapped files (a feature cache sent to disk), which the system can drop
  and read again, so it is what a memory budget (`--max-memory`) bounds;
- `peak_rss_gib`: the peak resident set (`VmRSS`), file pages included: what `top` shows.

Also recorded: the wall time, the size on disk of the feature caches the command kept (`.feature-cache` beside its
output), the command line, the CPU, and whether it has bf16 and AMX instructions.

    python benchmarks/memory.py --backbone models/SmolLM2-135M-Instruct-q4 --max-memory 8GiB --threads 2
    python benchmarks/memory.py --backbone models/Qwen2.5-Coder-1.5B-Instruct-q4 --max-memory 8GiB --threads 2 \
      --commands probe
    python benchmarks/memory.py --backbone models/Qwen2.5-Coder-1.5B-Instruct-q4 --max-memory 8GiB --threads 2 \
      --commands export,export-int8 --work qwen   # the probe's chosen head in qwen/probe/chosen/model

Writes `results/memory_<backbone>.json` and `.md` next to this file (or into --output); a command measured again
replaces its record, the others stay.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMANDS = ("probe", "train", "predict", "export", "export-int8", "export-stock")
GIB = 2**30


def _status(pid: int) -> dict[str, int]:
    """`VmRSS` and `RssAnon` of one process, in bytes (empty once it has ended)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "RssAnon") if key in fields}


def _tree(pid: int) -> list[int]:
    """The process and its descendants."""
    import psutil

    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return [pid]


class PeakMemory:
    """Polls a running process tree's memory every `interval` seconds in a thread, keeping the peaks of the sums."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid, self.interval = pid, interval
        self.peak_anon = self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            statuses = [_status(pid) for pid in _tree(self.pid)]
            self.peak_anon = max(self.peak_anon, sum(s.get("RssAnon", 0) for s in statuses))
            self.peak_rss = max(self.peak_rss, sum(s.get("VmRSS", 0) for s in statuses))
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {"peak_anon_gib": round(self.peak_anon / GIB, 3), "peak_rss_gib": round(self.peak_rss / GIB, 3)}


def measured(argv: list[str], stdin: str | None = None, env: dict | None = None, interval: float = 0.05) -> dict:
    """Run `argv` with `stdin`, its memory polled every `interval` seconds (`PeakMemory`): the peaks, the wall time and
    the exit code; its output's last lines where it failed."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    peak = PeakMemory(process.pid, interval)
    out, err = process.communicate(stdin)
    record = {**peak.stop(), "wall_s": round(time.perf_counter() - started, 1), "exit_code": process.returncode}
    if process.returncode:
        record["error"] = (err or out).strip().splitlines()[-5:]
    return record


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


def command_lines(args, work: Path) -> dict[str, tuple[list[str], str | None]]:
    """Each command's argument list (after `dwatt`) and standard input."""
    common = ["--backbone", args.backbone, "--n-shot", str(args.n_shot), "--epochs", str(args.epochs)]
    if args.max_memory:
        common += ["--max-memory", args.max_memory]
    if args.dev_sentences:
        common += ["--dev-sentences", str(args.dev_sentences)]
    if args.cache_dtype:
        common += ["--cache-dtype", args.cache_dtype]
    threads = ["--threads", str(args.threads)] if args.threads else []
    probe = ["probe", *common, "--test", "--quiet", "--results", str(work / "probe" / "results.jsonl"), *threads]
    train = [
        "train",
        *common,
        "--fusion",
        "dwatt",
        "--test",
        "--quiet",
        "--output-dir",
        str(work / "train" / "run"),
        *threads,
    ]
    from dwatt.data import load_conll2003

    test = load_conll2003()["test"]
    lines = "\n".join(" ".join(row) for row in test["tokens"][: args.predict_sentences] if row) + "\n"
    chosen = str(work / "probe" / "chosen" / "model")
    predict = ["predict", chosen, "--file", "-", "--quiet", *threads]
    budget = ["--max-memory", args.max_memory] if args.max_memory else []
    export = ["export", chosen, str(work / "export" / "fp32"), *budget, *threads]
    int8 = ["export", chosen, str(work / "export" / "int8"), "--quantize", "int8", *budget, *threads]
    # the stock export needs a head the family's stock class computes: a decoder's read through its final norm
    stock_head = args.stock_head or chosen
    stock = ["export", stock_head, str(work / "export" / "stock"), "--format", "transformers", *budget, *threads]
    return {
        "probe": (probe, None),
        "train": (train, None),
        "predict": (predict, lines),
        "export": (export, None),
        "export-int8": (int8, None),
        "export-stock": (stock, None),
    }


def command_name(command: str) -> str:
    """How a measured command reads: `export-int8` is `dwatt export --quantize int8`."""
    return {"export-int8": "export --quantize int8", "export-stock": "export --format transformers"}.get(
        command, command
    )


def table(records: list[dict]) -> str:
    lines = [
        "| backbone | command | peak anonymous (GiB) | peak RSS (GiB) | feature cache on disk (GiB) | wall (s) | exit |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['backbone']} | {command_name(r['command'])} | {r['peak_anon_gib']:.2f} | {r['peak_rss_gib']:.2f} | "
            f"{r['cache_on_disk_gib']:.2f} | {r['wall_s']:.0f} | {r['exit_code']} |"
        )
    return "\n".join(lines) + "\n"


def readme_text(result: dict) -> str:
    """One line of the docs per backbone: each command's peaks under the budget."""
    records = result["records"]
    parts = [
        f"`dwatt {command_name(r['command'])}` {r['peak_anon_gib']:.2f} GiB anonymous ({r['peak_rss_gib']:.2f} GiB resident"
        + (f", {r['cache_on_disk_gib']:.2f} GiB of features on disk" if r["cache_on_disk_gib"] else "")
        + ")"
        for r in records
    ]
    return (
        f"{Path(records[0]['backbone']).name}, `--max-memory {result['max_memory']}`, CoNLL-03 N = 32 with "
        f"`--test`: " + "; ".join(parts) + ".\n"
    )


def markdown(name: str, result: dict) -> str:
    """The table, then how each command's record was measured (records of several runs share a file: each run
    replaces only the commands it measures; `command` at the top is the latest run's)."""

    def machine(facts: dict) -> str:
        return (
            f"{facts['cpu']}, {'with' if facts['avx512_bf16'] else 'without'} AVX-512 BF16, "
            f"{'with' if facts['amx_bf16'] else 'without'} AMX"
        )

    how = "\n".join(
        f"- {r['command']}: `{r['measured_by']}`"
        + (f" {r['note']}" if r.get("note") else "")
        + (f" ({machine(r['machine'])}.)" if "machine" in r else "")
        for r in result["records"]
    )
    return (
        f"# Peak memory of dwatt's commands on {name}\n\nThe latest run's CPU: {machine(result)}; each command's is "
        "named below.\n\n" + table(result["records"]) + "\nMeasured by:\n\n" + how + "\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", required=True)
    parser.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated, of " + ", ".join(COMMANDS))
    parser.add_argument("--max-memory", default="8GiB")
    parser.add_argument("--n-shot", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--dev-sentences", type=int, default=None)
    parser.add_argument(
        "--cache-dtype",
        default=None,
        help="as dwatt's (bfloat16 for a backbone whose features "
        "overflow float16, such as EmbeddingGemma's last layer)",
    )
    parser.add_argument("--predict-sentences", type=int, default=500)
    parser.add_argument(
        "--stock-head",
        default=None,
        help="export-stock: the head exported as a stock model (default: the probe's chosen head; a decoder's must "
        "read its layer through the final norm, e.g. dwatt train --fusion base --layers K --through-final-norm)",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--work", default=None, help="where the commands write (default: a scratch folder, removed)")
    parser.add_argument("--output", default=str(HERE / "results"))
    parser.add_argument("--note", default=None, help="what else the machine ran meanwhile (wall times depend on it)")
    args = parser.parse_args(argv)
    import results_files

    from dwatt.portable import portable_path

    wanted = [name for name in args.commands.split(",") if name]
    unknown = sorted(set(wanted) - set(COMMANDS))
    if unknown:
        parser.error(f"--commands: unknown {unknown}; expected some of {', '.join(COMMANDS)}")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="dwatt-memory-"))
    beside = Path(sys.executable).with_name("dwatt")  # this interpreter's console script, not another one on PATH
    dwatt = str(beside) if beside.exists() else shutil.which("dwatt")
    name = Path(args.backbone.rstrip("/")).name
    stem = f"memory_{name}"
    path = Path(args.output) / f"{stem}.json"
    previous = json.loads(path.read_text()) if path.exists() else {"records": []}
    cpu_keys = ("cpu", "cores", "avx512_bf16", "amx_bf16")
    for record in previous["records"]:  # measured before records said how: the file's own line, note and CPU did
        record.setdefault("measured_by", previous.get("command"))
        record.setdefault("note", previous.get("note"))
        record.setdefault("machine", {key: previous.get(key) for key in cpu_keys})
    records = [r for r in previous["records"] if r["command"] not in wanted]
    measured_by = results_files.command("memory.py", argv)
    lines = command_lines(args, work)
    for command in wanted:
        arguments, stdin = lines[command]
        print(f"{command}: dwatt {' '.join(arguments)}", file=sys.stderr, flush=True)
        record = measured([dwatt, *arguments], stdin)
        caches = sum(folder_bytes(folder) for folder in (work / command).rglob(".feature-cache"))
        record.update(
            backbone=portable_path(args.backbone),
            command=command,
            command_line="dwatt "
            + " ".join(
                a.replace(str(work), "WORK") if str(work) in a else portable_path(a) if Path(a).exists() else a
                for a in arguments
            ),
            cache_on_disk_gib=round(caches / GIB, 3),
            measured_by=measured_by,
            note=args.note,
            machine=results_files.cpu_facts(),
        )
        print(json.dumps(record), file=sys.stderr, flush=True)
        records.append(record)
    records.sort(key=lambda r: COMMANDS.index(r["command"]))
    result = {
        "benchmark": "memory",
        "command": measured_by,
        **results_files.cpu_facts(),
        "environment": results_files.environment(),
        "max_memory": args.max_memory,
        "records": records,
    }
    results_files.write(args.output, stem, result, markdown(name, result))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
