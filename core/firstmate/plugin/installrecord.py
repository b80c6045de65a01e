"""How each harness was installed into each project: the options ``fm install`` was given.

``fm doctor`` must check an install with the options it was made with (``--home``, harness flags
such as ``--local``, ``--fm-command``) and suggest, when it is stale, exactly the command that
made it — never one that would drop an option or register the hooks a second time. So every
successful ``fm install`` records its options in the home the hooks use
(``config/installs/<harness>.json``: one entry per project and set of harness flags, since one
project may hold two variants, e.g. ``--local`` and not). After ``fm uninstall`` the entries of
that project whose install is gone are dropped. A record that cannot be read is reported by
doctor, never trusted.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from firstmate.plugin.harness import InstallOptions
from firstmate.store.home import Home, atomic_write

FOLDER = "installs"


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
                "flags": dict(self.flags), "at": self.at}


def path(home: Home, harness: str) -> Path:
    return home.config / FOLDER / f"{harness}.json"


def _entry(harness: str, raw: object) -> InstallRecord:
    if not isinstance(raw, dict):
        raise ValueError("an entry is not an object")
    project, home, command = raw.get("project"), raw.get("home"), raw.get("fm_command")
    flags = raw.get("flags", {})
    if not isinstance(project, str) or not isinstance(command, str) or not command.strip():
        raise ValueError("an entry lacks its project or fm_command")
    if home is not None and not isinstance(home, str):
        raise ValueError("an entry's home is not a path")
    if not isinstance(flags, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in flags.items()):
        raise ValueError("an entry's flags are not names and values")
    at = raw.get("at", 0.0)
    return InstallRecord(harness, Path(project), None if home is None else Path(home), command,
                         raw.get("fm_command_given") is True, tuple(sorted(flags.items())),
                         float(at) if isinstance(at, int | float) else 0.0)


Key = tuple[Path, tuple[tuple[str, str], ...]]


def read(home: Home, harness: str) -> dict[Key, InstallRecord]:
    """*harness*'s records by (project, flags). Raises ValueError (with the reason) when
    unreadable."""
    file = path(home, harness)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ValueError(f"cannot read {file}: {exc.strerror}") from exc
    try:
        doc = json.loads(data.decode("utf-8"))
        entries = doc.get("installs") if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise ValueError("no list of installs")
        records = [_entry(harness, raw) for raw in entries]
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file} is not an install record ({exc})") from exc
    return {(record.project, record.flags): record for record in records}


def for_project(home: Home, harness: str, project: Path) -> list[InstallRecord]:
    """The records of *harness* installs into *project*, the newest first (ValueError when
    unreadable)."""
    return sorted((r for (where, _), r in read(home, harness).items() if where == project),
                  key=lambda r: -r.at)


def _write(home: Home, harness: str, records: dict[Key, InstallRecord]) -> None:
    file = path(home, harness)
    if not records:
        file.unlink(missing_ok=True)
        return
    file.parent.mkdir(parents=True, exist_ok=True)
    doc = {"installs": [records[p].to_json() for p in sorted(records)]}
    atomic_write(file, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())


def _current(home: Home, harness: str) -> dict[Key, InstallRecord]:
    try:
        return read(home, harness)
    except ValueError:
        return {}  # a damaged record is replaced by the install that knows the truth


def remember(home: Home, options: InstallOptions, *, fm_command_given: bool) -> InstallRecord:
    """Record a successful install of ``options.harness`` into ``options.project``."""
    record = InstallRecord(options.harness, options.project, options.home, options.fm_command,
                           fm_command_given, tuple(sorted(options.flags.items())), time.time())
    records = _current(home, options.harness)
    records[(record.project, record.flags)] = record
    _write(home, options.harness, records)
    return record


def prune(home: Home, harness: str, project: Path,
          installed: Callable[[InstallRecord], bool]) -> None:
    """After an uninstall: drop the records of *project* whose install is gone
    (``installed(record)`` False: a dry-run uninstall with its options finds nothing of ours)."""
    records = _current(home, harness)
    gone = [key for key, record in records.items() if key[0] == project and not installed(record)]
    for key in gone:
        del records[key]
    if gone or not records:
        _write(home, harness, records)


__all__ = ["FOLDER", "InstallRecord", "for_project", "path", "prune", "read", "remember"]
