"""Bounded human-facing text logs: the watcher's triage log and the arm's cycle log.

Each log is one private (0600, never a symlink) text file with one record per line. When an
append takes the file to its byte cap, the file is rewritten to its newest lines through a
temporary file and a rename, so a crash in the middle of a trim leaves either the old file or
the trimmed one, never a missing or half-written log. Caps come from the environment; junk or
zero values fall back to the defaults.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import attrs

from firstmate.base.envnum import env_int
from firstmate.store.home import Home, atomic_write, make_private_dir, open_private, refuse_symlink

#: The longest record kept; longer ones are cut so one runaway line cannot evict the whole log.
MAX_LINE_CHARS = 4096
#: Longest single field of a TAB-separated record (cycle rows).
MAX_FIELD_CHARS = 512
#: How long an appender waits for the trim lock before appending without trimming (seconds).
LOCK_WAIT = 0.4

TRIAGE_DEFAULTS = (262144, 2000)
CYCLE_DEFAULTS = (262144, 1000)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def neutralise(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """*text* on one line: TAB, CR, LF and other control characters become spaces; cut to *limit*."""
    return _CONTROL.sub(" ", text)[:limit]


@attrs.define(eq=False)
class BoundedLog:
    """An append-only text log capped at ``max_bytes`` by keeping its newest ``keep_lines`` lines.

    ``max_bytes_env``/``keep_lines_env`` name the environment variables that override
    ``defaults`` = (max_bytes, keep_lines). With ``stamp`` each line starts ``[<ISO time>] ``.
    """

    path: Path
    max_bytes_env: str
    keep_lines_env: str
    defaults: tuple[int, int]
    env: Mapping[str, str] = attrs.field(factory=lambda: os.environ)
    stamp: bool = False

    @property
    def max_bytes(self) -> int:
        return env_int(self.env, self.max_bytes_env, self.defaults[0])

    @property
    def keep_lines(self) -> int:
        return env_int(self.env, self.keep_lines_env, self.defaults[1])

    def append(self, line: str, *, now: float | None = None) -> None:
        """Append one record (control characters neutralised), then trim if over the cap."""
        self._record(neutralise(line), now)

    def append_fields(self, *fields: str, now: float | None = None) -> None:
        """Append one TAB-separated record; each field is neutralised and cut to 512 characters."""
        self._record("\t".join(neutralise(field, MAX_FIELD_CHARS) for field in fields), now)

    def lines(self) -> list[str]:
        """The records currently kept, oldest first (empty when the log does not exist)."""
        refuse_symlink(self.path)
        if not os.path.lexists(self.path):
            return []
        fd = open_private(self.path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read()
        return data.decode("utf-8", "replace").splitlines()

    def rewrite_last(self, match: Callable[[str], bool], replace: Callable[[str], str]) -> bool:
        """Replace the newest record *match* accepts with ``replace(record)``, under the lock
        appends and trims take; False when there was none (or the lock stayed held)."""
        refuse_symlink(self.path)
        if not os.path.lexists(self.path):
            return False
        with self._trim_lock() as locked:
            if not locked:
                return False
            fd = open_private(self.path, os.O_RDONLY)
            with os.fdopen(fd, "rb") as fh:
                records = fh.read().decode("utf-8", "replace").splitlines()
            for index in range(len(records) - 1, -1, -1):
                if match(records[index]):
                    records[index] = replace(records[index])  # (a record of the caller's fields)
                    atomic_write(self.path, "".join(r + "\n" for r in records).encode())
                    return True
        return False

    # --- internals -----------------------------------------------------------------------------

    def _record(self, text: str, now: float | None) -> None:
        if self.stamp:
            when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now))
            text = f"[{when}] {text}"
        self._write((text + "\n").encode("utf-8", "replace"))

    def _write(self, data: bytes) -> None:
        if not self.path.parent.is_dir():
            make_private_dir(self.path.parent)
        with self._trim_lock() as locked:
            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                _write_all(fd, data)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if locked and size >= self.max_bytes:
                self._trim()

    def _trim(self) -> None:
        fd = open_private(self.path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read()
        kept = data.splitlines(keepends=True)[-self.keep_lines :]
        total = sum(len(line) for line in kept)
        cap = self.max_bytes
        # Drop whole lines from the front until the byte cap holds: never keep a partial line.
        start = 0
        while start < len(kept) and total > cap:
            total -= len(kept[start])
            start += 1
        atomic_write(self.path, b"".join(kept[start:]))

    @contextlib.contextmanager
    def _trim_lock(self) -> Iterator[bool]:
        """Serialise trims (and the appends racing them); yields False when the wait ran out."""
        lock_path = self.path.with_name(f".{self.path.name}.lock")
        fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
        try:
            deadline = time.monotonic() + LOCK_WAIT
            locked = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    locked = True
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.01)
            yield locked
        finally:
            os.close(fd)  # closing releases the flock


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def triage_log(home: Home, env: Mapping[str, str] | None = None) -> BoundedLog:
    """``state/logs/triage.log``: one stamped line per absorbed event."""
    return BoundedLog(
        home.logs / "triage.log",
        "FM_WATCH_TRIAGE_LOG_MAX_BYTES",
        "FM_WATCH_TRIAGE_LOG_KEEP_LINES",
        TRIAGE_DEFAULTS,
        env=os.environ if env is None else env,
        stamp=True,
    )


def cycle_log(home: Home, env: Mapping[str, str] | None = None) -> BoundedLog:
    """``state/logs/cycle-exits.tsv``: one TAB-separated row per observed watcher cycle."""
    return BoundedLog(
        home.logs / "cycle-exits.tsv",
        "FM_WATCH_CYCLE_LOG_MAX_BYTES",
        "FM_WATCH_CYCLE_LOG_KEEP_LINES",
        CYCLE_DEFAULTS,
        env=os.environ if env is None else env,
    )
