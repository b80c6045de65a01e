"""Import an original (shell) firstmate home's durable queue and recovery marker.

Read from the legacy ``state/`` directory (or the directory itself when it holds the files):

* ``.wake-queue`` — one row per line, five TAB-separated fields ``epoch, seq, kind, key,
  payload``. Rows keep their original sequence numbers. A line that is structurally unusable
  (fewer than five fields, a non-numeric sequence, not UTF-8) is retired: reported verbatim,
  bounded to the first 20 plus a count, and kept in ``set_aside``; it never fails the import.
* ``.wake-queue.seq`` — the last sequence number used; our counter moves past it and past every
  imported row, so no imported number is ever handed out again.
* ``.watcher-down`` — ``status:kind:generation``; taken over only when this home has no episode
  yet. A malformed marker is set aside.

The import is idempotent: every line's digest is recorded in ``legacy_lines``, so importing the
same home again (even after its rows were acknowledged here) adds nothing. Missing files are fine.
Everything happens in one transaction under the queue lock.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
from pathlib import Path

import attrs

from firstmate.base.envnum import SEQ_IMPORT_MAX, decimal
from firstmate.base.errors import StateError, UsageError
from firstmate.store import episodes
from firstmate.store.database import Store, advance_seq, next_seq, open_store, set_aside
from firstmate.store.home import Home
from firstmate.store.queue import KEY_MAX, PAYLOAD_MAX, REPORT_SHOWN, clean, locked

QUEUE_FILE = ".wake-queue"
SEQ_FILE = ".wake-queue.seq"
MARKER_FILE = ".watcher-down"
#: Largest legacy file read (the original capped nothing; 64 MiB is far beyond any real queue).
READ_MAX = 64 * 1024 * 1024


@attrs.frozen
class ImportReport:
    source: Path
    imported: tuple[int, ...]
    renumbered: tuple[tuple[int, int], ...]
    retired: tuple[str, ...]
    skipped: int
    sequence: int
    episode: str
    #: The legacy counter's text when it was not a usable sequence (it was ignored).
    refused_counter: str | None = None

    def lines(self) -> list[str]:
        out = [f"migrate: read {self.source}"]
        if self.imported:
            out.append(
                f"migrate: imported {len(self.imported)} queued row(s) "
                f"(seq {min(self.imported)}..{max(self.imported)})"
            )
        else:
            out.append("migrate: imported 0 queued row(s)")
        for old, new in self.renumbered:
            out.append(f"migrate: legacy row {old} was renumbered {new} (its number was taken)")
        if self.skipped:
            out.append(f"migrate: {self.skipped} line(s) were already imported earlier; skipped")
        if self.retired:
            out.append(
                f"migrate: retired {len(self.retired)} unusable legacy queue line(s) "
                f"(no five fields, or no sequence from 1 to {SEQ_IMPORT_MAX}):"
            )
            out += [f"migrate:   {line}" for line in self.retired[:REPORT_SHOWN]]
            if len(self.retired) > REPORT_SHOWN:
                out.append(f"migrate:   ... {len(self.retired) - REPORT_SHOWN} further unusable line(s) not shown")
        if self.refused_counter is not None:
            out.append(f"migrate: ignored the legacy sequence counter {self.refused_counter!r} "
                       f"(not a number from 0 to {SEQ_IMPORT_MAX})")
        out.append(f"migrate: episode {self.episode}")
        out.append(f"migrate: wake sequence now at {self.sequence}")
        return out

    def to_json(self) -> dict[str, object]:
        return {"source": str(self.source), "imported": list(self.imported),
                "renumbered": [list(p) for p in self.renumbered], "retired": list(self.retired),
                "skipped": self.skipped, "sequence": self.sequence, "episode": self.episode,
                "refused_counter": self.refused_counter}


def _state_dir(legacy: Path) -> Path:
    if not legacy.is_dir():
        raise UsageError(f"migrate: {legacy} is not a directory; pass the original firstmate home")
    nested = legacy / "state"
    if nested.is_dir() and not nested.is_symlink():
        return nested
    return legacy


def _read(path: Path) -> bytes | None:
    """The file's bytes; None when absent. Symlinks and non-regular files are refused."""
    try:
        # Non-blocking: a FIFO planted there must not hang the import (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == 40:
            raise StateError(f"migrate: refusing symlinked legacy file {path}; copy the real file there") from exc
        raise StateError(f"migrate: cannot read {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise StateError(f"migrate: {path} is not a regular file")
        return fh.read(READ_MAX)


def _verbatim(raw: bytes) -> str:
    # Field separators stay; anything else that could break the one-line report is neutralised.
    text = raw.decode("utf-8", "backslashreplace")
    return "\t".join(clean(field) for field in text.split("\t"))[: 2 * PAYLOAD_MAX]


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def import_legacy(home: Home | Store, legacy_dir: Path | str) -> ImportReport:
    """Import the legacy queue, sequence and marker into *home* (see the module docstring)."""
    db = home if isinstance(home, Store) else open_store(home)
    state = _state_dir(Path(legacy_dir))
    queue_bytes = _read(state / QUEUE_FILE)
    seq_bytes = _read(state / SEQ_FILE)
    marker_bytes = _read(state / MARKER_FILE)
    seq_text = (seq_bytes or b"").decode("ascii", "replace").strip()
    counter = decimal(seq_text, maximum=SEQ_IMPORT_MAX) if seq_text else 0
    seq_floor = counter or 0
    refused_counter = None if counter is not None else clean(seq_text, 80)

    imported: list[int] = []
    renumbered: list[tuple[int, int]] = []
    retired: list[str] = []
    skipped = 0
    with locked(db) as conn:
        lines = (queue_bytes or b"").split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        parsed: list[tuple[str, bytes, int, float, str, str, str]] = []
        top = seq_floor
        for raw in lines:
            digest = hashlib.sha256(raw).hexdigest()
            if conn.execute("SELECT 1 FROM legacy_lines WHERE digest = ?", (digest,)).fetchone():
                skipped += 1
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            fields = text.split("\t", 4) if text is not None else []
            seq_field = fields[1].strip() if len(fields) == 5 else ""
            row_seq = decimal(seq_field, minimum=1, maximum=SEQ_IMPORT_MAX)
            if text is None or len(fields) < 5 or row_seq is None:
                retired.append(_verbatim(raw))
                set_aside(conn, "legacy-line", _verbatim(raw))
                conn.execute("INSERT OR IGNORE INTO legacy_lines (digest, seq, outcome) VALUES (?, NULL, 'retired')",
                             (digest,))
                continue
            epoch, _, kind, key, payload = fields
            seq = row_seq
            top = max(top, seq)
            at = _number(epoch.strip())
            parsed.append((digest, raw, seq, time.time() if at is None else at, kind,
                           clean(key, KEY_MAX), clean(payload, PAYLOAD_MAX)))
        advance_seq(conn, top)
        for digest, _raw, seq, at, kind, key, payload in parsed:
            target = seq
            taken = conn.execute("SELECT 1 FROM wakes WHERE seq = ?", (seq,)).fetchone()
            if taken:
                target = next_seq(conn)
                renumbered.append((seq, target))
            conn.execute(
                "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, ?, ?, ?, ?)",
                (target, at, kind, key, payload),
            )
            conn.execute("INSERT OR IGNORE INTO legacy_lines (digest, seq, outcome) VALUES (?, ?, 'imported')",
                         (digest, target))
            imported.append(target)
        sequence = advance_seq(conn, top)
        episode_note = _import_marker(conn, marker_bytes, bool(imported))
        conn.execute(
            "INSERT INTO legacy_imports (at, source, imported, retired, skipped, episode) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (time.time(), str(state), len(imported), len(retired), skipped, episode_note),
        )
    return ImportReport(state, tuple(imported), tuple(renumbered), tuple(retired), skipped,
                        sequence, episode_note, refused_counter)


def _import_marker(conn: sqlite3.Connection, data: bytes | None, rows_added: bool) -> str:
    current = episodes.read(conn)
    note = "no legacy marker"
    if data is not None:
        text = data.decode("utf-8", "backslashreplace")
        body = text[:-1] if text.endswith("\n") else text
        legacy = episodes.parse_token(body) if "\n" not in body else None
        if legacy is None:
            set_aside(conn, "legacy-episode", clean(text, 512))
            note = "legacy marker was malformed (set aside)"
        elif isinstance(current, episodes.Missing):
            conn.execute(
                "INSERT INTO episode (id, status, kind, generation, announced_seq, updated_at) "
                "VALUES (1, ?, ?, ?, NULL, ?)",
                (legacy.status, legacy.kind, legacy.generation, time.time()),
            )
            note = f"imported {legacy.token()}"
        else:
            note = f"kept {current.token() or 'the current episode'} (legacy {legacy.token()} not imported)"
    if rows_added:
        # Imported rows must carry recovery evidence, exactly like an append.
        before = episodes.read(conn)
        after = episodes.publish_downtime(conn, append=True)
        if before != after:
            note += f"; now {after.token()} for the imported rows"
    return note


__all__ = ["ImportReport", "import_legacy"]
