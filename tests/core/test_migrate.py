"""Importing an original firstmate home's queue, sequence file and recovery marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from firstmate.base.errors import StateError, UsageError
from firstmate.store import drain, queue
from firstmate.store.episodes import Episode
from firstmate.store.home import Home
from firstmate.store.migrate import import_legacy
from wakeq_support import db_for, episode, fm, insert_row, raw, rows


def legacy_home(tmp_path: Path, queue_text: bytes | None, seq: str | None = None,
                marker: str | None = None) -> Path:
    root = tmp_path / "legacy"
    state = root / "state"
    state.mkdir(parents=True)
    if queue_text is not None:
        (state / ".wake-queue").write_bytes(queue_text)
    if seq is not None:
        (state / ".wake-queue.seq").write_text(seq)
    if marker is not None:
        (state / ".watcher-down").write_text(marker)
    return root


GOOD = (
    b"1700000000\t3\tsignal\tt1.status\tsignal: /h/state/t1.status\n"
    b"1700000001\t5\tstale\tw1\tstale: w1\n"
    b"1700000002\t7\tcheck\t/h/state/x.check.sh\tcheck: /h/state/x.check.sh: out\n"
)
BAD = (
    b"1700000003\tnot-a-seq\tsignal\tk\tp\n"
    b"only\tthree\tfields\n"
    b"1700000004\t9\tsignal\tk\t\xff\xfe not utf-8\n"
)


def test_import_keeps_sequences_and_advances_the_counter(fm_home: Home, tmp_path: Path) -> None:
    legacy = legacy_home(tmp_path, GOOD + BAD, seq="12\n", marker="announced:downtime:seed.1.aaa\n")
    report = import_legacy(fm_home, legacy)
    assert report.imported == (3, 5, 7)
    assert report.sequence == 12
    assert [r[:4] for r in rows(fm_home)] == [
        (3, "signal", "t1.status", "signal: /h/state/t1.status"), (5, "stale", "w1", "stale: w1"),
        (7, "check", "/h/state/x.check.sh", "check: /h/state/x.check.sh: out")]
    db = db_for(fm_home)
    assert queue.append(db, "signal", "new", "after import") == 13


def test_unusable_lines_are_retired_with_a_bounded_verbatim_report(fm_home: Home, tmp_path: Path) -> None:
    many = b"".join(b"garbage line %d\n" % i for i in range(24))
    legacy = legacy_home(tmp_path, GOOD + BAD + many)
    report = import_legacy(fm_home, legacy)
    assert len(report.retired) == 27
    lines = report.lines()
    header = next(i for i, line in enumerate(lines) if line.startswith("migrate: retired 27 unusable"))
    shown = lines[header + 1: header + 21]
    assert shown[0] == "migrate:   1700000003\tnot-a-seq\tsignal\tk\tp"
    assert shown[1] == "migrate:   only\tthree\tfields"
    assert "\\xff\\xfe not utf-8" in shown[2]
    assert lines[header + 21] == "migrate:   ... 7 further unusable line(s) not shown"
    with raw(fm_home) as conn:
        assert conn.execute("SELECT count(*) FROM set_aside WHERE what = 'legacy-line'").fetchone()[0] == 27


def test_seq_file_smaller_than_rows_and_junk_seq_file(fm_home: Home, tmp_path: Path) -> None:
    legacy = legacy_home(tmp_path, GOOD, seq="garbage")
    assert import_legacy(fm_home, legacy).sequence == 7


def test_import_is_idempotent_even_after_the_rows_were_acknowledged(fm_home: Home, tmp_path: Path) -> None:
    legacy = legacy_home(tmp_path, GOOD + BAD, seq="7", marker="pending:downtime:seed.1.aaa")
    import_legacy(fm_home, legacy)
    again = import_legacy(fm_home, legacy)
    assert again.imported == () and again.retired == () and again.skipped == 6
    assert len(rows(fm_home)) == 3
    db = db_for(fm_home)
    presented = drain.drain(db, "main", env={})
    assert presented.generation == "seed.1.aaa"
    drain.acknowledge(db, "main", 7, "seed.1.aaa", env={})
    assert rows(fm_home) == []
    third = import_legacy(fm_home, legacy)
    assert third.imported == () and rows(fm_home) == []
    with raw(fm_home) as conn:
        assert conn.execute("SELECT count(*) FROM legacy_imports").fetchone()[0] == 3


def test_a_taken_sequence_is_renumbered_not_overwritten(fm_home: Home, tmp_path: Path) -> None:
    insert_row(fm_home, 5, "signal", "native", "already here")
    report = import_legacy(fm_home, legacy_home(tmp_path, GOOD))
    assert report.renumbered == ((5, 8),)
    by_seq = {r[0]: r[3] for r in rows(fm_home)}
    assert by_seq[5] == "already here" and by_seq[8] == "stale: w1"


def test_marker_is_imported_when_this_home_has_none(fm_home: Home, tmp_path: Path) -> None:
    import_legacy(fm_home, legacy_home(tmp_path, None, marker="acked:handling:seed.1.aaa\n"))
    assert episode(db_for(fm_home)) == Episode("acked", "handling", "seed.1.aaa")


def test_imported_rows_over_an_acked_marker_get_recovery_evidence(fm_home: Home, tmp_path: Path) -> None:
    import_legacy(fm_home, legacy_home(tmp_path, GOOD, marker="acked:handling:seed.1.aaa\n"))
    state = episode(db_for(fm_home))
    assert isinstance(state, Episode) and state.status == "pending" and state.generation != "seed.1.aaa"


def test_an_existing_episode_is_kept(fm_home: Home, tmp_path: Path) -> None:
    db = db_for(fm_home)
    queue.append(db, "signal", "mine", "x")
    mine = episode(db)
    report = import_legacy(fm_home, legacy_home(tmp_path, None, marker="pending:handling:seed.1.aaa"))
    assert episode(db) == mine
    assert report.episode.startswith("kept ")


@pytest.mark.parametrize("marker", ["pending:downtime:bad gen\n", "one\ntwo\n", "weird", ""])
def test_a_malformed_marker_is_set_aside(fm_home: Home, tmp_path: Path, marker: str) -> None:
    report = import_legacy(fm_home, legacy_home(tmp_path, None, marker=marker))
    assert "malformed" in report.episode
    with raw(fm_home) as conn:
        assert conn.execute("SELECT count(*) FROM set_aside WHERE what = 'legacy-episode'").fetchone()[0] == 1


def test_missing_files_are_fine_and_a_bare_state_dir_is_accepted(fm_home: Home, tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    report = import_legacy(fm_home, root)
    assert report.imported == () and report.sequence == 0 and report.episode == "no legacy marker"
    (root / ".wake-queue").write_bytes(GOOD)
    assert import_legacy(fm_home, root).imported == (3, 5, 7)


def test_not_a_directory_and_symlinked_files_are_refused(fm_home: Home, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        import_legacy(fm_home, tmp_path / "nowhere")
    legacy = legacy_home(tmp_path, None)
    secret = tmp_path / "secret"
    secret.write_bytes(GOOD)
    os.symlink(secret, legacy / "state" / ".wake-queue")
    with pytest.raises(StateError, match="symlinked"):
        import_legacy(fm_home, legacy)
    assert rows(fm_home) == []


def test_cli_migrate(fm_home: Home, tmp_path: Path) -> None:
    legacy = legacy_home(tmp_path, GOOD + BAD, seq="9", marker="pending:downtime:seed.1.aaa")
    out = fm(fm_home, "migrate", "--from-legacy", str(legacy))
    assert out.returncode == 0, out.stderr
    assert "migrate: imported 3 queued row(s) (seq 3..7)" in out.stdout
    assert "migrate: retired 3 unusable legacy queue line(s)" in out.stdout
    assert "migrate: wake sequence now at 9" in out.stdout
    again = fm(fm_home, "migrate", "--json", f"--from-legacy={legacy}")
    assert again.returncode == 0 and '"skipped": 6' in again.stdout
    bad = fm(fm_home, "migrate")
    assert bad.returncode == 2
    assert bad.stderr == ("fm: migrate: the following arguments are required: --from-legacy; "
                          "run 'fm migrate --help'\n")
