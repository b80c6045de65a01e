"""SHA-256 hex digests without importing :mod:`hashlib`.

hashlib loads OpenSSL (several ms), which the ``fm wake append`` fast path cannot afford; the
interpreter's built-in SHA-256 gives the same digest. hashlib is the fallback when a build lacks it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _constructor() -> Any:
    for name in ("_sha2", "_sha256"):  # 3.12+, then 3.11
        try:
            return __import__(name).sha256
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256


_SHA256: Any = None


def sha256(data: bytes = b"") -> Any:
    """A SHA-256 object of *data* (what ``hashlib.sha256(data)`` gives)."""
    global _SHA256
    if _SHA256 is None:
        _SHA256 = _constructor()
    return _SHA256(data)


def sha256_hex(data: bytes) -> str:
    """The lowercase hex SHA-256 of *data* (what ``hashlib.sha256(data).hexdigest()`` gives)."""
    return str(sha256(data).hexdigest())
