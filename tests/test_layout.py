"""The house's import graph flows one way. The package's layers, its lab's seam and the absence of circles are
import-linter contracts (pyproject.toml's [tool.importlinter]): checked here on the package, and shown to break on a
copy with a forbidden import planted. The remote-code files beside the package (`*_dwatt.py`), which import-linter
cannot read as a package, are read statically here: function-level, fallback and annotation-only imports included."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dwatt"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


REMOTE_CODE = {path.stem: path for path in PACKAGE.parent.glob("*_dwatt.py")}


def import_graph() -> dict[str, set[str]]:
    """`{module: modules of the house it imports}`. `from pkg import x` imports `pkg` itself (its `__init__`, where
    the name is looked up) and, where x is a submodule, x too; `import dwatt` imports the package's `__init__`. A
    remote-code file is a top-level module (`modeling_dwatt`), imported relatively as remote code."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")} | REMOTE_CODE
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        edges = set()
        source = ast.parse(path.read_text(), str(path))
        for node in ast.walk(source):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name.split(".")[0] in {"dwatt", *REMOTE_CODE}}
            elif isinstance(node, ast.ImportFrom):
                if node.level and name in REMOTE_CODE:
                    base = node.module
                elif node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                elif (node.module or "").split(".")[0] in {"dwatt", *REMOTE_CODE}:
                    base = node.module
                else:
                    continue
                edges.add(base)
                edges |= {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules}
        graph[name] = {edge for edge in edges if edge in modules and edge != name}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_reader_sees_relative_function_level_and_annotation_imports():
    graph = import_graph()
    assert "dwatt.auto" in graph["dwatt"] and "dwatt.checkpoints" in graph["dwatt.serving.shared_heads"]
    assert "dwatt.serving.shared_heads" in graph["dwatt.cli.predict"]  # imported inside a function
    assert "dwatt.training.callbacks" in graph["dwatt.training.trainer_run"]
    assert "configuration_dwatt" in graph["backbones_dwatt"]  # under `if TYPE_CHECKING:`


@pytest.mark.parametrize("module", sorted(REMOTE_CODE))
def test_no_remote_code_file_imports_one_that_imports_it_back(module):
    """import-linter's no-circle contract reads the package; the remote-code files beside it are read here, their
    imports for annotations only included (a circle a type checker follows is still a circle)."""
    graph = import_graph()
    circle = sorted(other for other in graph[module] if module in reachable(graph, other))
    assert not circle, f"{module} imports {circle}, which import {module} back"


def test_the_house_has_no_circle_through_the_remote_code_files():
    graph = import_graph()
    assert {"configuration_dwatt", "base_model_dwatt", "pretrained_dwatt"} <= graph["modeling_dwatt"]
    assert "fusions_dwatt" in graph["base_model_dwatt"]
    assert "modeling_dwatt" in graph["dwatt.auto"]
    # the configuration at the bottom: it reaches the fusions' facts alone, never a file that imports torch
    assert reachable(graph, "configuration_dwatt") == {"specs_dwatt"}
    # the remote code travels alone with a checkpoint: it never imports the package
    assert not any(in_package(m, "dwatt") for name in REMOTE_CODE for m in reachable(graph, name))


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's contracts (pyproject.toml's [tool.importlinter]) checked on the package under `root`."""
    environment = {**os.environ, "PYTHONPATH": str(root)}
    command = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", command, "--config", str(root / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=root,
        env=environment,
    )


def test_the_package_keeps_its_import_contracts():
    checked = lint_imports(PACKAGE.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 broken" in checked.stdout and "kept" in checked.stdout


def planted(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the package and its contracts with `line` added at the top of `module`'s file."""
    shutil.copytree(PACKAGE, tmp_path / "dwatt", ignore=shutil.ignore_patterns("__pycache__", "resources"))
    shutil.copy(PACKAGE.parent / "pyproject.toml", tmp_path)
    path = tmp_path / (module.replace(".", "/") + ".py")
    path.write_text(line + "\n" + path.read_text())
    return tmp_path


@pytest.mark.parametrize(
    "module, line, broken",
    [
        ("dwatt.tasks", "from dwatt.cli import entry", "Layers:"),  # the core reaching the command line
        ("dwatt.serving.evaluation", "import dwatt.training.trainer_run", "Layers:"),  # one role reaching another
        ("dwatt.experiment.grid", "from dwatt.training import EXECUTION", "The lab trains through its seam"),
        ("dwatt.experiment.probe_types", "import dwatt.experiment.report", "The lab's runs"),
        (
            "dwatt.experiment.probe_types",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dwatt.experiment.probe import choose",
            "No circle",
        ),
    ],
)
def test_a_forbidden_import_planted_in_a_copy_breaks_its_contract(tmp_path, module, line, broken):
    checked = lint_imports(planted(tmp_path, module, line))
    assert checked.returncode != 0, checked.stdout + checked.stderr
    report = checked.stdout.split("Broken contracts", 1)[1]
    assert broken in report and module.rsplit(".", 1)[-1] in report


def test_every_module_of_the_package_has_its_place_in_the_layers():
    """A new module directly under dwatt/ is placed in the layers contract, not left outside every rule."""
    import tomllib

    contracts = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(contract for contract in contracts if contract["id"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    present = {
        f"dwatt.{path.stem if path.is_file() else path.name}"
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }
    assert present - named == set() and named - present == set()


def test_importing_the_remote_code_registers_nothing_and_dwatt_registers_in_one_place():
    """In a fresh interpreter, importing the remote-code files by their names (as a script beside them would) changes
    no Auto class; `dwatt.auto.register_auto_classes` is the one place that registers the DWAtt classes, and the
    config's Auto class finds the models after it."""

    script = (
        "import transformers\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
        "from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING as mapping\n"
        "from configuration_dwatt import DWAttConfig\n"
        "import modeling_dwatt\n"
        "assert 'dwatt' not in CONFIG_MAPPING and DWAttConfig not in mapping\n"
        "from dwatt.auto import register_auto_classes\n"
        "register_auto_classes()\n"
        "assert mapping[DWAttConfig] is modeling_dwatt.DWAttForTokenClassification\n"
        "encoder = transformers.BertConfig(vocab_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)\n"
        "config = transformers.AutoConfig.for_model('dwatt', encoder_config=encoder.to_dict(), num_labels=3)\n"
        "model = transformers.AutoModelForSequenceClassification.from_config(config)\n"
        "assert type(model) is modeling_dwatt.DWAttForSequenceClassification, type(model)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=PACKAGE.parent)


def test_no_test_file_imports_another():
    """Test files share helpers through modules that hold no tests (helpers.py, families.py, conftest.py)."""
    tests = Path(__file__).resolve().parent
    offenders = []
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.name} imports {name}" for name in names if name.split(".")[-1].startswith("test_")]
    assert offenders == []


def test_every_module_has_a_test_file_of_its_own():
    """dwatt/.../<name>.py is tested in tests/test_<name>.py, or test_<package>_<name>.py; where two packages hold a
    module of one name (data/ner.py, training/ner.py), only the second names one of them. Tests of a story across
    modules live in the file of the module the story ends in; a new module comes with its file."""
    from collections import Counter

    tests = Path(__file__).resolve().parent
    modules = sorted(
        path.relative_to(PACKAGE) for path in PACKAGE.rglob("*.py") if path.stem not in ("__init__", "__main__")
    )
    stems = Counter(path.stem for path in modules)

    def own_files(module: Path) -> list[str]:
        names = [f"test_{module.parent.name}_{module.stem}.py"] if module.parent.name else []
        names += [f"test_{module.stem}.py"] if stems[module.stem] == 1 else []
        return [name for name in names if (tests / name).exists()]

    assert [str(module) for module in modules if not own_files(module)] == []


# The experiment side's tables and figures: the only modules that import pandas (and the figures matplotlib).
TABLES = (
    "dwatt.experiment.report",
    "dwatt.experiment.fair_report",
    "dwatt.experiment.fair_answer",
    "dwatt.experiment.across_settings",
    "dwatt.experiment.table_text",
    "dwatt.experiment.summaries",
    "dwatt.experiment.methods",
    "dwatt.experiment.selection",
    "dwatt.experiment.coverage",
    "dwatt.experiment.no_dev",
    "dwatt.experiment.figures",
    "dwatt.experiment.label_free",
    "dwatt.experiment.readouts",
)


# What a function may import instead of the top of its file. Optional extras a base install may lack (a command
# that needs one says which extra to install, and nothing else pays for it), and the C library, found per platform:
OPTIONAL_IMPORTS = frozenset(
    {"accelerate", "ctypes", "filelock", "matplotlib", "onnx", "onnxruntime", "peft", "psutil", "scipy", "sklearn"}
    | {"sklearn_crfsuite", "statsmodels"}
)
# The frameworks that what starts light must not load: `import dwatt` and the command line's parser, `dwatt predict`
# on an ONNX export, the tables (the tests below and test_auto, test_onnx_runtime); and the transformers submodules
# the model files read only in the releases that have them.
HEAVY_IMPORTS = frozenset({"datasets", "huggingface_hub", "safetensors", "torch", "transformers"})
# The house's own modules a function imports, by the module that defers them: each loads one of the frameworks
# above, and the importing module must stay light. The command line's modules (dwatt.cli) import the command they
# run when it runs, and are not listed.
DEFERRED_OWN_IMPORTS = {
    "dwatt.auto": {
        "configuration_dwatt",
        "modeling_dwatt",
    },  # registers DWAtt on first use: `import dwatt` stays light
    "dwatt.tasks": {"modeling_dwatt"},  # a task's model class, looked up when asked
    "dwatt.run_config": {"dwatt.data"},  # datasets: the parser builds RunConfigs
    "dwatt.serving.lines": {"dwatt.serving.prediction"},  # torch: `dwatt predict` on an ONNX export
    "dwatt.serving.onnx_runtime": {"dwatt.tokenization"},  # transformers' tokenizers, only to load one
    "dwatt.serving.prediction": {"dwatt.data.classification"},  # datasets
    "dwatt.serving.schemes": {"configuration_dwatt"},  # transformers: the CLI's choices of schemes
    "dwatt.experiment.grid": {"configuration_dwatt"},  # transformers: the parser and the tables read grids
    "dwatt.experiment.summaries": {"configuration_dwatt"},  # the tables load without transformers
    "dwatt.experiment.floor": {"dwatt.experiment.baselines"},  # torch, sklearn: the floor's tables are read light
    "dwatt.experiment.baselines": {
        "dwatt.data.classification",
        "dwatt.metrics",
        "dwatt.splits",
    },  # datasets: the probe's parser reads baselines
    "dwatt.experiment.sweep": {"dwatt.distributed"},  # torch: the parser builds sweeps
    "dwatt.experiment.probe_models": {  # torch: the probe's parser
        "dwatt.checkpoints",
        "dwatt.model_cards",
        "dwatt.serving.stock_export",
    },
}


def imports_in_functions() -> dict[str, set[str]]:
    """`{module: what its functions import}`, by absolute module name, for the package and the model files."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")} | REMOTE_CODE
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    found.setdefault(name, set()).update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    relative = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                    found.setdefault(name, set()).add(relative if node.level else node.module)
    return found


def test_imports_sit_at_the_top_of_their_file_but_the_listed_optional_and_heavy_ones():
    """A maintainer reads a module's dependencies at its top: a function imports only an optional extra, a heavy
    framework, or a module of the house the list says it defers (and why); the command line's modules import their
    command when it runs. The list holds nothing that is no longer deferred."""
    house = {"dwatt", *REMOTE_CODE}
    unlisted, deferred = {}, {}
    for module, imported in imports_in_functions().items():
        for name in imported:
            root = name.split(".")[0]
            if root in house:
                if not module.startswith("dwatt.cli") and name not in DEFERRED_OWN_IMPORTS.get(module, set()):
                    unlisted.setdefault(module, set()).add(name)
                deferred.setdefault(module, set()).add(name)
            elif root not in OPTIONAL_IMPORTS | HEAVY_IMPORTS:
                unlisted.setdefault(module, set()).add(name)
    assert unlisted == {}, "import these at the top of the file (or list them, with the reason)"
    stale = {module: names - deferred.get(module, set()) for module, names in DEFERRED_OWN_IMPORTS.items()}
    assert {module: names for module, names in stale.items() if names} == {}, "no longer deferred: drop from the list"


def test_what_runs_loads_neither_the_tables_nor_matplotlib_and_only_the_tables_import_pandas():
    """Training, sweeping, probing, serving and the command line load without the report's tables and matplotlib (in
    a fresh interpreter; the probe draws its figure with a function-level import), and no module but the tables
    imports pandas itself (HF datasets, which reads the data, still loads it)."""

    running = sorted(m for m in import_graph() if m not in TABLES and not m.endswith(".__main__"))
    code = (
        f"import importlib, sys\nfor name in {running!r}:\n    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m in {TABLES!r} or m.split('.')[0] == 'matplotlib'))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    ).stdout.strip()
    assert loaded == "[]"
    pandas_importers = []
    for path in PACKAGE.rglob("*.py"):
        if module_name(path) in TABLES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            pandas_importers += [module_name(path) for name in names if name.split(".")[0] == "pandas"]
    assert pandas_importers == []


def test_the_tables_load_without_torch_transformers_or_datasets():
    """The experiment side's tables (a report over committed stores) import neither the models nor the data
    libraries: what they need of the fusions and the results' fields is in torch-free modules (`specs_dwatt`,
    `dwatt.schema`)."""

    code = (
        "import sys\nimport dwatt.experiment.report, dwatt.experiment.selection\n"
        "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'tokenizers') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    ).stdout.strip()
    assert loaded == "[]"


# One concept per file, measured after the formatter (ruff format, run by CI) has set every line: a module of the
# package or of the remote code holds at most LINES lines. The files below still hold several concepts each (issue 72
# names them); each may only shrink until it is split, and then leaves this table.
LINES = 500
NOT_YET_SPLIT: dict[str, int] = {}


def test_no_module_outgrows_one_concept():
    root = PACKAGE.parent
    files = [*REMOTE_CODE.values(), *PACKAGE.rglob("*.py")]
    sizes = {path.relative_to(root).as_posix(): len(path.read_text().splitlines()) for path in files}
    over = {name: size for name, size in sizes.items() if size > NOT_YET_SPLIT.get(name, LINES)}
    assert over == {}, f"split these by concept (at most {LINES} lines a file): {over}"
    assert {name for name, ceiling in NOT_YET_SPLIT.items() if sizes.get(name, 0) <= LINES} == set(), (
        "drop from NOT_YET_SPLIT"
    )


# A string that names a parameter of the model (`"dwatt.fusion.proj.weight"`, `"classifier.bias"`): the library asks
# the model what its head is (`head_parameters`, `classifier_parameters`, `token_linear_map`) instead.
PARAMETER_NAME = re.compile(
    r"""["'](dwatt\.(backbone|fusion|lora)\b|(classifier|lm_head|out_proj|dense|proj)\.(weight|bias)\b|lm_head\.)"""
)


def test_the_library_names_no_parameter_of_the_model():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PARAMETER_NAME.search(line)
    ]
    assert found == []


def test_the_parameter_name_pattern_catches_what_it_claims_to():
    for line in (
        'tensor("dwatt.fusion.proj.weight")',
        "PARAMETERS = ('classifier.bias',)",
        'key.startswith("lm_head.")',
        'prefix = "dwatt.backbone."',
    ):
        assert PARAMETER_NAME.search(line), line
    assert not PARAMETER_NAME.search('import_module("dwatt.serving.shared_heads")')


def test_the_library_asks_the_model_not_its_attributes():
    """No `hasattr` dispatch on models, heads or configs in the package or the remote code: a model's task comes from
    its class (`tasks.task_of_model`), a class's kind from what it declares (`has_task_head`). What the platform
    offers (`os.sysconf`, `os.sched_getaffinity`) is still asked so."""
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *REMOTE_CODE.values()]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hasattr":
                subject = ast.unparse(node.args[0])
                if subject != "os":
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: hasattr({subject}, ...)")
    assert found == []
