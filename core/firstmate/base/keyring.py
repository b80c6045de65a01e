"""Per-home secrets that authenticate the commands a home names, kept outside every home.

A home's state checks and its supervision host's engine are commands fm runs as you. Each is
stored with an HMAC-SHA256 keyed by a secret of that home, and the secret lives in your own
private directory — ``FIRSTMATE_KEYS_DIR``, else ``$XDG_CONFIG_HOME/firstmate/keys``, else
``~/.config/firstmate/keys`` (0700) — as one 0600 file per home, named by a hash of the home's
real path. A home copied, cloned or committed with its definitions carries no secret that
counts: what it names is rejected until you register it again in that place.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping

from firstmate.base.errors import StateError
from firstmate.base.names import KEYS_DIR_ENV
from firstmate.base.safepaths import make_private_dir, open_private
from firstmate.base.trust import verify_ancestors, verify_dir, verify_file

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


def key_file(root: str, env: Mapping[str, str]) -> str:
    """The secret's file for the home at *root* (by its real path)."""
    digest = hashlib.sha256(os.path.realpath(root).encode("utf-8", "surrogateescape"))
    return os.path.join(keys_dir(env), digest.hexdigest()[:32] + ".key")


def _parse(text: str) -> bytes | None:
    text = text.strip()
    if len(text) != KEY_HEX_LEN:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def read_key(root: str, env: Mapping[str, str]) -> bytes | None:
    """The home's secret, or None when it has none yet. Raises :class:`StateError` when the
    keys directory or the file is not yours alone, or the file is not a secret."""
    directory = keys_dir(env)
    if not verify_dir(directory, "keys directory"):
        return None
    path = key_file(root, env)
    if not verify_file(path, "home secret"):
        return None
    try:
        fd = open_private(path, os.O_RDONLY)
    except StateError:
        return None  # (removed between the check and the open)
    with os.fdopen(fd, "r", encoding="ascii", errors="replace") as fh:
        key = _parse(fh.read(256))
    if key is None:
        raise StateError(f"{path} is not a valid home secret; remove it, then register this "
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
    fresh = secrets.token_hex(KEY_HEX_LEN // 2)
    try:
        fd = open_private(key_file(root, env), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except StateError:
        key = read_key(root, env)  # a concurrent registration created it first
        if key is None:
            raise
        return key
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(fresh + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(key_file(root, env))  # never leave a half-written secret
        raise StateError(f"cannot write {key_file(root, env)}: {exc.strerror}; free space (or "
                         "raise the file-size limit) and retry") from exc
    return bytes.fromhex(fresh)


def canonical(body: Mapping[str, object]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def mac(key: bytes, body: Mapping[str, object]) -> str:
    return hmac.new(key, canonical(body), hashlib.sha256).hexdigest()


def verify_mac(key: bytes | None, body: Mapping[str, object], claimed: object) -> bool:
    return (key is not None and isinstance(claimed, str)
            and hmac.compare_digest(claimed, mac(key, body)))


__all__ = ["KEYS_DIR_ENV", "canonical", "ensure_key", "key_file", "keys_dir", "mac", "read_key",
           "verify_mac"]
