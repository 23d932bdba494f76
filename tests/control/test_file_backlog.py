"""The backlog of a file source: files in its directory that its log has not taken yet."""

from __future__ import annotations

import json

from driftjoin.control.autoscale.files import file_source_path, pending_files, taken_files


def _log(folder, batch, names, compact=False):
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["v1"] + [json.dumps({"path": f"file:///data/in/{n}", "timestamp": 1, "batchId": batch}) for n in names]
    (folder / (f"{batch}.compact" if compact else str(batch))).write_text("\n".join(lines) + "\n")


def test_description_gives_the_directory_unless_a_glob():
    assert file_source_path("FileStreamSource[file:/tmp/in]") == "file:/tmp/in"
    assert file_source_path("FileStreamSource[file:/tmp/in/*.json]") is None
    assert file_source_path("DriftjoinSource") is None


def test_compacted_log_and_later_batches(tmp_path):
    log = tmp_path / "sources" / "0"
    _log(log, 8, ["a.json"])                          # older than the compaction: superseded
    _log(log, 9, ["a.json", "b.json", "c.json"], compact=True)
    _log(log, 10, ["d.json"])
    (log / ".10.crc").write_text("x")
    assert taken_files(str(log)) == {"a.json", "b.json", "c.json", "d.json"}


def test_pending_files_skip_hidden_and_taken(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    for name in ("a.json", "b.json", "e.json", "f.json", ".e.json.crc", "_SUCCESS"):
        (data / name).write_text("{}\n")
    log = tmp_path / "sources" / "0"
    _log(log, 0, ["a.json", "b.json"])
    assert pending_files(f"file:{data}", str(log)) == (2, 2)
    assert pending_files(str(data), str(tmp_path / "nothing")) == (4, 0)


def test_only_batches_whose_progress_was_seen_count(tmp_path):
    """A batch's files enter the log when it is planned; while it runs, its records are not read
    yet, so its files must not count as taken (records per file would come out low)."""
    log = tmp_path / "sources" / "0"
    _log(log, 0, ["a.json"])
    _log(log, 1, ["b.json"])
    _log(log, 2, ["c.json"])                          # planned, running
    assert taken_files(str(log), upto=1) == {"a.json", "b.json"}
    assert taken_files(str(log)) == {"a.json", "b.json", "c.json"}
    data = tmp_path / "in"
    data.mkdir()
    for name in ("a.json", "b.json", "c.json", "d.json"):
        (data / name).write_text("{}\n")
    assert pending_files(str(data), str(log), upto=1) == (2, 2)
    compacted = tmp_path / "compacted"
    _log(compacted, 9, ["a.json", "b.json"], compact=True)  # older files deleted by the compaction
    assert taken_files(str(compacted), upto=8) == {"a.json", "b.json"}
