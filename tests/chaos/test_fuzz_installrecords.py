"""Fuzzing install records (``config/installs/<harness>.json``) against ``fm doctor``,
``fm install`` and ``fm uninstall``: any content, in the home ``FM_HOME`` names or in a cloned
repository's ``.firstmate/``. Whatever it holds: no traceback, no internal error, a documented
exit status, one line on failure, and never a command from it run. Entries signed with the
home's real secret (what a buggy fm could write) are read without a crash too."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaos_support import DEADLINE, fm_argv, one_line_error
from firstmate.base import keyring
from firstmate.plugin import installrecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = max(5, settings.default.max_examples // 2)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(300, 20 * settings.default.max_examples))]

#: Exit statuses docs/cli.md documents: fm doctor, and fm install / uninstall.
DOCTOR_EXITS = {0, 1}
INSTALL_EXITS = {0, 1, 4}


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("records")


def hostile(sentinel: Path) -> st.SearchStrategy[str]:
    touch = f"touch {sentinel}"
    return st.sampled_from([
        f"{touch}; echo fm", f"sh -c {shlex.quote(touch + '; echo fm')}", f"/usr/bin/env {touch}",
        f"$({touch})", f"`{touch}`", f"fm --x; {touch}", f"{touch} #", f"env X=1 {touch}",
    ])


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(10**300, 10**400), st.floats(),
    st.text(max_size=40), st.sampled_from(["", "/", "\0", "\u202e", "../..", "-rf"]),
)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)


def entries(project: Path, sentinel: Path) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"project": st.one_of(st.just(str(project)), SCALARS),
         "fm_command": st.one_of(hostile(sentinel), SCALARS)},
        optional={"home": st.one_of(st.none(), st.text(max_size=20), JSON),
                  "fm_command_given": st.one_of(st.booleans(), JSON),
                  "flags": st.one_of(st.dictionaries(st.text(max_size=8), st.text(max_size=8),
                                                     max_size=3), JSON),
                  "at": st.one_of(SCALARS, JSON),
                  "mac": st.one_of(st.text("0123456789abcdef", min_size=64, max_size=64),
                                   SCALARS)})


def documents(project: Path, sentinel: Path) -> st.SearchStrategy[bytes]:
    structured = st.fixed_dictionaries(
        {"installs": st.one_of(st.lists(entries(project, sentinel), max_size=4), JSON)}
    ).map(lambda doc: json.dumps(doc).encode())
    return st.one_of(
        structured, structured, JSON.map(lambda doc: json.dumps(doc).encode()),
        st.binary(max_size=200),
        st.integers(1, 60_000).map(lambda n: b'{"installs": ' + b"[" * n + b"]" * n + b"}"),
    )


SAFE_COMMANDS = st.sampled_from(["fm", "'unbalanced", " ", "A=1", "exec", "/nonexistent/fm",
                                 "fm\0x", "\u202efm", "-P"])


def signed(home: Path, env: dict[str, str], project: Path) -> st.SearchStrategy[bytes]:
    """Documents whose entries verify under the home's own secret, with odd but harmless
    values (never a command that could act: a signed entry is the user's own)."""
    raw = st.fixed_dictionaries(
        {"project": st.one_of(st.just(str(project)), st.text(max_size=10)),
         "fm_command": SAFE_COMMANDS},
        optional={"home": st.one_of(st.none(), st.text(max_size=20), SCALARS),
                  "fm_command_given": JSON,
                  "flags": st.one_of(st.dictionaries(st.sampled_from(["local", "x", ""]),
                                                     st.text(max_size=8), max_size=2), JSON),
                  "at": st.one_of(SCALARS, JSON)})

    def sign(items: list[dict[str, Any]]) -> bytes:
        key = keyring.ensure_key(str(home), env)
        out = [{**body, "mac": keyring.mac(key, {"what": installrecord.MAC_PURPOSE,
                                                 "harness": "claude", "entry": body})}
               for body in items]
        return json.dumps({"installs": out}).encode()

    return st.lists(raw, max_size=3).map(sign)


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(fm_argv(*args), capture_output=True, env=env, cwd=cwd,
                          timeout=DEADLINE, check=False)


def rig(place: Path, discovered: bool) -> tuple[dict[str, str], Path, Path, Path]:
    """A project and its record file: in FM_HOME, or in the project's own committed home."""
    project = place / ("clone" if discovered else "project")
    home = project / ".firstmate" if discovered else place / "home"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FM_", "CLAUDE_", "XDG_"))
           and (not k.startswith("FIRSTMATE_") or k == "FIRSTMATE_KEYS_DIR")}
    env.update(HOME=str(place / "user"), CLAUDE_CONFIG_DIR=str(place / "claude-config"),
               FIRSTMATE_PLUGINS="claude")
    if not discovered:
        env["FM_HOME"] = str(home)
    for directory in (project, place / "user", home / "config" / "installs"):
        directory.mkdir(parents=True, exist_ok=True)
    return env, project, home, home / "config" / "installs" / "claude.json"


def check(done: subprocess.CompletedProcess[bytes], codes: set[int], sentinel: Path) -> None:
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "internal error" not in err, err
    assert done.returncode in codes, (done.returncode, err)
    assert not sentinel.exists(), "a command from an install record ran"
    if done.returncode and codes is INSTALL_EXITS:  # (doctor's failures are its report)
        one_line_error(done)


def exercise(env: dict[str, str], project: Path, sentinel: Path) -> None:
    doctor = fm(env, project, "doctor", "--json")
    check(doctor, DOCTOR_EXITS, sentinel)
    for finding in json.loads(doctor.stdout)["findings"]:
        assert str(sentinel) not in finding["fix"], finding  # never proposed either
    check(fm(env, project, "uninstall", "claude"), INSTALL_EXITS, sentinel)
    check(fm(env, project, "install", "claude"), INSTALL_EXITS, sentinel)
    check(fm(env, project, "doctor"), DOCTOR_EXITS, sentinel)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow,
                                                        HealthCheck.function_scoped_fixture],
          deadline=None)
@given(data=st.data(), discovered=st.booleans())
def test_any_install_record_is_read_without_a_crash_and_never_run(
        place: Path, data: st.DataObject, discovered: bool) -> None:
    env, project, _home, file = rig(place, discovered)
    sentinel = place / "PWNED"
    file.write_bytes(data.draw(documents(project, sentinel)))
    exercise(env, project, sentinel)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow,
                                                        HealthCheck.function_scoped_fixture],
          deadline=None)
@given(data=st.data())
def test_an_authentic_record_with_odd_values_is_read_without_a_crash(
        place: Path, data: st.DataObject) -> None:
    env, project, home, file = rig(place, discovered=False)
    sentinel = place / "PWNED"
    file.write_bytes(data.draw(signed(home, env, project)))
    exercise(env, project, sentinel)
