"""Bounded text logs: one line per record, private, capped, and never lost to a crash mid-trim."""

from __future__ import annotations

import itertools
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.base.errors import StateError
from firstmate.store.home import Home
from firstmate.store.ledgers import TRIAGE_DEFAULTS, BoundedLog, cycle_log, neutralise, triage_log
from firstmate.testing.procs import eventually
from hypothesis import given
from hypothesis import strategies as st

CORE = str(Path(__file__).resolve().parents[2] / "core")
DEADLINE = 20.0


def small_log(path: Path, max_bytes: int, keep: int) -> BoundedLog:
    return BoundedLog(path, "T_MAX", "T_KEEP", (10**9, 10**9),
                      env={"T_MAX": str(max_bytes), "T_KEEP": str(keep)})


def test_append_creates_a_private_file_with_one_line_per_record(tmp_path: Path) -> None:
    log = small_log(tmp_path / "logs" / "x.log", 10_000, 100)
    log.append("first\tline\r\nwith breaks\x1b[31m")
    log.append("second")
    assert log.lines() == ["first line  with breaks [31m", "second"]
    assert stat.S_IMODE(os.stat(log.path).st_mode) == 0o600


def test_append_fields_keeps_the_field_separators_only(tmp_path: Path) -> None:
    log = small_log(tmp_path / "c.tsv", 10_000, 100)
    log.append_fields("a=1", "b=two\tparts", "c=" + "x" * 600)
    (line,) = log.lines()
    fields = line.split("\t")
    assert fields[:2] == ["a=1", "b=two parts"]
    assert len(fields) == 3 and len(fields[2]) == 512


def test_cap_keeps_the_newest_lines_within_the_byte_cap(tmp_path: Path) -> None:
    log = small_log(tmp_path / "t.log", 200, 5)
    sizes = []
    for i in range(50):
        log.append(f"record {i:03d}")
        lines = log.lines()
        sizes.append(len(lines))
        # Always the newest records, in order, within the byte cap.
        assert lines == [f"record {j:03d}" for j in range(i + 1 - len(lines), i + 1)]
        assert log.path.stat().st_size <= 200
    # A trim (reaching the byte cap) keeps exactly the newest 5 lines.
    drops = [after for before, after in itertools.pairwise(sizes) if after < before]
    assert drops and set(drops) == {5}


def test_byte_cap_drops_whole_lines_never_a_partial_one(tmp_path: Path) -> None:
    log = small_log(tmp_path / "t.log", 100, 1000)
    for i in range(40):
        log.append(f"{i:02d} " + "y" * 20)
    for line in log.lines():
        assert re.fullmatch(r"\d\d y{20}", line)
    assert log.path.stat().st_size <= 100


def test_junk_or_zero_caps_fall_back_to_the_defaults(tmp_path: Path) -> None:
    home = Home(tmp_path / "h").ensure()
    for junk in ("", "0", "00", "-5", "abc", "1e3", "١٢"):
        log = triage_log(home, {"FM_WATCH_TRIAGE_LOG_MAX_BYTES": junk, "FM_WATCH_TRIAGE_LOG_KEEP_LINES": junk})
        assert (log.max_bytes, log.keep_lines) == TRIAGE_DEFAULTS
    log = cycle_log(home, {"FM_WATCH_CYCLE_LOG_MAX_BYTES": "08", "FM_WATCH_CYCLE_LOG_KEEP_LINES": "3"})
    assert (log.max_bytes, log.keep_lines) == (8, 3)
    assert log.path == home.logs / "cycle-exits.tsv"


def test_triage_lines_are_stamped(tmp_path: Path) -> None:
    log = triage_log(Home(tmp_path / "h").ensure(), {})
    log.append("absorbed signal: w1.status: working: x", now=0.0)
    (line,) = log.lines()
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}\] absorbed signal: w1\.status: working: x", line)


def test_a_symlinked_log_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "t.log").symlink_to(target)
    log = small_log(tmp_path / "logs" / "t.log", 1000, 10)
    with pytest.raises(StateError, match="symlink"):
        log.append("x")
    with pytest.raises(StateError, match="symlink"):
        log.lines()
    assert target.read_text() == "keep\n"


@given(st.text(max_size=200))
def test_neutralise_always_yields_one_line(text: str) -> None:
    clean = neutralise(text)
    assert "\n" not in clean and "\r" not in clean and "\t" not in clean
    assert len(clean) <= len(text)


APPENDER = """
import sys
from pathlib import Path
from firstmate.store.ledgers import BoundedLog
log = BoundedLog(Path(sys.argv[1]), "T_MAX", "T_KEEP", (10**9, 10**9),
                 env={"T_MAX": "3000", "T_KEEP": "40"})
tag = sys.argv[2]
i = 0
print("started", flush=True)
while True:
    log.append(f"{tag} {i:08d} " + "z" * 40)
    i += 1
"""


def _spawn_appender(path: Path, tag: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", APPENDER, str(path), tag], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": CORE})


def _wait_for_trims(path: Path, proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"

    def trimmed() -> bool:
        # The log has been trimmed at least once when its first record is no longer record 0.
        try:
            first = path.read_text().split("\n", 1)[0]
        except FileNotFoundError:
            return False
        return bool(first) and not first.split()[1].startswith("00000000")

    eventually("the appender to trim its log", trimmed, DEADLINE, interval=0.01)


@pytest.mark.parametrize("round_", range(4))
def test_sigkill_mid_append_or_trim_never_loses_the_file(tmp_path: Path, round_: int) -> None:
    path = tmp_path / "t.log"
    procs = [_spawn_appender(path, tag) for tag in ("a", "b")]
    try:
        for proc in procs:
            _wait_for_trims(path, proc)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    data = path.read_text()
    assert data, "the log vanished"
    lines = data.splitlines()
    # Every kept record is whole (a record cut short would fail the pattern) except possibly
    # the very last one, which SIGKILL may interrupt only between write calls: one write each.
    for line in lines:
        assert re.fullmatch(r"[ab] \d{8} z{40}", line), line
    assert len(data.encode()) <= 6000
