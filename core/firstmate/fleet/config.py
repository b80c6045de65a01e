"""A home's fleet membership and secrets, kept outside the home.

Everything that lets a home speak for a fleet lives in the user's private keys directory
(:mod:`firstmate.base.keyring`), in ``<keys>/<hash of the home's real path>.fleet/`` (0700):

``primary.json``   on the primary: the fleet's name, how the relay reaches the server, and each
                   host's key and NATS user (``fm fleet serve`` / ``use`` / ``host add``)
``server.conf``    on a primary that serves: the ``nats-server`` configuration, users included
``hosts/H.creds``  the credentials file issued for host H (what ``fm fleet join`` reads)
``member.json``    on a joined home: the fleet, this host's name, its key and NATS user

Every file is 0600. A home copied, cloned or committed carries none of it, so a copy never
publishes into (or relays for) the fleet its original belonged to. Credentials are never on a
command line and never in a log: commands read them from files (or a file named in the
environment) and print only paths.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.base.errors import StateError, UsageError
from firstmate.base.keyring import keys_dir
from firstmate.base.safepaths import atomic_write, make_private_dir, open_private
from firstmate.base.trust import verify_ancestors, verify_dir
from firstmate.fleet import names

#: A credentials file named in the environment (instead of ``--creds``).
CREDS_ENV = "FM_FLEET_CREDS"
CREDS_FORMAT = "firstmate-fleet-creds"
PRIMARY = "primary.json"
MEMBER = "member.json"
SERVER_CONF = "server.conf"
HOSTS = "hosts"
#: Most bytes of a credentials or config file read.
MAX_FILE = 65536
#: Where ``fm fleet serve`` listens by default.
DEFAULT_LISTEN = "127.0.0.1:4222"


@attrs.frozen
class Auth:
    """How one NATS connection authenticates: a user and password, or a token."""

    user: str = ""
    password: str = attrs.field(default="", repr=False)
    token: str = attrs.field(default="", repr=False)

    @classmethod
    def fresh(cls, user: str) -> Auth:
        return cls(user, secrets.token_urlsafe(24))

    @classmethod
    def of(cls, data: object, where: str) -> Auth:
        if not isinstance(data, dict):
            raise UsageError(f"{where}: expected an object with user and password, or a token")
        user, password, token = (data.get(k, "") for k in ("user", "password", "token"))
        if not all(isinstance(v, str) for v in (user, password, token)) \
                or not ((user and password) or token):
            raise UsageError(f"{where}: give \"user\" and \"password\", or \"token\" (strings)")
        return cls(str(user), str(password), str(token))

    def to_json(self) -> dict[str, str]:
        found = {"user": self.user, "password": self.password, "token": self.token}
        return {k: v for k, v in found.items() if v}

    def connect_kwargs(self) -> dict[str, str]:
        if self.token:
            return {"token": self.token}
        return {"user": self.user, "password": self.password}


@attrs.frozen
class HostEntry:
    name: str
    #: The host's signing key (hex), shared only with that host.
    key: str = attrs.field(repr=False)
    #: The host's own NATS user (on a served fleet; on a fleet using someone else's server, the
    #: user that server was told about).
    auth: Auth
    #: How the primary reaches the host's tmux over SSH, as stored (with its ``mac``); read and
    #: verified by :mod:`firstmate.fleet.sshhosts` only, never trusted here.
    ssh: Mapping[str, Any] | None = attrs.field(default=None, eq=False)

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"key": self.key, "auth": self.auth.to_json()}
        if self.ssh is not None:
            found["ssh"] = dict(self.ssh)
        return found


@attrs.frozen
class Primary:
    fleet: str
    #: ``serve`` (fm runs the server) or ``use`` (the user's own server).
    mode: str
    urls: tuple[str, ...]
    relay: Auth
    listen: str = ""
    replicas: int = 1
    hosts: tuple[HostEntry, ...] = ()
    #: What hosts connect to (the relay's own URLs when empty).
    join_urls: tuple[str, ...] = ()

    @property
    def public(self) -> tuple[str, ...]:
        return self.join_urls or self.urls

    def host(self, name: str) -> HostEntry | None:
        return next((entry for entry in self.hosts if entry.name == name), None)

    def key_of(self, name: str) -> bytes | None:
        entry = self.host(name)
        return None if entry is None else bytes.fromhex(entry.key)

    def to_json(self) -> dict[str, Any]:
        return {"fleet": self.fleet, "mode": self.mode, "urls": list(self.urls),
                "relay": self.relay.to_json(), "listen": self.listen, "replicas": self.replicas,
                "hosts": {entry.name: entry.to_json() for entry in self.hosts},
                "join_urls": list(self.join_urls)}

    @classmethod
    def of(cls, data: Mapping[str, Any], where: str) -> Primary:
        try:
            hosts = tuple(HostEntry(names.token(name, "host"), _hexkey(entry["key"]),
                                    Auth.of(entry["auth"], where), _block(entry.get("ssh")))
                          for name, entry in sorted(data.get("hosts", {}).items()))
            mode = data["mode"]
            if mode not in ("serve", "use"):
                raise ValueError(mode)
            return cls(names.token(data["fleet"], "fleet"), mode, _urls(data["urls"]),
                       Auth.of(data["relay"], where), str(data.get("listen", "")),
                       int(data.get("replicas", 1)), hosts,
                       _urls(data["join_urls"]) if data.get("join_urls") else ())
        except (KeyError, TypeError, ValueError, AttributeError, UsageError) as exc:
            raise StateError(f"{where} is not a fleet configuration ({exc}); remove it and run "
                             "fm fleet serve (or fm fleet use) again") from None


@attrs.frozen
class Member:
    """What a joined home knows: its fleet, its own name and key, and its NATS user."""

    fleet: str
    host: str
    urls: tuple[str, ...]
    auth: Auth
    key: str = attrs.field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"format": CREDS_FORMAT, "fleet": self.fleet, "host": self.host,
                "urls": list(self.urls), "auth": self.auth.to_json(), "key": self.key}

    @classmethod
    def of(cls, data: Mapping[str, Any], where: str) -> Member:
        if data.get("format") != CREDS_FORMAT:
            raise UsageError(f"{where} is not a fleet credentials file (fm fleet host add "
                             "writes one on the primary)")
        try:
            return cls(names.token(data["fleet"], "fleet"), names.token(data["host"], "host"),
                       _urls(data["urls"]), Auth.of(data["auth"], where),
                       _hexkey(data["key"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where} is not a complete fleet credentials file ({exc}); ask "
                             "the primary for a new one: fm fleet host add HOST --replace") from None


def _block(value: object) -> Mapping[str, Any] | None:
    """A host's stored SSH block as it is (an object), else None: it is verified where used."""
    return dict(value) if isinstance(value, dict) else None


def _hexkey(value: object) -> str:
    if not isinstance(value, str) or len(value) != 64:
        raise ValueError("the key is not 64 hex digits")
    bytes.fromhex(value)
    return value


def parse_urls(text: str) -> tuple[str, ...]:
    """``nats://h:p`` URLs, comma-separated (a cluster's nodes)."""
    return _urls([part.strip() for part in text.split(",") if part.strip()])


def _urls(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ValueError("no server URL")
    urls = []
    for url in value:
        if not isinstance(url, str) or not url.startswith(("nats://", "tls://")) \
                or any(c.isspace() or not c.isprintable() for c in url) or len(url) > 300:
            raise UsageError(f"invalid server URL {str(url)[:100]!r}: give nats://HOST:PORT "
                             "(or tls://HOST:PORT), several separated by commas")
        if "@" in url.partition("://")[2].partition("/")[0]:
            raise UsageError("a server URL carries no credentials: give them in a file "
                             "(--creds FILE or FM_FLEET_CREDS)")
        urls.append(url)
    return tuple(urls)


# --- where it lives ----------------------------------------------------------------------------


def fleet_dir(root: str, env: Mapping[str, str]) -> str:
    digest = hashlib.sha256(os.path.realpath(root).encode("utf-8", "surrogateescape"))
    return os.path.join(keys_dir(env), digest.hexdigest()[:32] + ".fleet")


def ensure_dir(root: str, env: Mapping[str, str]) -> str:
    directory = fleet_dir(root, env)
    keys = os.path.dirname(directory)
    verify_ancestors(keys)
    os.makedirs(os.path.dirname(keys), 0o700, exist_ok=True)
    make_private_dir(keys)
    verify_dir(keys, "keys directory")
    make_private_dir(directory)
    verify_dir(directory, "fleet directory")
    make_private_dir(os.path.join(directory, HOSTS))
    return directory


def read_private(path: str, what: str) -> dict[str, Any] | None:
    """The JSON object in *path*, a file only this user can read; None when it is absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"cannot read the {what} {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise StateError(f"the {what} {path} is not a regular file; remove it")
    if st.st_uid != os.geteuid():
        raise StateError(f"the {what} {path} is owned by uid {st.st_uid}, not by you; only use "
                         "credentials of your own")
    if st.st_mode & 0o077:
        raise StateError(f"the {what} {path} can be read or written by other users (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {path}")
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(MAX_FILE + 1)
    if len(raw) > MAX_FILE:
        raise StateError(f"the {what} {path} is too large to be one")
    try:
        data = json.loads(raw)
    except ValueError:
        raise UsageError(f"the {what} {path} is not JSON") from None
    if not isinstance(data, dict):
        raise UsageError(f"the {what} {path} is not a JSON object")
    return data


def write_private(path: str, data: Mapping[str, Any] | bytes) -> None:
    raw = data if isinstance(data, bytes) else (json.dumps(data, indent=2, sort_keys=True)
                                                + "\n").encode()
    atomic_write(path, raw)


def load_primary(root: str, env: Mapping[str, str]) -> Primary | None:
    path = os.path.join(fleet_dir(root, env), PRIMARY)
    data = read_private(path, "fleet configuration")
    return None if data is None else Primary.of(data, path)


def save_primary(root: str, env: Mapping[str, str], primary: Primary) -> None:
    write_private(os.path.join(ensure_dir(root, env), PRIMARY), primary.to_json())


def load_member(root: str, env: Mapping[str, str]) -> Member | None:
    path = os.path.join(fleet_dir(root, env), MEMBER)
    try:
        data = read_private(path, "fleet membership")
        return None if data is None else Member.of(data, path)
    except UsageError as exc:  # (kept state, not input: damaged, or written by hand)
        raise StateError(f"{exc.message}; remove {path} (or run fm fleet leave), then join "
                         "again") from None


def save_member(root: str, env: Mapping[str, str], member: Member) -> None:
    write_private(os.path.join(ensure_dir(root, env), MEMBER), member.to_json())


def forget(root: str, env: Mapping[str, str], name: str) -> bool:
    """Remove ``name`` (``primary.json``, ``member.json``) of this home's fleet directory."""
    path = os.path.join(fleet_dir(root, env), name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def creds_path(root: str, env: Mapping[str, str], host: str) -> str:
    return os.path.join(fleet_dir(root, env), HOSTS, f"{host}.creds")


def issue(primary: Primary, entry: HostEntry) -> Member:
    """The credentials host *entry* joins with."""
    return Member(primary.fleet, entry.name, primary.public, entry.auth, entry.key)


def read_creds(path: str | None, env: Mapping[str, str]) -> tuple[dict[str, Any], str]:
    """The credentials file ``--creds`` names, else ``FM_FLEET_CREDS``: its JSON and its path.
    ``--creds -`` reads them from stdin (how the primary hands them over SSH)."""
    if path == "-":
        return _read_stdin(), "stdin"
    where = path or (env.get(CREDS_ENV) or "").strip()
    if not where:
        raise UsageError(f"no credentials: pass --creds FILE or set {CREDS_ENV}=FILE (never the "
                         "secret itself on the command line)")
    where = os.path.abspath(os.path.expanduser(where))
    data = read_private(where, "credentials file")
    if data is None:
        raise UsageError(f"credentials file {where} does not exist")
    return data, where


def _read_stdin() -> dict[str, Any]:
    import sys

    raw = sys.stdin.buffer.read(MAX_FILE + 1)
    if len(raw) > MAX_FILE:
        raise UsageError("the credentials on stdin are too large to be one")
    try:
        data = json.loads(raw)
    except ValueError:
        raise UsageError("the credentials on stdin are not JSON (give the file fm fleet host "
                         "add wrote)") from None
    if not isinstance(data, dict):
        raise UsageError("the credentials on stdin are not a JSON object")
    return data


def new_key() -> str:
    return secrets.token_hex(32)


def new_fleet_name() -> str:
    return "f" + secrets.token_hex(4)


def remove_tree(directory: str) -> None:
    """Remove a directory fm made (files and empty folders below it)."""
    for base, dirs, files in os.walk(directory, topdown=False):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(base, name))
        for name in dirs:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(base, name))
    with contextlib.suppress(OSError):
        os.rmdir(directory)


__all__ = ["CREDS_ENV", "CREDS_FORMAT", "DEFAULT_LISTEN", "MEMBER", "PRIMARY", "SERVER_CONF",
           "Auth", "HostEntry", "Member", "Primary", "creds_path", "ensure_dir", "fleet_dir",
           "forget", "issue", "load_member", "load_primary", "new_fleet_name", "new_key",
           "parse_urls", "read_creds", "read_private", "remove_tree", "save_member",
           "save_primary", "write_private"]
