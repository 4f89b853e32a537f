"""Dashboard and docs files appear whole or not at all: a failure while writing keeps the old files."""
import pytest

from jobs.atomic import atomic_write_texts


def test_a_failure_while_writing_leaves_the_old_files_and_no_temporaries(tmp_path):
    status, benchmarks = tmp_path / "STATUS.md", tmp_path / "BENCHMARKS.md"
    atomic_write_texts({status: "old status\n", benchmarks: "old figures\n"})
    with pytest.raises(UnicodeEncodeError):  # the second file cannot be encoded: nothing may change
        atomic_write_texts({status: "new status\n", benchmarks: "bad \ud800 figures\n"})
    assert (status.read_text(), benchmarks.read_text()) == ("old status\n", "old figures\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["BENCHMARKS.md", "STATUS.md"]
    atomic_write_texts({status: "new status\n"})
    assert status.read_text() == "new status\n" and oct(status.stat().st_mode & 0o777) == "0o644"
