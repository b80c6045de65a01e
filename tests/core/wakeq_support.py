"""Shared helpers for the wake-queue tests (store, queue, grants, episodes, processes)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from firstmate.store import episodes
from firstmate.store.database import Store, open_store
from firstmate.store.home import Home
from firstmate.testing import read_line

CORE = str(Path(__file__).resolve().parents[2] / "core")
DEADLINE = 30.0
#: A tmux server no one runs (a drain reads a crew's screen after its turn end): a child never
#: reaches the default server, or the one $TMUX names, unless a test gives it one.
NO_TMUX = os.path.join(tempfile.gettempdir(), f"fm-test-no-tmux-{os.getpid()}")


def child_env(home: Home, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(PYTHONPATH=CORE, FM_HOME=str(home.root), FM_TMUX_SOCKET=NO_TMUX)
    env.update(extra)
    return env


def fm(home: Home, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "firstmate", *args], capture_output=True, text=True,
        timeout=120, check=False, env=child_env(home, **env),
    )


def db_for(home: Home) -> Store:
    return open_store(home)


@contextlib.contextmanager
def raw(home: Home) -> Iterator[sqlite3.Connection]:
    """A plain autocommit connection for arranging and inspecting state behind the API's back."""
    open_store(home).close()  # the schema exists before anything is arranged
    conn = sqlite3.connect(str(home.db), isolation_level=None, timeout=30)
    try:
        yield conn
    finally:
        conn.close()


def rows(home: Home) -> list[tuple[object, ...]]:
    with raw(home) as conn:
        return list(conn.execute("SELECT seq, kind, key, payload, claim FROM wakes ORDER BY seq"))


def claims(home: Home) -> dict[int, str | None]:
    with raw(home) as conn:
        return {int(s): c for s, c in conn.execute("SELECT seq, claim FROM wakes")}


def episode(db: Store) -> episodes.EpisodeState:
    with db.reading() as conn:
        return episodes.read(conn)


def generation(db: Store) -> str:
    state = episode(db)
    assert isinstance(state, episodes.Episode), state
    return state.generation


def set_episode(home: Home, status: object, kind: object, gen: object, announced_seq: int | None = None) -> None:
    with raw(home) as conn:
        conn.execute("DELETE FROM episode")
        conn.execute(
            "INSERT INTO episode (id, status, kind, generation, announced_seq, updated_at) "
            "VALUES (1, ?, ?, ?, ?, 0)", (status, kind, gen, announced_seq))


def insert_row(home: Home, seq: int, kind: object = "signal", key: object = "k",
               payload: object = "p", at: object = 1.0, claim: str | None = None) -> None:
    with raw(home) as conn:
        conn.execute("INSERT INTO wakes (seq, at, kind, key, payload, claim) VALUES (?, ?, ?, ?, ?, ?)",
                     (seq, at, kind, key, payload, claim))


def python(code: str, home: Home, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=child_env(home, **env),
    )


def live_owner(home: Home) -> subprocess.Popen[bytes]:
    """A live process to own a grant: it prints "ready" and waits for stdin to close."""
    proc = python("import sys; print('ready', flush=True); sys.stdin.read()", home)
    assert read_line(proc) == "ready"
    return proc


def finish(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=DEADLINE)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def each_line(text: str) -> Iterator[str]:
    yield from (line for line in text.splitlines() if line)
