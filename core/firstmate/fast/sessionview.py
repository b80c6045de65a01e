"""The session lock as ``fm status`` reads it without attrs, psutil or a plugin.

Judging a record (``state/session.lock``) fully means asking the holder's harness plugin
whether the process still runs as that harness (:func:`firstmate.continuity.session_lock.probe`),
which costs a status call several times an interpreter's start. So when ``fm lock acquire``
has judged its holder live, it leaves that verdict in ``state/session.verified`` (the memo),
tied to everything the plugin's answer depends on: the holder's identity token, a digest of
its command line, process name and executable as ``/proc`` shows them, and a digest of the
environment that selects the harness table. :func:`judge` answers "held" only when the record
reads as the lock writes it, ``/proc`` shows the same process (pid, start time and command
line) still running, this user may signal it, and, for a named harness, the memo matches all of
that now; in every other case it returns None and the status takes the full path, which judges
every state. So the fast answer is always one the full path gives too; the one thing the memo
cannot see is the harness's plugin being removed while its session runs.
"""

from __future__ import annotations

import os
import stat
import sys

from firstmate.base.fasthash import sha256_hex
from firstmate.base.names import DISABLE_PLUGINS_ENV, HARNESS_NAMES_ENV, PLUGINS_ENV

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

#: ``state/session.lock``: the record (:mod:`firstmate.continuity.sessionrecord`).
RECORD = "session.lock"
#: ``state/session.verified``: the verdict memo :func:`memo_text` makes.
MEMO = "session.verified"
RECORD_MAX = 64 * 1024
MEMO_MAX = 1024
MEMO_VERSION = "v1"
#: What the full path's harness check reads besides the process
#: (:func:`firstmate.plugin.harnessprocs.harness_table`).
TABLE_ENV = (PLUGINS_ENV, DISABLE_PLUGINS_ENV, HARNESS_NAMES_ENV)

_FIELDS = ('{"acquired_at": ', ', "harness": ', ', "identity": ', ', "pid": ',
           ', "session_id": ', ', "version": ')
_SESSION_ID_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_SESSION_ID_REST = _SESSION_ID_FIRST | frozenset("._:-")


def read_small(path: str, limit: int) -> bytes | None:
    """The bytes of the regular file *path* (never following a symlink, never blocking on a
    FIFO), or None when it is anything else, unreadable or over *limit*."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def parse_record(data: bytes) -> tuple[int, str, str] | None:
    """``(pid, identity, harness)`` of a record exactly as the lock writes it (sorted keys,
    printable ASCII, a live holder's pid), else None (the full path reads anything else)."""
    from firstmate.base.ownerrecord import fields, number, positive, string
    from firstmate.base.proctoken import parse

    if not (data.isascii() and data.endswith(b"\n")):
        return None
    values = fields(data[:-1].decode("ascii"), _FIELDS)
    if values is None:
        return None
    at_text, harness_text, identity_text, pid_text, session_text, version = values
    harness, identity, pid = string(harness_text), string(identity_text), positive(pid_text)
    if not harness or identity is None or pid is None or version != "1":
        return None
    if session_text != "null":
        session = string(session_text)
        if not (session and len(session) <= 200 and session[0] in _SESSION_ID_FIRST
                and _SESSION_ID_REST.issuperset(session)):
            return None
    token = parse(identity)
    if number(at_text) is None or token is None or token[0] != pid:
        return None
    return pid, identity, harness


def process_view(pid: int) -> str | None:
    """A digest of what the harness check reads of *pid* (command line, process name,
    executable), raw from ``/proc``; None when any of them cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
        with open(f"/proc/{pid}/comm", "rb") as fh:
            comm = fh.read()
        exe = os.fsencode(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None
    return sha256_hex(b"\0\0".join((cmdline, comm, exe)))[:32]


def table_key(env: Mapping[str, str]) -> str:
    """A digest of the environment that selects the harness table."""
    return sha256_hex("\0".join(env.get(name, "") for name in TABLE_ENV).encode(
        "utf-8", "surrogateescape"))[:32]


def memo_text(identity: str, harness: str, view: str, key: str) -> str:
    """The memo of a holder judged live as *harness*."""
    return f"{MEMO_VERSION} {identity} {harness} {view} {key}\n"


def judge(state: str, env: Mapping[str, str]) -> tuple[str, int] | None:
    """``("held", pid)`` when the record at *state* names a holder the full path would call
    live (see the module's docstring); None: not sure, judge it fully."""
    from firstmate.base.proctoken import parse, running

    if not sys.platform.startswith("linux"):
        return None
    data = read_small(os.path.join(state, RECORD), RECORD_MAX)
    record = None if data is None else parse_record(data)
    if record is None:
        return None
    pid, identity, harness = record
    fields = parse(identity)
    if fields is None or running(fields) is not True:
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    if harness != "unknown":
        memo = read_small(os.path.join(state, MEMO), MEMO_MAX)
        if memo is None or memo.decode("utf-8", "replace") != memo_text(
                identity, harness, process_view(pid) or "-", table_key(env)):
            return None
        if running(fields) is not True:  # (exec'd while we read its view)
            return None
    return "held", pid


__all__ = ["MEMO", "RECORD", "judge", "memo_text", "parse_record", "process_view", "read_small",
           "table_key"]
