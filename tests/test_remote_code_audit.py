"""The files that `trust_remote_code=True` runs (`modeling_dwatt.py` and the siblings it imports, which
`save_pretrained` copies beside it): what they may import and call, checked on their syntax tree."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def remote_code_files() -> tuple[str, ...]:
    """What a checkpoint carries: the models file and, as transformers gathers them, the files it imports."""
    from transformers.dynamic_module_utils import get_relative_import_files

    return ("modeling_dwatt.py", *sorted(Path(f).name for f in get_relative_import_files(ROOT / "modeling_dwatt.py")))


REMOTE_CODE = remote_code_files()
# `inspect` reads constructor and forward signatures (which arguments an encoder family's classes accept); `copy`
# copies a decoder's config to build Base+n's extra layers with its per-layer settings continued; `re` names the
# state-dict keys of the layers past a cut (a pattern for transformers' loader); `difflib` names the config argument a
# misspelt one of `from_backbone` looks like; `collections.abc` names the type of the loading and saving callables
# the models hand pretrained_dwatt's functions.
ALLOWED_MODULES = {
    "torch",
    "transformers",
    "typing",
    "math",
    "dataclasses",
    "contextlib",
    "inspect",
    "copy",
    "re",
    "difflib",
    "functools",
    "collections",
    "__future__",
}
SIBLINGS = {Path(name).stem for name in REMOTE_CODE}
FORBIDDEN_NAMES = {"eval", "exec", "compile", "open", "__import__", "input", "breakpoint", "globals", "getattr_static"}
FORBIDDEN_ATTRIBUTES = {"system", "popen", "urlopen", "load_file", "save_file", "loads", "dumps", "unlink", "rmtree"}


def tree(name: str) -> ast.Module:
    return ast.parse((ROOT / name).read_text(), filename=name)


def imported_modules(module: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: must be the sibling file
                names.add(node.module)
            else:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("name", REMOTE_CODE)
def test_remote_code_imports_only_torch_transformers_small_stdlib_and_each_other(name):
    unexpected = imported_modules(tree(name)) - ALLOWED_MODULES - SIBLINGS
    assert not unexpected, f"{name} imports {sorted(unexpected)}"


@pytest.mark.parametrize("name", REMOTE_CODE)
def test_remote_code_calls_no_eval_exec_pickle_file_or_network_functions(name):
    found = []
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append(f"line {node.lineno}: {node.id}")
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append(f"line {node.lineno}: .{node.attr}")
        if (
            isinstance(node, ast.Attribute)
            and node.attr in {"load", "save"}
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
        ):
            found.append(f"line {node.lineno}: torch.{node.attr} (pickle)")
    assert not found, f"{name}: {found}"


def test_the_audit_catches_what_it_claims_to():
    sample = ast.parse(
        "import pickle\nimport os.path\nfrom requests import get\nexec('1')\ntorch.load(f)\nopen('x')\n"
    )
    assert imported_modules(sample) - ALLOWED_MODULES == {"pickle", "os", "requests"}
    names = {n.id for n in ast.walk(sample) if isinstance(n, ast.Name)}
    assert {"exec", "open"} <= names & FORBIDDEN_NAMES


# transformers' scan of a remote-code file for the siblings it needs (`dynamic_module_utils.get_relative_imports`): a
# regular expression over the text, blind to `if TYPE_CHECKING:`, `try:` and strings. Its loop in 4.53.x never ends on
# a cycle of such imports, so `from_pretrained(..., trust_remote_code=True)` hangs there.
RELATIVE_IMPORT = re.compile(r"^\s*(?:import\s+\.(\S+)\s*$|from\s+\.(\S+)\s+import)", flags=re.MULTILINE)


def relative_import_cycle(folder: Path) -> list[str]:
    """A cycle of relative imports among the `*.py` files of `folder` as transformers' scan reads them
    (`["a", "b", "a"]`), or `[]`."""
    graph = {
        path.stem: sorted({a or b for a, b in RELATIVE_IMPORT.findall(path.read_text())})
        for path in sorted(folder.glob("*.py"))
    }
    done, path = set(), []

    def visit(name: str) -> list[str]:
        if name in path:
            return path[path.index(name) :] + [name]
        if name in done or name not in graph:
            return []
        path.append(name)
        for imported in graph[name]:
            if cycle := visit(imported):
                return cycle
        path.pop()
        done.add(name)
        return []

    return next((cycle for name in graph if (cycle := visit(name))), [])


def test_no_remote_code_file_imports_one_that_imports_it_back():
    """So that transformers 4.53 loads a checkpoint (its scan hung on `configuration_dwatt` <-> `fusions_dwatt`)."""
    assert relative_import_cycle(ROOT) == []


def test_the_models_file_imports_every_sibling_itself():
    """transformers copies a local checkpoint's models file and the files it imports itself into its module cache, not
    the files those import (and the config file with its own); a sibling reached only through another is missing."""
    direct = {a or b for a, b in RELATIVE_IMPORT.findall((ROOT / "modeling_dwatt.py").read_text())}
    assert direct == {Path(name).stem for name in REMOTE_CODE} - {"modeling_dwatt"}


def test_the_cycle_check_reads_type_checking_blocks_as_transformers_does(tmp_path):
    (tmp_path / "configuration_x.py").write_text("from .specs_x import A\n")
    (tmp_path / "specs_x.py").write_text("A = 1\n")
    (tmp_path / "fusions_x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .modeling_x import M\n"
    )
    (tmp_path / "modeling_x.py").write_text("try:\n    from .fusions_x import F\nexcept ImportError:\n    pass\n")
    assert relative_import_cycle(tmp_path) == ["fusions_x", "modeling_x", "fusions_x"]
    (tmp_path / "fusions_x.py").write_text("from .configuration_x import B\n")
    assert relative_import_cycle(tmp_path) == []


def test_the_remote_code_is_the_set_of_files_a_checkpoint_carries_and_the_package_installs(tmp_path):
    import configparser

    from modeling_dwatt import DWAttForTokenClassification

    from .conftest import tiny_config

    DWAttForTokenClassification(tiny_config("bert", "dwatt")).save_pretrained(tmp_path)
    assert {path.name for path in tmp_path.glob("*.py")} == set(REMOTE_CODE)
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert set(setup["options"]["py_modules"].split()) == SIBLINGS


def test_security_note_states_the_true_line_counts():
    note = (ROOT / "SECURITY.md").read_text()
    for name in REMOTE_CODE:
        lines = len((ROOT / name).read_text().splitlines())
        assert f"| `{name}` | {lines} |" in note, f"SECURITY.md: update the line count of {name} to {lines}"


def test_the_readme_and_the_site_leave_the_line_counts_to_the_security_note():
    """One place for each fact: SECURITY.md states the counts (checked above); the README and the site link to it."""
    readme = (ROOT / "README.md").read_text()
    assert "[SECURITY.md](SECURITY.md)" in readme
    assert "[SECURITY.md](../SECURITY.md)" in (ROOT / "docs" / "security.md").read_text()
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        text = page.read_text()
        assert not re.search(r"`(modeling|configuration)_dwatt\.py` \(\d+ lines\)", text), page
        assert not re.search(r"(modeling|configuration)_dwatt\.py\W{0,3}\s+\|\s+\d+\s+\|", text), page


# Underscored names that transformers asks a model class to define, as its own modeling files do: the initialisation
# hook it calls on every module, and the flags that say which attention implementations the model accepts. Any other
# underscored name the remote code reaches that it does not define itself belongs to transformers or torch, which may
# rename or drop it in any release.
DECLARED_OVERRIDES = {"_init_weights", "_supports_sdpa", "_supports_flash_attn", "_supports_attention_backend"}


def underscored(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and len(name) > 1


def names_defined(module: ast.Module) -> set[str]:
    """What the code names itself: its classes, functions, arguments, variables and attributes it assigns, and the
    attribute names it keeps in module-level string constants (`KEPT = "_dwatt_kept"`)."""
    names = set()
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            names.add(node.id if isinstance(node, ast.Name) else node.attr)
        elif (
            isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        ):
            names.add(node.value.value)
    return names


def names_reached(module: ast.Module) -> dict[str, int]:
    """Every underscored name the code reads or imports (attributes, imported names, attribute names given to
    getattr/hasattr/setattr as strings), with the first line it is on."""
    found = {}
    for node in ast.walk(module):
        names = []
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "hasattr", "setattr", "delattr"}
        ):
            names = [
                arg.value for arg in node.args[1:2] if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            ]
        for name in names:
            if underscored(name):
                found.setdefault(name, node.lineno)
    return found


def their_private_names() -> set[str]:
    """The underscored names of the parts of transformers and torch a model class builds on (the pretrained model and
    config classes, the Auto classes, remote-code loading, torch's Module): an own name of the remote code that is
    one of these overrides or sets something of theirs."""
    import importlib

    sources = (
        "transformers.modeling_utils",
        "transformers.configuration_utils",
        "transformers.models.auto.auto_factory",
        "transformers.models.auto.configuration_auto",
        "transformers.dynamic_module_utils",
        "torch.nn.modules.module",
    )
    text = "\n".join(Path(importlib.import_module(source).__file__).read_text() for source in sources)
    return {name for name in re.findall(r"\b_[A-Za-z]\w*", text)}


def private_names(modules: dict[str, ast.Module], theirs: set[str]) -> list[str]:
    """`file:line: name` for each private name of transformers or torch the code reaches, overrides or sets."""
    defined = {name: names_defined(module) for name, module in modules.items()}
    own = set().union(*defined.values()) - theirs
    found = [
        f"{name}:{line}: {reached}"
        for name, module in modules.items()
        for reached, line in names_reached(module).items()
        if reached not in own | DECLARED_OVERRIDES
    ]
    found += [
        f"{name}: defines {defines}"
        for name in modules
        for defines in sorted(defined[name] & theirs)
        if underscored(defines) and defines not in DECLARED_OVERRIDES
    ]
    return sorted(found)


def test_remote_code_reaches_no_private_name_of_transformers_or_torch():
    """Public APIs only: an underscored name that the remote code reaches and does not define itself is private to
    transformers or torch."""
    assert private_names({name: tree(name) for name in REMOTE_CODE}, their_private_names()) == []


def test_the_private_name_audit_catches_what_it_claims_to():
    sample = ast.parse(
        "from transformers.modeling_utils import _load_state_dict\n"
        "KEPT = '_dwatt_kept'\n"
        "def f(model, layer):\n"
        "    model._own = 1\n"
        "    layer._forward_hooks.clear()\n"
        "    getattr(model.config, '_attn_implementation', None)\n"
        "    getattr(layer, KEPT), getattr(layer, '_dwatt_kept'), model._own, model._init_weights\n"
        "    return AutoModel._model_mapping[type(model.config)]\n"
        "class M(PreTrainedModel):\n"
        "    def _initialize_missing_keys(self):\n"
        "        self.backbone._is_hf_initialized = True\n"
    )
    assert private_names({"sample.py": sample}, their_private_names()) == sorted(
        [
            "sample.py:1: _load_state_dict",
            "sample.py:5: _forward_hooks",
            "sample.py:6: _attn_implementation",
            "sample.py:8: _model_mapping",
            "sample.py: defines _initialize_missing_keys",
            "sample.py: defines _is_hf_initialized",
            "sample.py:11: _is_hf_initialized",
        ]
    )
