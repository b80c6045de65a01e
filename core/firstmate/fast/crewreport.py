"""A crew's own report, ``fm crew status`` and ``fm crew turn-ended``: one line appended to its
log and the watcher's doorbell rung, with the standard library only (crews report on every
turn, so this path stays as cheap as an interpreter's start allows).

The single implementation behind :func:`firstmate.store.crew.append_status` and
:func:`~firstmate.store.crew.mark_turn_ended` as well: a line is appended whole or not at all,
under an exclusive ``flock`` (reporters never interleave), never glued onto a torn one, and a
write cut short is rolled back.
"""

from __future__ import annotations

import os
import time

from firstmate.base.errors import StateError, UsageError
from firstmate.base.safepaths import open_private, refuse_symlink

PANE = ".pane"
STATUS = ".status"
TURN_ENDED = ".turn-ended"
#: Longest status line kept (bytes of UTF-8); longer reports are cut.
MAX_STATUS_BYTES = 2000
#: The turn-end marker is rewritten to its newest line once it grows past this.
TURN_MARKER_MAX = 4096
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
EMPTY = 'empty status line: report one as "<verb>: note", e.g. "done: tests pass"'


def valid_name(name: str) -> bool:
    """1-64 characters from A-Z a-z 0-9 . _ -, not starting with . or - (as crew names are)."""
    return 0 < len(name) <= 64 and name[0] not in ".-" and _NAME_CHARS.issuperset(name)


def crew_file(root: str, name: str, suffix: str) -> str:
    return os.path.join(root, "state", "crew", name + suffix)


def require_crew(root: str, name: str) -> None:
    """*name* is a registered crew of the home at *root*, else a :class:`UsageError` naming
    the fix (a symlinked registration is refused as unsafe state)."""
    if not valid_name(name):
        raise UsageError(f"invalid crew name {name!r}: use 1-64 characters from A-Z a-z 0-9 . _ - "
                         "(not starting with . or -)")
    registration = crew_file(root, name, PANE)
    refuse_symlink(registration)
    if not os.path.isfile(registration):
        raise unknown_crew(os.path.dirname(registration), name)


def unknown_crew(crew_dir: str, name: str) -> UsageError:
    """The error for a crew name that is not registered, with the registered name it is most
    likely a typo of."""
    from firstmate.base.suggest import did_you_mean

    try:
        names = [entry[: -len(PANE)] for entry in os.listdir(crew_dir) if entry.endswith(PANE)]
    except OSError:
        names = []
    return UsageError(f"unknown crew {name!r}; {did_you_mean(name, names)}register it first with: "
                      f"fm crew add {name} --pane TARGET")


def status_text(line: str, max_bytes: int = MAX_STATUS_BYTES) -> str:
    """One printable line: escape sequences and controls dropped, line breaks made spaces,
    bytes that were not UTF-8 made U+FFFD (a wake's own rules), cut to *max_bytes*."""
    from firstmate.base.wakeinput import clean

    text = clean(line).strip()
    data = text.encode("utf-8", "replace")
    if len(data) > max_bytes:
        text = data[:max_bytes].decode("utf-8", "ignore").rstrip()
    return text


def check_ground(root: str) -> None:
    """The home and its state directory still exist (:meth:`firstmate.store.home.Home.check_ground`)."""
    for path in (root, os.path.join(root, "state")):
        refuse_symlink(path)
        if not os.path.isdir(path):
            raise StateError(f"{path} no longer exists; recreate the home or point FM_HOME at one")


def append_whole(path: str, data: bytes) -> int:
    """Append *data* whole or not at all (see the module docstring); returns the new size."""
    import fcntl

    fd = open_private(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = os.fstat(fd).st_size
        if start and os.pread(fd, 1, start - 1) != b"\n":
            data = b"\n" + data
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            try:  # noqa: SIM105 - contextlib costs this path an import
                os.ftruncate(fd, start)  # (if even this fails, readers ignore a torn line)
            except OSError:
                pass
            raise StateError(f"cannot write {path}: {exc.strerror}; nothing was recorded - free "
                             "disk space (or raise the file-size limit) and report again") from exc
        return os.fstat(fd).st_size
    except OSError as exc:
        raise StateError(f"cannot write {path}: {exc.strerror}; check that the state directory "
                         "is writable") from exc
    finally:
        os.close(fd)


#: What marks a home joined to a fleet (:data:`firstmate.fast.fleetbell.LOCK` in
#: ``state/fleet``), spelled here so that every other home pays one ``stat`` and no import.
JOINED = os.path.join("state", "fleet", "forward.lock")


#: The crews' change journal (``state/crew/.changes``): every writer of a crew's status log or
#: turn-end marker here appends the crew's name to it, then rings, so the watcher's status
#: source looks at the crews named since it last looked instead of at the whole fleet
#: (:mod:`firstmate.watch.sources.status`). Best effort: a name it misses, like a line written
#: by hand, is found by the source's full pass.
CHANGES = ".changes"


def note_changed(root: str, *names: str) -> None:
    """Append *names* to the home's change journal (:data:`CHANGES`); never raises."""
    try:
        fd = os.open(os.path.join(root, "state", "crew", CHANGES),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        os.write(fd, "".join(f"{name}\n" for name in names).encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def ring(root: str) -> None:
    from firstmate.fast import bell

    bell.ring_address(bell.address_of(os.path.join(root, "state")))
    if os.path.lexists(os.path.join(root, JOINED)):
        from firstmate.fast import fleetbell

        fleetbell.ring(root)  # (a joined home's forwarder sends the report on)


def status(root: str, name: str, line: str, *, now: float | None = None) -> tuple[str, float,
                                                                                     int, int]:
    """Append ``<epoch>\\t<line>`` to crew *name*'s status log and ring the doorbell: the text
    kept, its stamp, and where the line starts and ends in the log."""
    require_crew(root, name)
    text = status_text(line)
    if not text:
        raise UsageError(EMPTY)
    at = time.time() if now is None else now
    data = f"{at:.3f}\t{text}\n".encode()
    end = append_whole(crew_file(root, name, STATUS), data)
    note_changed(root, name)
    ring(root)
    return text, round(at, 3), end - len(data), end


def turn_ended(root: str, name: str, *, now: float | None = None) -> None:
    """Record that crew *name*'s harness ended a turn (``touch`` of the marker works too)."""
    require_crew(root, name)
    at = time.time() if now is None else now
    line = f"{at:.3f}\n".encode()
    marker = crew_file(root, name, TURN_ENDED)
    if append_whole(marker, line) > TURN_MARKER_MAX:
        # Keep the marker small: the rename gives it a new inode, which still reads as a change.
        tmp = f"{marker}.tmp.{os.getpid()}"
        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        os.replace(tmp, marker)
    note_changed(root, name)
    ring(root)


__all__ = ["CHANGES", "EMPTY", "MAX_STATUS_BYTES", "TURN_MARKER_MAX", "append_whole", "check_ground",
           "note_changed", "require_crew", "status", "status_text", "turn_ended", "unknown_crew", "valid_name"]
