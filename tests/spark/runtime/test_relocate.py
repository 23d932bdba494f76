"""A moved or copied checkpoint names its own state schema files again (relocate_checkpoint).

The restart of a moved checkpoint itself is tested by ``test_old_layout.py`` (its fixture was
written in a folder that no longer exists, and is unpacked into a temporary one); here the
rewrite is checked file by file, without Spark.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from driftjoin import explain_error, relocate_checkpoint
from driftjoin.spark.runtime.relocate import hadoop_checksum

DATA = Path(__file__).parent / "data" / "old_layout_checkpoints.tar.gz"


@pytest.fixture
def moved(tmp_path) -> Path:
    with tarfile.open(DATA) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "topk_owner"


def _schema_paths(checkpoint: Path) -> list[str]:
    paths = []
    for meta in sorted(checkpoint.glob("state/*/_metadata/v2/[0-9]*")):
        version, _, body = meta.read_text().partition("\n")
        assert version == "v2"
        for store in json.loads(body)["stateStoreInfo"]:
            paths += store["stateSchemaFilePaths"]
    return paths


def test_the_schema_paths_point_into_the_folder_the_checkpoint_is_in_now(moved):
    before = _schema_paths(moved)
    assert before and not any(str(moved) in p for p in before), "the fixture names the folder it was written in"
    assert relocate_checkpoint(str(moved)) == 2  # two stateful operators, one committed batch
    after = _schema_paths(moved)
    assert len(after) == len(before)
    for uri in after:
        assert uri.startswith(f"file:{moved}/state/")
        assert Path(uri[len("file:"):]).is_file()
    for meta in moved.glob("state/*/_metadata/v2/[0-9]*"):
        crc = meta.parent / f".{meta.name}.crc"
        assert crc.read_bytes() == hadoop_checksum(meta.read_bytes())


def test_relocation_is_idempotent_and_keeps_everything_else(moved):
    offsets = (moved / "offsets" / "0").read_bytes()
    relocate_checkpoint(str(moved))
    first = _schema_paths(moved)
    assert relocate_checkpoint(str(moved)) == 0
    assert relocate_checkpoint(f"file://{moved}") == 0  # the same folder as a URI
    assert _schema_paths(moved) == first
    assert (moved / "offsets" / "0").read_bytes() == offsets


def test_a_copy_names_its_own_files_not_the_original(moved, tmp_path):
    relocate_checkpoint(str(moved))
    copy = tmp_path / "copy"
    shutil.copytree(moved, copy)
    assert relocate_checkpoint(str(copy)) == 2
    assert all(p.startswith(f"file:{copy}/") for p in _schema_paths(copy))


def test_the_checksum_is_hadoops():
    # the fixture's own .crc files were written by Spark: the same bytes from the same content
    with tarfile.open(DATA) as tar:
        meta = tar.extractfile("./topk_owner/state/0/_metadata/v2/0").read()
        crc = tar.extractfile("./topk_owner/state/0/_metadata/v2/.0.crc").read()
    assert hadoop_checksum(meta) == crc


def test_the_error_of_a_moved_checkpoint_says_what_to_do():
    text = ("[STREAM_FAILED] Query terminated with exception: File file:/gone/ck/state/0/_stateSchema/default/"
            "0_a8f4 does not exist")
    line = explain_error(RuntimeError(text))
    assert "relocate_checkpoint" in line and "/gone/ck/state/0/_stateSchema" in line
