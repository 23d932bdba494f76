"""The class-data-sharing archive: only an archive a JVM maps is used, and sessions map it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from driftjoin.spark.runtime import class_archive


@pytest.fixture
def java() -> str:
    path = class_archive.java_binary()
    if path is None:
        pytest.skip("no java")
    return path


def small_archive(java: str, path: Path) -> Path:
    """A dynamic archive of what ``java -version`` loads (built in about a second)."""
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off", "-version"],
                   capture_output=True, check=True, timeout=120)
    return path


def test_a_complete_archive_maps_and_a_truncated_one_does_not(java, tmp_path) -> None:
    whole = small_archive(java, tmp_path / "whole.jsa")
    assert class_archive._maps(java, whole)
    cut = tmp_path / "cut.jsa"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 3])
    assert not class_archive._maps(java, cut)  # a JVM mapping it crashes: never moved into place


def test_options_map_the_archive_only_when_built_and_enabled(java, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DRIFTJOIN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(class_archive.DUMP_ENV, raising=False)
    assert class_archive.jvm_options() == ""
    path = class_archive.archive_path()
    assert path is not None and path.parent == tmp_path
    small_archive(java, path)
    assert f"-XX:SharedArchiveFile={path}" in class_archive.jvm_options()
    assert class_archive.jvm_options(enabled=False) == ""
    monkeypatch.setenv(class_archive.DUMP_ENV, str(tmp_path / "new.jsa"))
    assert f"-XX:ArchiveClassesAtExit={tmp_path / 'new.jsa'}" in class_archive.jvm_options()


def test_a_failed_build_leaves_no_archive(java, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DRIFTJOIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(class_archive.sys, "executable", "/bin/false")  # the training run fails
    assert class_archive.build() is None
    assert list(tmp_path.iterdir()) == []


def test_a_new_driver_maps_the_built_archive(java, tmp_path, monkeypatch) -> None:
    """The archive's options make a JVM that maps it: the options the session passes are valid."""
    monkeypatch.setenv("DRIFTJOIN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(class_archive.DUMP_ENV, raising=False)
    small_archive(java, class_archive.archive_path())
    run = subprocess.run([java, *class_archive.jvm_options().split(), "-Xshare:on", "-version"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "sharing" in run.stderr
