"""dynashape.distributions: installed distributions read from their .dist-info folders,
checked against importlib.metadata and on folders made here."""
from __future__ import annotations

import importlib.metadata
import os

import pytest

from dynashape import distributions


def _fresh_listings():
    distributions._folders.cache_clear()


def _dist(site, folder: str, metadata: str = "", record: str = "") -> None:
    d = site / folder
    d.mkdir()
    (d / "METADATA").write_text(metadata)
    (d / "RECORD").write_text(record)


@pytest.mark.parametrize("name", ["onnx", "numpy", "pluggy"])
def test_an_installed_wheel_has_the_version_importlib_metadata_reads(name):
    assert distributions.version(name) == importlib.metadata.version(name)


def test_the_requirements_are_importlib_metadatas():
    assert distributions.requires("onnx") == importlib.metadata.requires("onnx")


def test_names_are_normalised_as_wheels_write_them_and_two_folders_in_one_directory_are_no_answer(
        tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    _dist(site, "Some_Lib-1.2.3.dist-info", "Metadata-Version: 2.1\nName: some-lib\nRequires-Dist: numpy<3,>=1.22\n"
          "Requires-Dist: extra-thing; extra == 'x'\n\nRequires-Dist: not a header (the body)\n",
          'some_lib/__init__.py,sha256=x,10\n"some_lib/odd,name.so",sha256=y,20\n../../lib/libthing.so.3,,\n')
    _dist(site, "twice-1.0.dist-info")
    _dist(site, "twice-2.0.dist-info")
    monkeypatch.syspath_prepend(str(site))
    _fresh_listings()
    try:
        assert distributions.version("some-lib") == distributions.version("some.lib") == "1.2.3"
        assert distributions.requires("SOME_LIB") == ["numpy<3,>=1.22", "extra-thing; extra == 'x'"]
        assert distributions.files("some-lib") == [
            os.path.normpath(str(site / "some_lib/__init__.py")), os.path.normpath(str(site / "some_lib/odd,name.so")),
            os.path.normpath(str(site / "../../lib/libthing.so.3"))]
        assert distributions.dist_info("twice") is None and distributions.version("twice") is None
        assert distributions.version("not-installed-anywhere") is None
        assert distributions.files("not-installed-anywhere") is None
    finally:
        _fresh_listings()


def test_the_first_sys_path_directory_that_has_the_distribution_wins(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _dist(first, "pkg-2.0.dist-info")
    _dist(second, "pkg-1.0.dist-info")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    _fresh_listings()
    try:
        assert distributions.version("pkg") == "2.0"
    finally:
        _fresh_listings()
