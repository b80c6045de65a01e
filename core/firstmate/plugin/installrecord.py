"""How each harness was installed into each project: the options ``fm install`` was given.

``fm doctor`` must check an install with the options it was made with (``--home``, harness flags
such as ``--local``, ``--fm-command``) and suggest, when it is stale, exactly the command that
made it — never one that would drop an option or register the hooks a second time. So every
successful ``fm install`` records its options in the home the hooks use
(``config/installs/<harness>.json``: one entry per project and set of harness flags, since one
project may hold two variants, e.g. ``--local`` and not). After ``fm uninstall`` the entries of
that project whose install is gone are dropped.

A record is trusted state, like a registered check: doctor runs its command and proposes it. So
each entry carries ``mac``, an HMAC-SHA256 of the entry and its harness keyed by the home's
secret, which lives outside the home (:mod:`firstmate.base.keyring`). An entry without a valid
one — copied, cloned or committed with a home, edited by hand, or written by an older fm — is
never used: :func:`load` counts it, doctor reports it once, and the next install that rewrites
the file drops it. A file that cannot be read at all (any content, any file type) is the same:
reported, never trusted, replaced by the next install.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from firstmate.base import keyring
from firstmate.base.errors import StateError
from firstmate.base.safepaths import refuse_symlink
from firstmate.base.trust import untrusted
from firstmate.plugin import filestage
from firstmate.plugin.harness import InstallOptions
from firstmate.store.home import Home

FOLDER = "installs"
#: The largest record file read (a record is a few hundred bytes per project).
READ_LIMIT = 1 << 20
#: What the MAC of an entry covers besides the entry, so that no other authenticated body (a
#: check definition, the host's engine) can pass for an install record.
MAC_PURPOSE = "firstmate-install-record"


@attrs.frozen
class InstallRecord:
    """One project's install of one harness."""

    harness: str
    project: Path
    #: The ``--home`` pinned into the hooks (None: resolved at run time).
    home: Path | None
    #: The command the hooks run (the absolute entry point, or the user's ``--fm-command``).
    fm_command: str
    #: Whether the user chose :attr:`fm_command` (a reinstall keeps it) or fm did.
    fm_command_given: bool
    flags: tuple[tuple[str, str], ...] = ()
    at: float = 0.0
    #: Whether the install registered the firstmate MCP server (``InstallResult.mcp``).
    mcp: bool = False

    def options(self, *, dry_run: bool = False) -> InstallOptions:
        return InstallOptions(harness=self.harness, project=self.project, home=self.home,
                              dry_run=dry_run, fm_command=self.fm_command,
                              flags=dict(self.flags))

    def command(self, verb: str = "install") -> str:
        """The exact command line that made this install (or, with *verb*, removes it)."""
        words = ["fm", verb, self.harness, "--project", str(self.project)]
        if self.home is not None:
            words += ["--home", str(self.home)]
        if self.fm_command_given:
            words += ["--fm-command", self.fm_command]
        for name, value in self.flags:
            words.append(f"--{name}" if value == "true" else f"--{name}={value}")
        return shlex.join(words)

    def to_json(self) -> dict[str, Any]:
        return {"project": str(self.project), "home": None if self.home is None else str(self.home),
                "fm_command": self.fm_command, "fm_command_given": self.fm_command_given,
                "flags": dict(self.flags), "at": self.at, **({"mcp": True} if self.mcp else {})}


def path(home: Home, harness: str) -> Path:
    return home.config / FOLDER / f"{harness}.json"


Key = tuple[Path, tuple[tuple[str, str], ...]]


def _mac_body(harness: str, entry: Mapping[str, Any]) -> dict[str, object]:
    return {"what": MAC_PURPOSE, "harness": harness, "entry": dict(entry)}


def _number(value: object) -> float:
    """A finite float from *value*, else 0.0 (a huge integer, NaN or infinity included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    try:
        number = float(value)
    except OverflowError:
        return 0.0
    return number if math.isfinite(number) else 0.0


def _entry(harness: str, raw: Mapping[str, Any]) -> InstallRecord:
    project, home, command = raw.get("project"), raw.get("home"), raw.get("fm_command")
    flags = raw.get("flags", {})
    if not isinstance(project, str) or not isinstance(command, str) or not command.strip():
        raise ValueError("an entry lacks its project or fm_command")
    if home is not None and not isinstance(home, str):
        raise ValueError("an entry's home is not a path")
    if not isinstance(flags, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in flags.items()):
        raise ValueError("an entry's flags are not names and values")
    return InstallRecord(harness, Path(project), None if home is None else Path(home), command,
                         raw.get("fm_command_given") is True, tuple(sorted(flags.items())),
                         _number(raw.get("at", 0.0)), raw.get("mcp") is True)


@attrs.frozen
class Loaded:
    """What one harness's record file holds for this home: the entries that verify, and what
    did not (never used)."""

    file: Path
    records: dict[Key, InstallRecord] = attrs.field(factory=dict)
    #: Entries that are not this home's (no valid ``mac``).
    rejected: int = 0
    #: Why the whole file is unusable ("" when it is not).
    problem: str = ""

    def for_project(self, project: Path) -> list[InstallRecord]:
        """The records of installs into *project*, the newest first."""
        return sorted((r for (where, _), r in self.records.items() if where == project),
                      key=lambda r: -r.at)

    def complaint(self) -> str:
        """One line on what is ignored ("" when nothing is)."""
        if self.problem:
            return f"{self.file} is not an install record fm can use ({self.problem}), so " \
                "nothing in it is used"
        if self.rejected:
            return (f"{self._entries()} of {self.file} {self._were()} not written by fm install "
                    "for this home (copied, cloned or committed with it, edited by hand, or "
                    "written by an older fm), so nothing in them is used or run")
        return ""

    def dropped(self) -> str:
        """What an install that rewrote the file dropped ("" when nothing)."""
        if self.problem:
            return f"replaced {self.file}, which was not an install record fm can use " \
                f"({self.problem})"
        if self.rejected:
            return (f"dropped {self._entries()} of {self.file} that fm install did not write for "
                    "this home (copied, cloned or committed with it, edited by hand, or written "
                    "by an older fm); nothing in them was used or run")
        return ""

    def _entries(self) -> str:
        return "1 entry" if self.rejected == 1 else f"{self.rejected} entries"

    def _were(self) -> str:
        return "was" if self.rejected == 1 else "were"

    def fix(self, harness: str) -> str:
        """What removes the complaint: the file itself when nothing in it is trusted."""
        if not self.records:
            return f"rm -- {shlex.quote(str(self.file))}"
        return f"rerun an fm install {harness} command you used (it rewrites the file without them)"


def _read_file(file: Path) -> tuple[bytes | None, str]:
    """The file's bytes (None when absent), or why it is not read."""
    try:
        refuse_symlink(file.parent.parent)
        refuse_symlink(file.parent)
        st = os.lstat(file)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, exc.strerror or "cannot inspect it"
    except StateError:
        return None, "a folder above it is a symlink"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        return None, "not a regular file"
    foreign = untrusted(st)
    if foreign is not None:
        return None, foreign
    if st.st_size > READ_LIMIT:
        return None, "too large"
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(READ_LIMIT + 1)
    except OSError as exc:
        return None, exc.strerror or "unreadable"
    return (data, "") if len(data) <= READ_LIMIT else (None, "too large")


def _verified(harness: str, raw: object, key: bytes | None) -> InstallRecord | None:
    if not isinstance(raw, dict):
        return None
    body = {k: v for k, v in raw.items() if k != "mac"}
    try:
        if not keyring.verify_mac(key, _mac_body(harness, body), raw.get("mac")):
            return None
        return _entry(harness, body)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None  # (content no fm writes: never trusted)


def load(home: Home, harness: str, env: Mapping[str, str] | None = None) -> Loaded:
    """*harness*'s records of *home* that verify, by (project, flags). Never raises for the
    file's content: what cannot be used is counted (:attr:`Loaded.rejected`) or named
    (:attr:`Loaded.problem`). Raises :class:`~firstmate.base.errors.StateError` only when your
    keys directory is not safe to read."""
    file = path(home, harness)
    staged, data = filestage.pending(file)
    problem = ""
    if not staged:
        data, problem = _read_file(file)
    if data is None:
        return Loaded(file, problem=problem)
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return Loaded(file, problem="not UTF-8 text")
    except (ValueError, RecursionError):
        return Loaded(file, problem="not JSON")
    entries = doc.get("installs") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return Loaded(file, problem="no list of installs")
    key = keyring.read_key(str(home.root), os.environ if env is None else env)
    records: dict[Key, InstallRecord] = {}
    rejected = 0
    for raw in entries:
        record = _verified(harness, raw, key)
        if record is None:
            rejected += 1
        else:
            records[(record.project, record.flags)] = record
    return Loaded(file, records, rejected)


def _write(home: Home, harness: str, records: dict[Key, InstallRecord], key: bytes) -> None:
    """Replace the file with *records*, each with its MAC (inside a transaction: staged)."""
    file = path(home, harness)
    refuse_symlink(home.config)
    refuse_symlink(file.parent)
    entries = []
    for where in sorted(records):
        body = records[where].to_json()
        entries.append({**body, "mac": keyring.mac(key, _mac_body(harness, body))})
    data = (json.dumps({"installs": entries}, indent=2, sort_keys=True) + "\n").encode()
    try:
        if records:
            filestage.write(file, data, mode=0o600)
        elif filestage.exists(file):
            filestage.remove(file)
    except OSError as exc:
        raise StateError(f"cannot write the install record {file}: {exc.strerror}; free space "
                         "on its filesystem or fix its directory, then rerun (nothing was "
                         "changed)") from exc


def remember(home: Home, options: InstallOptions, *, fm_command_given: bool,
             env: Mapping[str, str] | None = None, mcp: bool = False) -> Loaded:
    """Record a successful install of ``options.harness`` into ``options.project`` (with the
    home's secret, made on first use). Returns what the file held before: what it ignored is
    dropped now."""
    key = keyring.ensure_key(str(home.root), os.environ if env is None else env)
    before = load(home, options.harness, env)
    # Newer than every record already there, even within one millisecond or after the clock
    # went back: "the newest first" orders installs by when they were made.
    latest = max((r.at for r in before.records.values()), default=0.0)
    at = max(round(time.time(), 3), round(latest + 0.001, 3))
    record = InstallRecord(options.harness, options.project, options.home, options.fm_command,
                           fm_command_given, tuple(sorted(options.flags.items())), at, mcp)
    records = dict(before.records)
    records[(record.project, record.flags)] = record
    _write(home, options.harness, records, key)
    return before


def prune(home: Home, harness: str, project: Path,
          installed: Callable[[InstallRecord], bool],
          env: Mapping[str, str] | None = None) -> None:
    """After an uninstall: drop the records of *project* whose install is gone
    (``installed(record)`` False: a dry-run uninstall with its options finds nothing of ours)."""
    before = load(home, harness, env)
    records = dict(before.records)
    gone = [key for key, record in records.items() if key[0] == project and not installed(record)]
    if not gone:
        return
    for key in gone:
        del records[key]
    secret = keyring.read_key(str(home.root), os.environ if env is None else env)
    if secret is not None:  # (verified entries exist, so the secret does)
        _write(home, harness, records, secret)


def mcp_installed(home: Home, harness: str) -> bool:
    """Whether an install of *harness* recorded in *home* registered the firstmate MCP server
    (the wake text then names its tools). False when the records cannot be read."""
    try:
        return any(record.mcp for record in load(home, harness).records.values())
    except StateError:
        return False


__all__ = ["FOLDER", "InstallRecord", "Loaded", "load", "mcp_installed", "path", "prune",
           "remember"]
