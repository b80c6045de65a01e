"""Per-home secrets that authenticate the commands a home names, kept outside every home.

A home's state checks and its supervision host's engine are commands fm runs as you. Each is
stored with an HMAC-SHA256 keyed by a secret of that home, and the secret lives in your own
private directory — ``FIRSTMATE_KEYS_DIR``, else ``$XDG_CONFIG_HOME/firstmate/keys``, else
``~/.config/firstmate/keys`` (0700) — as one 0600 file per home, named by a hash of the home's
real path. A home copied, cloned or committed with its definitions carries no secret that
counts: what it names is rejected until you register it again in that place.

Reading a secret imports nothing beyond ``os`` (the home's own mark, :mod:`firstmate.base.homemark`,
is checked with it on every hook); ``json`` and ``hmac`` load only to sign or verify a body.
"""

from __future__ import annotations

import os

from firstmate.base.names import KEYS_DIR_ENV
from firstmate.base.safepaths import make_private_dir, open_private, state_error
from firstmate.base.trust import verify_ancestors, verify_dir, verify_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

KEY_HEX_LEN = 64


def keys_dir(env: Mapping[str, str]) -> str:
    """Where the secrets live. *env* first, then this process's own environment (callers pass
    overrides, and an override that leaves the keys out must not move them)."""
    def get(name: str) -> str:
        return (env.get(name) or os.environ.get(name) or "").strip()

    explicit = get(KEYS_DIR_ENV)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    config = get("XDG_CONFIG_HOME")
    if not config or not os.path.isabs(config):
        config = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "firstmate", "keys")


def key_file(root: str, env: Mapping[str, str], *, real: str | None = None) -> str:
    """The secret's file for the home at *root* (by its real path; *real* when the caller has
    it already)."""
    from firstmate.base.fasthash import sha256_hex

    digest = sha256_hex((real or os.path.realpath(root)).encode("utf-8", "surrogateescape"))
    return os.path.join(keys_dir(env), digest[:32] + ".key")


def _parse(text: str) -> bytes | None:
    text = text.strip()
    if len(text) != KEY_HEX_LEN:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def read_key(root: str, env: Mapping[str, str], *, real: str | None = None) -> bytes | None:
    """The home's secret, or None when it has none yet. Raises :class:`StateError` when the
    keys directory or the file is not yours alone, or the file is not a secret."""
    directory = keys_dir(env)
    if not verify_dir(directory, "keys directory"):
        return None
    path = key_file(root, env, real=real)
    if not verify_file(path, "home secret"):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # (removed between the check and the open)
    try:
        data = os.read(fd, 256)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    key = _parse(data.decode("ascii", "replace"))
    if key is None:
        raise state_error(f"{path} is not a valid home secret; remove it, then register this "
                          "home's checks again (fm check add NAME --replace -- ...)")
    return key


def ensure_key(root: str, env: Mapping[str, str]) -> bytes:
    """The home's secret, created (0600, exclusively, in a 0700 keys directory) on first use."""
    key = read_key(root, env)
    if key is not None:
        return key
    directory = keys_dir(env)
    verify_ancestors(directory)
    os.makedirs(os.path.dirname(directory), 0o700, exist_ok=True)
    make_private_dir(directory)
    verify_dir(directory, "keys directory")
    from firstmate.base.errors import StateError

    fresh = os.urandom(KEY_HEX_LEN // 2).hex()
    final = key_file(root, env)
    # The secret is written whole under a private name and then linked into place, so a
    # concurrent first command never reads a secret that is still empty (link, unlike rename,
    # fails when another process's secret got there first).
    tmp = os.path.join(directory,
                       f".{os.path.basename(final)}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        _write_whole(fd, final, fresh)
        try:
            os.link(tmp, final)
        except FileExistsError:
            key = read_key(root, env)  # a concurrent first use made it first
            if key is None:
                raise StateError(f"{final} appeared and vanished while this command made it; "
                                 "retry the command") from None
            return key
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise StateError(f"cannot create {final}: {exc.strerror}; check that the keys "
                                 "directory is writable") from exc
            return _create_in_place(root, env, final, fresh)
    finally:
        try:  # noqa: SIM105 - contextlib costs a hook's start an import
            os.unlink(tmp)
        except OSError:
            pass
    return bytes.fromhex(fresh)


#: errnos of a file system without hard links (EPERM, EXDEV, EMLINK, EOPNOTSUPP).
_NO_LINKS = frozenset({1, 18, 31, 95})


def _create_in_place(root: str, env: Mapping[str, str], final: str, fresh: str) -> bytes:
    """Create the secret at its own name, for a keys directory whose file system has no hard
    links (a concurrent first use can then find it empty for a moment, and refuses)."""
    from firstmate.base.errors import StateError

    try:
        fd = open_private(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except StateError:
        key = read_key(root, env)  # a concurrent first use created it first
        if key is None:
            raise
        return key
    try:
        _write_whole(fd, final, fresh)
    except StateError:
        try:  # noqa: SIM105 - contextlib costs a hook's start an import
            os.unlink(final)  # never leave a half-written secret
        except OSError:
            pass
        raise
    return bytes.fromhex(fresh)


def _write_whole(fd: int, final: str, fresh: str) -> None:
    """Write the secret *fresh* to *fd* (closed afterwards) and flush it to the disk; a
    failure is a :class:`StateError` naming *final*, the secret's own path."""
    from firstmate.base.errors import StateError

    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(fresh + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise StateError(f"cannot write {final}: {exc.strerror}; free space (or raise the "
                         "file-size limit) and retry") from exc


def canonical(body: Mapping[str, object]) -> bytes:
    import json

    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def mac(key: bytes, body: Mapping[str, object]) -> str:
    import hashlib
    import hmac

    return hmac.new(key, canonical(body), hashlib.sha256).hexdigest()


def verify_mac(key: bytes | None, body: Mapping[str, object], claimed: object) -> bool:
    import hmac

    return (key is not None and isinstance(claimed, str)
            and hmac.compare_digest(claimed, mac(key, body)))


__all__ = ["KEYS_DIR_ENV", "canonical", "ensure_key", "key_file", "keys_dir", "mac", "read_key",
           "verify_mac"]
