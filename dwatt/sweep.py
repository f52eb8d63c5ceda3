"""Experiment grids: the cross product of runs, one results store, resumable after an interruption.

Each run has a readable `run_id` (dataset, backbone, mode, fusion, N, budget, trial, and the options it sets) and an
identity: everything that changes its numbers (`run_settings`: the whole configuration but where it writes and what
it prints, the backbone and data folder by their portable names, and the engine that trained it). The store is one
JSONL file (one row per finished run) rewritten whole through write-then-rename at every finished run, so a crash
leaves the previous complete file and never a half-written one. A restarted sweep skips the runs the store holds with
the same identity and re-does the one that was interrupted; a row with the run's id but other settings (another dev
subset, test scored or not, another cache dtype, data folder or backbone of the same name) is not that run, and the
sweep refuses to mix the two in one store, naming the difference.

Budgets: each epoch budget (25/50/75/100) is its own run, not a prefix of the longest one, because the linear decay
of the learning rate to 0 depends on the budget; a 25-epoch prefix of a 100-epoch run is a different schedule.
The runs of a trial that differ only in their budget still share their sample, initialisation, batch order and
dropout masks, so in the FE setting the sweep trains them together (`dwatt.budgets`): one pass over the data, one
copy of the head per budget, each copy ending exactly as its budget would alone in that loop.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from filelock import FileLock, Timeout
from tqdm.auto import tqdm

from .atomic import read_text, sha256_of, write_text_atomically
from .errors import SweepBusyError
from .portable import backbone_folder, backbone_label, portable_path, portable_results
from .run_config import NOT_DEFINING, RunConfig
from .tasks import TASKS, task_named

# How a sweep trains: "trainer" runs every spec through `transformers.Trainer`; "budgets" trains the epoch budgets
# of an FE run together (`dwatt.budgets`); "auto" does the latter wherever a group has more than one budget.
ENGINES = ("auto", "trainer", "budgets")


@dataclass(frozen=True)
class RunSpec:
    """One run of a grid. `trial` is the seed: it fixes both the few-shot sample and the initialisation, so all
    fusions of a trial see the same sentences. `n_shot` is N (N x C sentences) with `sampling="uniform"`, the
    number of sentences with `sampling="sentences"`, N per class for text classification, and unused by the
    masked-LM task. `learning_rate` (default: the run's, the paper's 5e-5) and `pooling` (text classification)
    appear in the run id when set."""

    fusion: str
    mode: str
    n_shot: int | None
    epochs: int
    trial: int
    dataset: str = "conll2003"
    backbone: str | None = None
    data_dir: str | None = None
    task: str = "ner"
    sampling: str = "uniform"
    dev_sentences: int | None = None
    learning_rate: float | None = None
    pooling: str | None = None
    layers: str | None = None

    @property
    def run_id(self) -> str:
        backbone = backbone_label(self.backbone) if self.backbone else "default"
        size = "" if not TASKS[self.task].few_shot else ("s" if self.sampling == "sentences" else "n") + f"{self.n_shot}/"
        options = (f"/lr{self.learning_rate:g}" if self.learning_rate is not None else "") + (
            f"/{self.pooling}" if self.pooling is not None else "") + (f"/L{self.layers}" if self.layers is not None else "")
        return f"{self.dataset}/{backbone}/{self.mode}/{self.fusion}/{size}e{self.epochs}/t{self.trial}{options}"

    @property
    def budget_group(self) -> "RunSpec":
        """The spec with what runs trained together may differ in blanked (`dwatt.budgets.train_heads`): the epoch
        budget, the learning rate, and for heads on one layer the layer."""
        return replace(self, epochs=0, learning_rate=None, layers=None if probes_layers(self.fusion) else self.layers)

    def run_config(self, output_root: str | Path, **overrides) -> RunConfig:
        return RunConfig(
            backbone=self.backbone,
            task=self.task,
            fusion=self.fusion,
            mode=self.mode,
            dataset=self.dataset,
            data_dir=self.data_dir,
            n_shot=self.n_shot if TASKS[self.task].few_shot else None,
            sampling=self.sampling,
            dev_sentences=self.dev_sentences,
            epochs=self.epochs,
            seed=self.trial,
            output_dir=str(Path(output_root) / self.run_id),
            save_model=False,
            progress=False,
            **({"learning_rate": self.learning_rate} if self.learning_rate is not None else {}),
            **({"pooling": self.pooling} if self.pooling is not None else {}),
            **({"layers": self.layers} if self.layers is not None else {}),
            **overrides,
        )


def grid(
    fusions: Iterable[str],
    modes: Iterable[str] = ("fe",),
    n_shots: Iterable[int | None] = (8, 16, 32, 64, 128),
    epochs: Iterable[int] = (25, 50, 75, 100),
    trials: int = 5,
    datasets: Iterable[str] = ("conll2003",),
    backbones: Iterable[str | None] = (None,),
    data_dir: str | None = None,
    task: str = "ner",
    sampling: str = "uniform",
    dev_sentences: int | None = None,
    learning_rate: float | None = None,
    poolings: Iterable[str | None] = (None,),
    learning_rates: Iterable[float | None] | None = None,
    probe_layers: str | None = None,
) -> list[RunSpec]:
    """The cross product, ordered so that every trial's runs come together (one sample, all fusions).
    `learning_rates`: each run at each of them (default: `learning_rate` alone). `probe_layers` (`all`, `every:k`,
    `a-b` or a list, as `--layers`): the Base head once on each of these layers of each backbone, a probe of every
    layer (the runs of one sample train together on one feature cache)."""
    if not task_named(task).few_shot:  # masked LM trains on the whole split
        n_shots = (None,)
    rates = tuple(learning_rates) if learning_rates is not None else (learning_rate,)
    fusions, modes, n_shots, epochs, datasets, backbones, poolings = (
        tuple(values) for values in (fusions, modes, n_shots, epochs, datasets, backbones, poolings))
    for option, values in (("--fusions", fusions), ("--modes", modes), ("--n-shots", n_shots), ("--epochs", epochs),
                           ("--datasets", datasets), ("--backbones", backbones), ("--learning-rates", rates)):
        if not values:
            raise ValueError(f"{option}: no value given, so the grid would hold no run")
    if trials < 1:
        raise ValueError(f"--trials must be >= 1, got {trials}")
    specs = []
    for dataset, backbone, trial, n, e, mode, pooling, fusion, rate in itertools.product(
        datasets, backbones, range(trials), n_shots, epochs, modes, poolings, fusions, rates
    ):
        layers = probed(backbone, probe_layers) if probes_layers(fusion) and probe_layers is not None else [None]
        specs += [RunSpec(fusion, mode, n, e, trial, dataset, backbone, data_dir, task, sampling, dev_sentences, rate,
                          pooling, layer) for layer in layers]
    return specs


def probed(backbone: str | None, spec: str) -> list[str]:
    """The layers (1..L, as strings) of `backbone` that `spec` names, for probes; `all` is every layer."""
    from transformers import AutoConfig

    from configuration_dwatt import parse_fused_layers

    from .defaults import default_backbone_path
    from .portable import backbone_folder

    count = AutoConfig.from_pretrained(backbone_folder(backbone) if backbone else default_backbone_path()).num_hidden_layers
    return [str(layer) for layer in parse_fused_layers(spec, count, add_last=False)]


def run_settings(config: dict) -> dict:
    """What a run's numbers depend on, from its configuration (a `RunConfig` as a dict, or a results row's `config`):
    every field but `NOT_DEFINING`, the backbone and data folder by their portable names (`portable_path`), and the
    fields a row's code did not know yet at today's defaults, so that rows written before a field existed read as
    today's runs."""
    settings = {key: value for key, value in (asdict(RunConfig()) | config).items() if key not in NOT_DEFINING}
    task = settings["task"]
    if task in TASKS:  # as `RunConfig.validate` fills them
        settings["dataset"] = settings["dataset"] or TASKS[task].default_dataset
        settings["batch_size"] = settings["batch_size"] or TASKS[task].batch_size
    settings["backbone"] = portable_path(backbone_folder(settings["backbone"]))
    settings["data_dir"] = portable_path(settings["data_dir"])
    return settings


WEIGHT_FILES = ("config.json", "*.safetensors", "*.bin")


@functools.lru_cache(maxsize=16)
def _fingerprint(folder: Path, stamp: tuple) -> str:
    """sha256 of the names and sha256s of `folder`'s weight files; `stamp` (names, sizes, times) keys the cache."""
    files = sorted({path for pattern in WEIGHT_FILES for path in folder.glob(pattern) if path.is_file()})
    return hashlib.sha256("".join(f"{path.name}\0{sha256_of(path)}\n" for path in files).encode()).hexdigest()


def backbone_fingerprint(backbone: str | None) -> str | None:
    """sha256 of a local backbone folder's config and weight files, None for a Hub id: a committed row names a backbone
    outside the working folder by its folder's name alone (`portable_path`), and two folders of one name are two
    backbones only this tells apart. Hashed once per process for each folder as it stands."""
    folder = Path(backbone_folder(backbone))
    if not folder.is_dir():
        return None
    stamp = tuple((path.name, path.stat().st_size, path.stat().st_mtime_ns) for path in sorted(folder.iterdir()) if path.is_file())
    return _fingerprint(folder.resolve(), stamp)


def requested_settings(spec: RunSpec, run_overrides: dict) -> dict:
    """`run_settings` of the run `spec` asks for, with its defaults filled in as the run fills them (`validate`), and
    its backbone's fingerprint (`backbone_fingerprint`)."""
    config = spec.run_config(".", **run_overrides)
    config.validate()
    return run_settings(asdict(config)) | {"backbone_sha256": backbone_fingerprint(config.backbone)}


def row_settings(row: dict) -> dict:
    """`run_settings` of a store row: from the configuration the run recorded, or, for a row without one, its spec;
    with its backbone's fingerprint where the row records one."""
    config = row.get("config")
    if not isinstance(config, dict):
        config = asdict(RunSpec(**row["spec"]).run_config("."))
    return run_settings(config) | {"backbone_sha256": row.get("backbone_sha256")}


def same_run(theirs: dict, mine: dict) -> bool:
    """Whether a row's settings are the requested run's; a row from before rows recorded their backbone's
    fingerprint is judged by the rest."""
    if theirs.get("backbone_sha256") is None:
        theirs = theirs | {"backbone_sha256": mine.get("backbone_sha256")}
    return theirs == mine


def row_engine(row: dict) -> str:
    """The engine that trained a row's run; rows written before runs recorded it came from the `Trainer`."""
    return row.get("engine") or "trainer"


def differences(theirs: dict, mine: dict) -> str:
    """`key: A there, B here` for every key whose values differ, the way a refusal names them."""
    keys = sorted(key for key in theirs.keys() | mine.keys() if theirs.get(key) != mine.get(key))
    return "; ".join(f"{key}: {theirs.get(key)!r} there, {mine.get(key)!r} here" for key in keys)


class StoreConflictError(ValueError):
    """A store holds a run of the requested id with other settings: one store keeps one version of each run."""


class ResultsStore:
    """An append-only JSONL file of finished runs, each append an atomic rewrite (write-then-rename)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        rows = []
        for number, line in enumerate(read_text(self.path).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{self.path}:{number}: not a JSON row ({error.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("run_id"), str):
                raise ValueError(f"{self.path}:{number}: a store row is a JSON object with a 'run_id' "
                                 f"(got {type(row).__name__}{'' if not isinstance(row, dict) else ' without run_id'})")
            rows.append(row)
        return rows

    def done(self) -> set[str]:
        return {row["run_id"] for row in self.rows()}

    def finished(self, specs: list[RunSpec], run_overrides: dict | None = None, engine: str = "auto") -> dict[str, dict]:
        """The row of each spec that the store holds with the spec's identity: its id, its settings
        (`requested_settings` with `run_overrides`) and an engine `engine` would train it with (`engines_for`).
        A row with a spec's id and other settings raises `StoreConflictError` naming the difference, where the
        sweep would otherwise either skip a run it never made or store two versions of one run."""
        by_id: dict[str, list[dict]] = {}
        for number, row in enumerate(self.rows(), start=1):
            by_id.setdefault(row["run_id"], []).append(row | {"_line": number})
        finished = {}
        for spec in specs:
            rows = by_id.get(spec.run_id)
            if not rows:
                continue
            wanted = requested_settings(spec, run_overrides or {})
            engines = engines_for(spec, engine, (run_overrides or {}).get("use_cache", True))
            for row in rows:
                try:
                    theirs = row_settings(row)
                except (KeyError, TypeError):
                    raise ValueError(f"{self.path}:{row['_line']}: row {spec.run_id} has neither a 'config' nor a "
                                     "valid 'spec'") from None
                if same_run(theirs, wanted) and row_engine(row) in engines:
                    finished[spec.run_id] = {k: v for k, v in row.items() if k != "_line"}
                    break
            else:
                row = rows[0]
                theirs = row_settings(row) | {"engine": row_engine(row)}
                mine = wanted | {"engine": " or ".join(engines)}
                raise StoreConflictError(
                    f"{self.path}:{row['_line']}: run {spec.run_id} is there with other settings ({differences(theirs, mine)}); "
                    "a store keeps one version of each run: give this command another --results, or remove those rows"
                )
        return finished

    def append(self, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(r, sort_keys=True, default=str) for r in self.rows() + [row]]
        write_text_atomically(self.path, "\n".join(lines) + "\n")


def parse_shard(text: str) -> tuple[int, int]:
    """`"i/n"` (0 <= i < n; 0-based like a SLURM array's task ids and torchrun's ranks) as `(i, n)`."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard: expected i/n (e.g. 0/4), got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {text}: need 0 <= i < n (shards are numbered from 0)")
    return index, count


def work_unit(spec: RunSpec) -> RunSpec:
    """What a shard takes whole: every fusion and epoch budget of one sample (dataset, backbone, mode, N, trial).
    They read the same frozen-backbone features, so one worker computes those once, and a spec's epoch budgets,
    which may train together, never part."""
    return replace(spec, fusion="", epochs=0, learning_rate=None, layers=None)


def shard(specs: list[RunSpec], index: int, count: int) -> list[RunSpec]:
    """
    Shard `index` of `count` of a grid: its work units (`work_unit`) dealt round-robin in grid order, the specs
    in grid order. The shards of one grid are disjoint and together are the grid, whatever runs finished before;
    a grid of fewer units than shards is refused (some shards would have nothing to do).
    """
    units = list(dict.fromkeys(work_unit(spec) for spec in specs))
    if count > len(units):
        raise ValueError(
            f"--shard {index}/{count}: this grid has {len(units)} units of work (one per dataset, backbone, mode, N "
            f"and trial; every fusion and budget of a unit runs together), so use at most {len(units)} shards"
        )
    mine = set(units[index::count])
    return [spec for spec in specs if work_unit(spec) in mine]


def shard_results_path(results: str | Path, index: int, count: int) -> Path:
    """Each shard's own store beside the one a whole sweep writes: results.jsonl -> results.shard-0-of-4.jsonl."""
    results = Path(results)
    return results.with_name(f"{results.stem}.shard-{index}-of-{count}{results.suffix}")


def widest_first(specs: list[RunSpec]) -> list[RunSpec]:
    """The specs with each work unit's fusions that read every layer first: their feature caches hold the one layer
    Base and Base+n read, which then need no backbone pass of their own (`features.FeatureMemo`). Units keep their
    order, and so do the specs within each of the two kinds."""
    units = list(dict.fromkeys(work_unit(spec) for spec in specs))
    return sorted(specs, key=lambda spec: (units.index(work_unit(spec)), reads_one_layer(spec.fusion)))


def probes_layers(fusion: str) -> bool:
    """Whether a grid of `fusion` may spread over the backbone's layers, one head per layer (a probe): heads that pass
    the one layer they read through (`LayerFusion.passes_layer_through`)."""
    from fusions_dwatt import FUSION_CLASSES  # here, not at the top: reading the command line imports no torch

    return FUSION_CLASSES[fusion].passes_layer_through


def reads_one_layer(fusion: str) -> bool:
    """Whether `fusion` reads one layer of the backbone (Base, Base+n) rather than mixing several."""
    from fusions_dwatt import FUSION_CLASSES

    return FUSION_CLASSES[fusion].passes_layer_through or FUSION_CLASSES[fusion].needs_layer_inputs


def stackable(spec: RunSpec, engine: str, use_cache: bool = True) -> bool:
    """Whether `spec` may train with others of its budget group (`budget_group`): FE with the feature cache, of a task
    whose runs train together (`Task.trains_together`), under any engine but "trainer"."""
    return engine != "trainer" and TASKS[spec.task].trains_together and spec.mode == "fe" and use_cache


def engines_for(spec: RunSpec, engine: str, use_cache: bool = True) -> tuple[str, ...]:
    """The engines whose rows are `spec`'s run when a sweep asks for `engine`: "auto" takes either (it picks by the
    size of each group), "budgets" the budgets engine where the run may train with others (the `Trainer` elsewhere),
    "trainer" the `Trainer`."""
    if engine not in ENGINES:
        raise ValueError(f"--engine: unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    if engine == "auto":
        return ("budgets", "trainer") if stackable(spec, engine, use_cache) else ("trainer",)
    return ("budgets",) if stackable(spec, engine, use_cache) else ("trainer",)


def batches_of_runs(specs: list[RunSpec], engine: str, use_cache: bool = True) -> list[tuple[bool, list[RunSpec]]]:
    """
    The specs as the groups that train together, each with whether it goes through `run_together`: under the
    "budgets" engine every FE run with the feature cache of a task that may does, its epoch budgets, learning rates (and a Base
    head's layers) as one group; under "auto" only groups of more than one run do; under "trainer" none. Groups keep
    the order of their first spec.
    """
    if engine not in ENGINES:
        raise ValueError(f"--engine: unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    groups: dict[tuple[bool, RunSpec], list[RunSpec]] = {}
    for spec in specs:
        together = stackable(spec, engine, use_cache)
        groups.setdefault((together, spec.budget_group if together else spec), []).append(spec)
    return [(together and (engine == "budgets" or len(group) > 1), group) for (together, _), group in groups.items()]


def refuse_repeated_ids(specs: list[RunSpec]) -> None:
    """Every run of a grid has its own id (and so its own row and folder); two that share one are named."""
    seen: dict[str, RunSpec] = {}
    for spec in specs:
        if spec.run_id in seen:
            other = seen[spec.run_id]
            raise ValueError(f"the grid holds run {spec.run_id} twice ({differences(asdict(other), asdict(spec)) or 'the same settings'}): "
                             "give backbones folders of different names, or sweep them into separate --results")
        seen[spec.run_id] = spec


def run_sweep(
    specs: list[RunSpec],
    results: str | Path,
    output_root: str | Path | None = None,
    runner: Callable[[RunConfig], dict] | None = None,
    progress: bool = True,
    engine: str = "auto",
    budgets_runner: Callable[[list[RunConfig]], list[dict]] | None = None,
    **run_overrides,
) -> list[dict]:
    """
    Run every spec not yet in the store at `results`, appending one row per finished run (the run's
    `results.json` plus `run_id` and the spec, its paths portable: `portable_results`). Shows a progress bar over runs with an ETA. Returns all rows.
    One sweep at a time per results file: a second one on the same file is refused while the first holds its lock.
    `engine` (see `ENGINES`): how runs train; the epoch budgets of one FE run train together by default.
    """
    from .distributed import launched_processes  # here, so that reading a sweep's options imports no torch
    from .training import run, run_together

    runner, budgets_runner = runner or run, budgets_runner or run_together
    if launched_processes() > 1:
        raise ValueError(
            "dwatt sweep runs under one process: torchrun/accelerate launch are for one data-parallel run "
            "(dwatt train); to spread a sweep over workers, start one `dwatt sweep --shard i/n` per worker"
        )
    store = ResultsStore(results)
    output_root = Path(output_root) if output_root else store.path.parent / "runs"
    store.path.parent.mkdir(parents=True, exist_ok=True)
    try:
        held = FileLock(store.path.with_name(f".{store.path.name}.lock")).acquire(timeout=0)
    except Timeout:
        raise SweepBusyError(
            f"{store.path}: another sweep is writing this results file; two sweeps on one file would run the same "
            "runs twice (wait for it, or give this one another --results)"
        ) from None
    with held:
        refuse_repeated_ids(specs)
        done = store.finished(specs, run_overrides, engine)
        pending = widest_first([spec for spec in specs if spec.run_id not in done])
        bar = tqdm(total=len(specs), initial=len(specs) - len(pending), desc="runs", unit="run", disable=not progress)
        for together, group in batches_of_runs(pending, engine, run_overrides.get("use_cache", True)):
            bar.set_postfix_str(group[0].run_id + (f" (+{len(group) - 1} trained together)" if len(group) > 1 else ""))
            configs = [spec.run_config(output_root, **run_overrides) for spec in group]
            results_of_group = budgets_runner(configs) if together else [runner(configs[0])]
            fingerprint = backbone_fingerprint(group[0].backbone)
            for spec, result in zip(group, results_of_group):
                row = {"run_id": spec.run_id, "spec": asdict(spec), "backbone_sha256": fingerprint} | result
                store.append(portable_results(row, output_root))
            bar.update(len(group))
        bar.close()
        return store.rows()


PAPER_FUSIONS = ("base", "base_plus_n", "concat", "dwatt")
# The 27 languages of the WikiAnn copy in shared/data (Rahimi et al. 2019 splits); reports group them into
# resource tiers by the size of each language's training split, recorded with every run.
WIKIANN_LANGUAGES = (
    "af ar az bn de en es fr gu hi id jv kk mr ms my pa qu ru sw te tl tr ur vi yo zh".split()
)

# Each preset is a set of `grid` arguments; command-line options override them. Backbones are the paper's Hub
# names (they need the network); offline, pass `--backbone` a local folder.
PRESETS = {
    # Figures 2-4: the CoNLL-03 grid in the FE setting.
    "conll-fe": dict(fusions=(*PAPER_FUSIONS, "scalar_mix"), backbones=("roberta-large",)),
    # Figure 6: FE against FT at the smallest and largest N.
    "conll-fe-vs-ft": dict(
        fusions=PAPER_FUSIONS, modes=("fe", "ft"), n_shots=(8, 128), epochs=(50,), backbones=("roberta-large",)
    ),
    # Figure 7: the same fusions on a base- and a large-size backbone, 100 epochs.
    "base-vs-large": dict(fusions=PAPER_FUSIONS, epochs=(100,), backbones=("roberta-base", "roberta-large")),
    # Figure 5: WikiAnn English, 100 training sentences, 25 epochs.
    "wikiann-en": dict(
        fusions=PAPER_FUSIONS, datasets=("wikiann:en",), sampling="sentences", n_shots=(100,), epochs=(25,),
        backbones=("xlm-roberta-large",),
    ),
    # Figures 8-9: every language, same protocol, grouped by resource tier in the report.
    "wikiann-tiers": dict(
        fusions=PAPER_FUSIONS, datasets=tuple(f"wikiann:{lang}" for lang in WIKIANN_LANGUAGES), sampling="sentences",
        n_shots=(100,), epochs=(25,), backbones=("xlm-roberta-large",),
    ),
    # Table 3: WikiText-2 masked-LM perplexity, FT, batch 8, best validation checkpoint.
    "wikitext-mlm": dict(
        fusions=PAPER_FUSIONS, modes=("ft",), task="mlm", datasets=("wikitext2",), epochs=(3,), trials=1,
        backbones=("roberta-large",),
    ),
    # Beyond the paper: few-shot AG News topic classification (the vendored offline split), FE, N examples per
    # class, the offline default backbone (MiniLM). A CPU budget: 20 epochs at 10x the paper's learning rate (a
    # sample of 16 examples makes one step per epoch), 800 evaluation examples.
    "agnews-fe": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"), task="cls", datasets=("ag_news",), n_shots=(4, 8, 16, 32, 64),
        epochs=(20,), trials=3, dev_sentences=800, learning_rate=5e-4,
    ),
    # Which pooling: first-token pooling for every fusion at N = 16 per class, the agnews-fe setting otherwise (whose
    # runs pool by the mean, the default), to compare the two.
    "agnews-pooling": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"), task="cls", datasets=("ag_news",), n_shots=(16,), epochs=(20,),
        trials=3, dev_sentences=800, learning_rate=5e-4, poolings=("first",),
    ),
    # Depth: the same CoNLL-03 FE grid on backbones of 6, 12 and 30 layers (MiniLM, MPNet, the SmolLM2 decoder LLM;
    # pass them with --backbones), every fusion, scored on one fixed 1000 dev sentences.
    "conll-depth": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"), n_shots=(8, 32, 128), epochs=(25,), trials=3, dev_sentences=1000,
    ),
    # Few-shot AG News on a decoder LLM: the agnews-fe protocol at N = 4, 16, 64 per class, pooled the model's way
    # (the last token on a decoder); agnews-depth-pooling adds mean pooling at N = 16 to compare.
    "agnews-depth": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"), task="cls", datasets=("ag_news",), n_shots=(4, 16, 64), epochs=(20,),
        trials=3, dev_sentences=800, learning_rate=5e-4,
    ),
    "agnews-depth-pooling": dict(
        fusions=(*PAPER_FUSIONS, "scalar_mix"), task="cls", datasets=("ag_news",), n_shots=(16,), epochs=(20,),
        trials=3, dev_sentences=800, learning_rate=5e-4, poolings=("mean",),
    ),
    # A minute on a CPU with the offline default backbone: two fusions, one small sample, one short budget, one
    # trial, 200 dev sentences.
    "smoke": dict(fusions=("base", "dwatt"), n_shots=(2,), epochs=(2,), trials=1, dev_sentences=200),
}

__all__ = [
    "ENGINES", "PAPER_FUSIONS", "PRESETS", "WIKIANN_LANGUAGES", "ResultsStore", "RunSpec", "StoreConflictError",
    "SweepBusyError", "batches_of_runs", "engines_for", "grid", "requested_settings", "row_settings", "run_settings", "parse_shard", "run_sweep", "shard", "shard_results_path", "widest_first",
    "work_unit",
]
