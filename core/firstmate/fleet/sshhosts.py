"""How the primary reaches a fleet host's tmux: the host's SSH settings, authenticated, and the
``ssh`` command lines made from them.

``fm fleet host add H --ssh [USER@]ADDR …`` keeps a host's settings in the fleet configuration
(``primary.json``, in the private keys directory: :mod:`firstmate.fleet.config`), each host's
block with a ``mac``: an HMAC-SHA256 keyed by the home's secret (:mod:`firstmate.base.keyring`),
so that no file fm did not write for this home makes it run ``ssh`` (an edited or copied block
is refused, exit 4, naming the command that writes it again).

Every ``ssh`` fm runs for a host goes through one persistent connection per host: a control
master (``ControlMaster=auto``) whose socket is in the home's private ``state/fleet/ssh/``
(``ControlPersist``: it outlives the one-shot watcher that started it), in batch mode (no
prompt), checking the host's key strictly against fm's own ``known_hosts`` beside the fleet
configuration (filled once, by ``host add``) and the user's. Everything fm hands the remote shell
is quoted for it (:func:`shlex.join`): names, texts and paths are taken literally there. The
host's login shell must be a POSIX one (sh, bash, dash, zsh, ksh).

Environment: ``FM_SSH`` the ssh client (default ``ssh``); ``FM_SSH_CONFIG`` an ssh
configuration file for ``-F`` (``none``: read none; default: ssh's own); ``FM_SSH_TIMEOUT``
seconds one remote call may take (default 10); ``FM_SSH_CONNECT_TIMEOUT`` seconds to connect
(default 5); ``FM_SSH_PERSIST`` seconds an idle control master stays (default 600).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from firstmate.base import keyring
from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError, StateError, UsageError
from firstmate.base.safepaths import make_private_dir
from firstmate.base.trust import verify_dir
from firstmate.fleet import config, names
from firstmate.store.home import Home

#: What a host's SSH block's MAC covers besides the block, so that no other authenticated body
#: (a check, an install record, the host engine) can pass for one.
MAC_PURPOSE = "firstmate-fleet-ssh"
KNOWN_HOSTS = "known_hosts"
#: The home's private directory of control sockets (``state/fleet/ssh``).
SSH_DIR = "ssh"
DEFAULT_TIMEOUT = 10.0
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_PERSIST = 600.0
#: ssh's exit status for its own failures (connecting, authenticating, the host's key).
SSH_FAILED = 255
#: Longest control socket path used (a unix socket's path is at most 107 bytes, and ssh binds a
#: temporary name 17 characters longer first).
MAX_CONTROL_PATH = 90
_SAFE_PATH = re.compile(r"[A-Za-z0-9/._+-]+")
#: ``[user@]host``: a user name and a host name or address, neither starting with ``-``.
DEST_RE = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,63}@)?"
                     r"(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)")


class NoAccess(FirstmateError):
    """A host has no SSH settings here: its crews report, but fm does not reach its panes."""

    def __init__(self, host: str) -> None:
        super().__init__(f"fm cannot reach host {host}'s panes: it has no SSH settings here - "
                         f"give them with fm fleet host add {host} --ssh [USER@]ADDRESS "
                         "(docs/fleet-remote.md)")
        self.host = host


@attrs.frozen
class SshHost:
    """One host's SSH settings, as ``fm fleet host add --ssh`` recorded them."""

    host: str
    #: ``[user@]address`` as ssh takes it.
    dest: str
    port: int | None = None
    #: The private key file (an absolute path), or None: ssh's own choice.
    identity: str | None = None
    #: The host's project directory: fm runs there (None: the login directory).
    directory: str | None = None
    #: The fm command on the host (shell words, e.g. ``/home/me/.local/bin/fm``).
    fm: str = "fm"
    #: The tmux program on the host.
    tmux: str = "tmux"
    #: The tmux server the host's crews run on (as ``FM_TMUX_SOCKET`` there; None: default).
    socket: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"dest": self.dest, "port": self.port, "identity": self.identity,
                "dir": self.directory, "fm": self.fm, "tmux": self.tmux, "socket": self.socket}

    @property
    def shown(self) -> str:
        return self.dest + ("" if self.port is None else f" port {self.port}")

    def digest(self) -> str:
        """Names this host's connection: another address, port or key is another connection."""
        raw = "\0".join([self.dest, str(self.port or ""), self.identity or ""])
        return hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:8]

    def tmux_argv(self) -> list[str]:
        """The host's tmux, on its crews' server, writing UTF-8 (``-u``: a login over ssh
        may have no UTF-8 locale, and tmux then writes a TAB or a name's letters as ``_``)."""
        argv = [self.tmux, "-u"]
        if self.socket:
            argv += ["-S", self.socket] if "/" in self.socket else ["-L", self.socket]
        return argv

    def fm_words(self, *args: str) -> list[str]:
        """``fm ARGS`` on the host, on its crews' tmux server (``FM_TMUX_SOCKET``)."""
        words = ["env"]
        if self.socket:
            words.append(f"FM_TMUX_SOCKET={self.socket}")
        if self.tmux != "tmux":
            words.append(f"FM_TMUX={self.tmux}")
        return [*words, *shlex.split(self.fm), *args]


def _text(value: object, what: str, *, limit: int = 4096) -> str:
    if not isinstance(value, str) or not value or len(value) > limit \
            or not value.isprintable():
        raise UsageError(f"invalid {what} {str(value)[:80]!r}: give printable text on one line")
    return value


def settings(host: str, dest: str, *, port: int | None = None, identity: str | None = None,
             directory: str | None = None, fm: str | None = None, tmux: str | None = None,
             socket: str | None = None) -> SshHost:
    """Checked settings for *host* (names refused in one line each)."""
    names.token(host, "host")
    if not DEST_RE.fullmatch(dest or ""):
        raise UsageError(f"invalid --ssh {dest[:80]!r}: give [USER@]ADDRESS (a host name or an "
                         "address; the port goes in --port)")
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"invalid --port {port}: give 1 to 65535")
    if identity is not None:
        identity = os.path.abspath(os.path.expanduser(_text(identity, "--identity")))
        if not os.path.isfile(identity):
            raise UsageError(f"--identity {identity} is not a file: give the private key ssh "
                             "logs in with")
    if directory is not None:
        directory = _text(directory, "--remote-dir")
    if fm is not None:
        try:
            if not shlex.split(_text(fm, "--remote-fm")):
                raise ValueError
        except ValueError:
            raise UsageError(f"invalid --remote-fm {fm[:80]!r}: give the fm command on the host "
                             "(shell words)") from None
    if tmux is not None:
        tmux = _text(tmux, "--remote-tmux")
    if socket is not None:
        socket = _text(socket, "--remote-tmux-socket")
    return SshHost(host, dest, port, identity, directory, fm or "fm", tmux or "tmux",
                   socket or None)


# --- stored and verified -----------------------------------------------------------------------


def _mac_body(host: str, block: Mapping[str, Any]) -> dict[str, object]:
    return {"what": MAC_PURPOSE, "host": host,
            "ssh": {k: v for k, v in block.items() if k != "mac"}}


def sealed(root: str, env: Mapping[str, str], access: SshHost) -> dict[str, Any]:
    """*access* as stored: its settings and their MAC under the home's secret."""
    block = access.to_json()
    key = keyring.ensure_key(root, env)
    return {**block, "mac": keyring.mac(key, _mac_body(access.host, block))}


def opened(root: str, env: Mapping[str, str], host: str,
           block: Mapping[str, Any]) -> SshHost:
    """The settings a stored block holds, once its MAC verifies; else :class:`StateError`."""
    fix = (f"fm did not write them for this home (edited, or copied from elsewhere), so fm "
           f"runs nothing with them - record them again: fm fleet host add {host} --ssh "
           "[USER@]ADDRESS …")
    if not keyring.verify_mac(keyring.read_key(root, env), _mac_body(host, block),
                              block.get("mac")):
        raise StateError(f"host {host}'s SSH settings are not authenticated: {fix}")
    try:
        port = block.get("port")
        access = settings(host, str(block["dest"]), port=None if port is None else int(port),
                          directory=block.get("dir"), fm=block.get("fm"),
                          tmux=block.get("tmux"), socket=block.get("socket"))
        identity = block.get("identity")  # (not looked for here: ssh says when it is gone)
        return access if identity is None else attrs.evolve(access, identity=str(identity))
    except (KeyError, TypeError, ValueError, UsageError) as exc:
        raise StateError(f"host {host}'s SSH settings cannot be read ({exc}): record them "
                         f"again: fm fleet host add {host} --ssh [USER@]ADDRESS …") from None


def load(home: Home, env: Mapping[str, str], host: str) -> SshHost | None:
    """Host *host*'s verified SSH settings; None when it has none (or is in no fleet)."""
    root = os.fspath(home.root)
    primary = config.load_primary(root, env)
    entry = None if primary is None else primary.host(host)
    if entry is None or entry.ssh is None:
        return None
    return opened(root, env, host, entry.ssh)


def require(home: Home, env: Mapping[str, str], host: str) -> SshHost:
    """:func:`load`, refused in one line when the host has no SSH settings (or *host* is not a
    host name at all: exit 2, before anything is looked up or shown)."""
    names.token(host, "host")
    found = load(home, env, host)
    if found is None:
        raise NoAccess(host)
    return found


# --- the ssh command -----------------------------------------------------------------------------


def _quoted(path: str) -> str:
    """A path as ssh's option parser takes it: ``%`` escaped (ssh expands tokens), quoted."""
    if '"' in path or not path.isprintable():
        raise StateError(f"the path {path!r} cannot be given to ssh: move it to a plain name")
    return '"' + path.replace("%", "%%") + '"'


def known_hosts(home: Home, env: Mapping[str, str]) -> str:
    return os.path.join(config.fleet_dir(os.fspath(home.root), env), KNOWN_HOSTS)


def _private(path: str) -> str:
    make_private_dir(path)
    verify_dir(path, "control socket directory")
    return path


def control_path(home: Home, access: SshHost) -> str:
    """The host's control socket: in the home's ``state/fleet/ssh`` (0700) when that path is
    short and plain enough for a socket, else in a private directory of this user's, named by
    the home, under ``$XDG_RUNTIME_DIR`` or else the temporary directory."""
    name = f"{access.host}-{access.digest()}"
    state = os.path.join(os.fspath(home.state), "fleet", SSH_DIR)
    if len(state) + 1 + len(name) <= MAX_CONTROL_PATH and _SAFE_PATH.fullmatch(state):
        make_private_dir(os.path.dirname(state))
        return os.path.join(_private(state), name)
    digest = hashlib.sha256(os.path.realpath(os.fspath(home.state)).encode(
        "utf-8", "surrogateescape")).hexdigest()[:12]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    for base in ([runtime] if os.path.isabs(runtime) else []) + [tempfile.gettempdir()]:
        mine = os.path.join(base, f"fm-ssh-{os.geteuid()}")
        found = os.path.join(mine, digest)
        if len(found) + 1 + len(name) <= MAX_CONTROL_PATH and _SAFE_PATH.fullmatch(found):
            _private(mine)
            return os.path.join(_private(found), name)
    raise StateError(f"no directory short and plain enough for ssh's control socket of host "
                     f"{access.host}; set XDG_RUNTIME_DIR to a short private directory")


def ssh_program(env: Mapping[str, str]) -> str:
    program = (env.get("FM_SSH") or "").strip() or "ssh"
    if "/" not in program:
        program = shutil.which(program, path=env.get("PATH")) or program
    return program


def base_argv(home: Home, env: Mapping[str, str], access: SshHost, *,
              accept_new: bool = False, tty: bool = False) -> list[str]:
    """``ssh`` and its options for *access*, up to (not including) the destination."""
    argv = [ssh_program(env)]
    config_file = (env.get("FM_SSH_CONFIG") or "").strip()
    if config_file:
        argv += ["-F", config_file]
    connect = env_float(env, "FM_SSH_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT)
    persist = env_float(env, "FM_SSH_PERSIST", DEFAULT_PERSIST)
    files = _quoted(known_hosts(home, env)) + " ~/.ssh/known_hosts ~/.ssh/known_hosts2"
    argv += ["-o", "BatchMode=yes", "-o", "ControlMaster=auto",
             "-o", f"ControlPath={_quoted(control_path(home, access))}",
             "-o", f"ControlPersist={max(1, int(persist))}",
             "-o", f"ConnectTimeout={max(1, int(connect))}",
             "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
             "-o", f"StrictHostKeyChecking={'accept-new' if accept_new else 'yes'}",
             "-o", f"UserKnownHostsFile={files}", "-o", "LogLevel=ERROR"]
    if access.port is not None:
        argv += ["-p", str(access.port)]
    if access.identity is not None:
        argv += ["-i", access.identity.replace("%", "%%"), "-o", "IdentitiesOnly=yes"]
    argv.append("-t" if tty else "-T")
    return argv


def argv_for(home: Home, env: Mapping[str, str], access: SshHost, words: Sequence[str], *,
             accept_new: bool = False, tty: bool = False, there: bool = True) -> list[str]:
    """The ssh argv running *words* on the host, each taken literally by its shell (with
    *there*, in the host's project directory when one was given)."""
    command = shlex.join(words)
    if there and access.directory is not None:
        command = f"cd {shlex.quote(access.directory)} && {command}"
    return [*base_argv(home, env, access, accept_new=accept_new, tty=tty), "--", access.dest,
            command]


def timeout(env: Mapping[str, str]) -> float:
    return env_float(env, "FM_SSH_TIMEOUT", DEFAULT_TIMEOUT)


def summary(said: str) -> str:
    """What ssh (or the remote command) said on stderr, as one line: its last one, which names
    the failure (``Permission denied (publickey).``, ``Host key verification failed.``,
    ``connect to host … Connection refused``), after what a changed host key's banner means."""
    lines = [" ".join(line.split()) for line in said.splitlines()
             if line.strip() and set(line.strip()) != {"@"}]
    if not lines:
        return ""
    last = lines[-1]
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in said:
        last = f"the host's key is not the one recorded for it (a changed host key): {last}"
    return last[:300]


@attrs.frozen
class Ran:
    """One remote command's outcome: its status (None: ssh could not run, or ran out of
    time), what it printed, and why it failed (one line)."""

    status: int | None
    out: str
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 0

    @property
    def reached(self) -> bool:
        """The host was reached (whatever the command then did)."""
        return self.status is not None and self.status != SSH_FAILED


def run(home: Home, env: Mapping[str, str], access: SshHost, words: Sequence[str], *,
        stdin: bytes | None = None, limit: float | None = None,
        accept_new: bool = False, there: bool = True) -> Ran:
    """Run *words* on the host (bounded by *limit*, default ``FM_SSH_TIMEOUT``; with *there*,
    in its project directory)."""
    argv = argv_for(home, env, access, words, accept_new=accept_new, there=there)
    wait = timeout(env) if limit is None else limit
    try:
        done = subprocess.run(argv, input=stdin if stdin is not None else b"",
                              capture_output=True, timeout=wait, check=False, env=dict(env))
    except FileNotFoundError:
        return Ran(None, "", f"the ssh client {argv[0]!r} was not found (set FM_SSH)")
    except subprocess.TimeoutExpired:
        return Ran(None, "", f"no answer from host {access.host} ({access.shown}) within "
                             f"{wait:g}s")
    except OSError as exc:
        return Ran(None, "", f"ssh could not run: {exc.strerror}")
    said = summary(done.stderr.decode("utf-8", "replace"))
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode == SSH_FAILED:
        return Ran(SSH_FAILED, out, said or f"ssh to {access.shown} failed")
    return Ran(done.returncode, out, said)


@attrs.frozen
class Contact:
    """What the first contact with a host found: its tmux, and its fm (or why it did not
    answer)."""

    tmux: str
    fm: str
    fm_ok: bool = True


def first_contact(home: Home, env: Mapping[str, str], access: SshHost) -> Contact:
    """Reach the host once, recording its key in fm's ``known_hosts`` when it is not known
    (the one time fm accepts a new host key), and ask its tmux and fm for their versions;
    refused in one line when ssh or tmux fails."""
    config.ensure_dir(os.fspath(home.root), env)
    ran = run(home, env, access, [access.tmux, "-V"], accept_new=True, there=False)
    if not ran.reached:
        raise FirstmateError(f"cannot reach host {access.host} over SSH as {access.shown}: "
                             f"{ran.why}; nothing was saved - check the address, --port and "
                             "--identity (ssh must log in without a password or prompt)")
    if not ran.ok:
        raise FirstmateError(f"host {access.host} was reached, but {access.tmux!r} did not run "
                             f"there ({ran.why or f'exit status {ran.status}'}); nothing was "
                             "saved - give the tmux program with --remote-tmux PATH")
    version = " ".join(ran.out.split())[:60]
    found = run(home, env, access, access.fm_words("--version"))
    if found.ok:
        return Contact(version, " ".join(found.out.split())[:60])
    why = found.why or f"exit status {found.status}"
    return Contact(version, f"fm did not run there ({why[:160]})", False)


def close(home: Home, env: Mapping[str, str], access: SshHost) -> bool:
    """End the host's control master, if one runs (``ssh -O exit``)."""
    argv = base_argv(home, env, access)
    argv = [*argv[:-1], "-O", "exit", "--", access.dest]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout(env), check=False, env=dict(env))
        return done.returncode == 0
    return False


def every(home: Home, env: Mapping[str, str]) -> list[SshHost]:
    """Every host of the home's fleet with SSH settings that verify."""
    root = os.fspath(home.root)
    primary = config.load_primary(root, env)
    found = []
    for entry in () if primary is None else primary.hosts:
        if entry.ssh is not None:
            with contextlib.suppress(StateError):
                found.append(opened(root, env, entry.name, entry.ssh))
    return found


__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_PERSIST", "DEFAULT_TIMEOUT", "KNOWN_HOSTS",
           "MAC_PURPOSE", "SSH_FAILED", "Contact", "NoAccess", "Ran", "SshHost", "argv_for", "base_argv", "close",
           "control_path", "every", "first_contact", "known_hosts", "load", "opened",
           "require",
           "run", "sealed", "settings", "ssh_program", "timeout"]
