"""The mark that says a home's ``state/`` was made by this user's fm on this machine.

With project homes found by walking up from the current directory, a repository can carry a
``.firstmate/state/`` of its own: crew registrations naming tmux panes, queued rows, checks. Such
state must never make fm act (type into a pane, run anything). So every ``state/`` fm makes gets
``state/home.mark``: an HMAC-SHA256 of the home's real path under the home's secret, which lives
outside the home (:mod:`firstmate.base.keyring`, one secret per home and user). A copied, cloned
or moved state carries no mark that verifies there.

Checking costs two small reads and three SHA-256 blocks, with nothing but ``os`` and the
interpreter's built-in SHA-256 (``hashlib`` and ``hmac`` load OpenSSL, which a hook's start
cannot afford).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

MARK_NAME = "home.mark"
#: What the MAC covers besides the path, so no other authenticated body can pass for a mark.
PURPOSE = b"firstmate-home-mark-v1\0"
_BLOCK = 64


#: XOR with HMAC's inner and outer pads, as ``bytes.translate`` tables.
_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))


def hmac_sha256(key: bytes, message: bytes) -> str:
    """``hmac.new(key, message, hashlib.sha256).hexdigest()``, without importing either."""
    from firstmate.base.fasthash import sha256

    if len(key) > _BLOCK:
        key = sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = sha256(key.translate(_IPAD) + message).digest()
    return str(sha256(key.translate(_OPAD) + inner).hexdigest())


def expected(root: str, key: bytes, *, real: str | None = None) -> str:
    """The mark of the home at *root* (by its real path; *real* when known) under *key*."""
    path = real or os.path.realpath(root)
    return hmac_sha256(key, PURPOSE + path.encode("utf-8", "surrogateescape"))


def mark_path(root: str) -> str:
    return os.path.join(root, "state", MARK_NAME)


def _read_mark(root: str) -> str | None:
    try:
        fd = os.open(mark_path(root), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 256).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def verdict(root: str, env: Mapping[str, str]) -> str:
    """``"ok"`` (the mark verifies), ``"missing"`` (no mark) or ``"foreign"`` (a mark this
    user's secret for this path does not make). Raises
    :class:`~firstmate.base.errors.StateError` when the keys directory is not safe to read."""
    from _operator import _compare_digest  # (hmac.compare_digest, without importing hmac)

    from firstmate.base.keyring import read_key

    claimed = _read_mark(root)
    if claimed is None:
        return "missing"
    real = os.path.realpath(root)
    key = read_key(root, env, real=real)
    if key is None:
        return "foreign"
    return "ok" if _compare_digest(claimed, expected(root, key, real=real)) else "foreign"


def write(root: str, env: Mapping[str, str]) -> None:
    """Mark the home at *root* as this user's on this machine (its secret made on first use)."""
    from firstmate.base.keyring import ensure_key
    from firstmate.base.safepaths import atomic_write

    key = ensure_key(root, env)
    atomic_write(mark_path(root), (expected(root, key) + "\n").encode("ascii"))


def ensure_home(root: str, env: Mapping[str, str]) -> bool:
    """:func:`firstmate.base.safepaths.ensure_home`, a new ``state/`` marked as this user's
    (*env* names the keys directory). True when this call made the home."""
    from firstmate.base.safepaths import ensure_home as make

    created = make(root)
    if created:
        write(root, env)
    return created


#: What fm itself puts in a new ``state/`` before any command uses it: a state holding nothing
#: else was never used, so there is nothing in it to act on.
SKELETON = frozenset({"logs", "crew"})


def vacant(root: str) -> bool:
    """Whether the home's ``state/`` holds nothing but fm's empty skeleton."""
    state = os.path.join(root, "state")
    try:
        names = os.listdir(state)
    except OSError:
        return False
    for name in names:
        if name == MARK_NAME:
            continue  # (a mark that does not verify marks nothing)
        if name not in SKELETON:
            return False
        try:
            if os.listdir(os.path.join(state, name)):
                return False
        except OSError:
            return False
    return True


__all__ = ["MARK_NAME", "PURPOSE", "SKELETON", "ensure_home", "expected", "hmac_sha256",
           "mark_path", "vacant", "verdict", "write"]
