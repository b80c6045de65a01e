"""``fm hook``: bounded stdin, lenient payloads, the quick gate, and one plugin's outcome relayed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from firstmate.cli.hook import parse_payload
from firstmate.testing.sites import declare

DEADLINE = 60.0

PACKAGE_INIT = '''
def quick_gate(event, payload, env, home):
    mode = env.get("FAKEH_GATE", "")
    if mode == "raise":
        raise RuntimeError("gate exploded")
    return mode != "false"


def __getattr__(name):
    if name == "plugin":
        from firstmate_plugin_fakeh.impl import plugin
        globals()["plugin"] = plugin
        return plugin
    raise AttributeError(name)
'''

PACKAGE_IMPL = '''
import json, os
if os.environ.get("FAKEH_BROKEN"):
    raise RuntimeError("the plugin body must not be imported on the gated path")
from firstmate import hookimpl
from firstmate.plugin.harness import HookOutcome


class Fake:
    @hookimpl
    def firstmate_hook(self, harness, event, payload, home, env):
        if harness != "fakeh" or event == "none":
            return None
        if event == "boom":
            raise RuntimeError("plugin exploded")
        seen = {"event": event, "payload": payload, "home": str(home.root)}
        return HookOutcome(int(env.get("FAKEH_EXIT", "0")), json.dumps(seen) + "\\n", "a wake\\n")


plugin = Fake()
'''


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    pkg = site / "firstmate_plugin_fakeh"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(PACKAGE_INIT))
    (pkg / "impl.py").write_text(textwrap.dedent(PACKAGE_IMPL))
    declare(site, "fakeh", "firstmate_plugin_fakeh", dist="firstmate-plugin-fakeh",
            version="0.1")  # (found by its entry point alone)
    home = tmp_path / "home"
    (home / "state").mkdir(parents=True)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("FM_", "FAKEH_", "FIRSTMATE_"))}
    base["PYTHONPATH"] = os.pathsep.join([str(site), *(os.path.abspath(part) for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part)])
    base["FM_HOME"] = str(home)
    return base


def hook(env: dict[str, str], *args: str, stdin: bytes = b"", **extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "firstmate", "hook", *args], input=stdin,
                          capture_output=True, env={**env, **extra}, timeout=DEADLINE, check=False)


def seen(done: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert done.stdout, done.stderr
    value: dict[str, Any] = json.loads(done.stdout)
    return value


def test_the_plugins_outcome_is_relayed(env: dict[str, str]) -> None:
    done = hook(env, "fakeh", "stop", stdin=b'{"session_id": "s1"}', FAKEH_EXIT="2")
    assert done.returncode == 2
    assert done.stderr == b"a wake\n"
    assert seen(done) == {"event": "stop", "payload": {"session_id": "s1"}, "home": env["FM_HOME"]}


def test_a_gate_that_says_no_exits_silently_before_loading_anything(env: dict[str, str]) -> None:
    # Modules the interpreter's own start-up imported (site hooks) do not count.
    probe = ("import sys\nbefore = set(sys.modules)\nfrom firstmate.cli.main import main\n"
             "rc = main(['hook', 'fakeh', 'stop'])\n"
             "heavy = sorted(m for m in ('pluggy', 'attrs', 'attr', 'json', 'argparse', 'psutil', "
             "'sqlite3', 'pathlib', 'typing') if m in set(sys.modules) - before)\n"
             "sys.stderr.write(repr((rc, heavy)))\n")
    site = env["PYTHONPATH"].split(os.pathsep)[0]
    os.utime(site, ns=(10**18, 10**18))  # (installed long ago: its entry point is indexed)
    for _ in range(2):  # the first start indexes the entry points; the second reads the index
        done = subprocess.run([sys.executable, "-P", "-c", probe], input=b'{"a": 1}',
                              capture_output=True, timeout=DEADLINE, check=False,
                              env={**env, "FAKEH_GATE": "false", "FAKEH_BROKEN": "1"})
        assert done.returncode == 0 and done.stdout == b""
    assert done.stderr.decode() == "(0, [])"


@pytest.fixture
def split_env(env: dict[str, str]) -> dict[str, str]:
    """The same plugin laid out as the shipped ones are: an empty package ``__init__``, the gate
    in ``gate.py`` and the plugin object in ``hooks.py`` (its entry point names hooks:plugin)."""
    pkg = Path(env["PYTHONPATH"].split(os.pathsep)[0]) / "firstmate_plugin_fakeh"
    gate = textwrap.dedent(PACKAGE_INIT).split("def __getattr__")[0]
    (pkg / "__init__.py").write_text('"""A plugin package with nothing in it."""\n')
    (pkg / "gate.py").write_text(gate)
    (pkg / "hooks.py").write_text("from firstmate_plugin_fakeh.impl import plugin  # noqa: F401\n")
    points = pkg.parent / "firstmate_plugin_fakeh-0.1.dist-info" / "entry_points.txt"
    points.write_text("[firstmate.plugins]\nfakeh = firstmate_plugin_fakeh.hooks:plugin\n")
    return env


def test_an_empty_package_init_finds_the_gate_and_the_plugin_in_their_submodules(
        split_env: dict[str, str]) -> None:
    done = hook(split_env, "fakeh", "stop", stdin=b'{"session_id": "s1"}', FAKEH_EXIT="2")
    assert done.returncode == 2 and seen(done)["payload"] == {"session_id": "s1"}
    gated = hook(split_env, "fakeh", "stop", stdin=b"{}", FAKEH_GATE="false", FAKEH_BROKEN="1")
    assert (gated.returncode, gated.stdout, gated.stderr) == (0, b"", b"")


def test_a_broken_gate_never_decides_alone(env: dict[str, str]) -> None:
    done = hook(env, "fakeh", "stop", stdin=b"{}", FAKEH_GATE="raise")
    assert done.returncode == 0 and seen(done)["payload"] == {}


def test_no_answer_is_a_silent_exit_0(env: dict[str, str]) -> None:
    done = hook(env, "fakeh", "none", stdin=b"{}")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_a_plugin_that_raises_is_one_line_and_exit_1(env: dict[str, str]) -> None:
    done = hook(env, "fakeh", "boom", stdin=b"{}")
    assert done.returncode == 1
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and "plugin exploded" in lines[0] and b"Traceback" not in done.stderr


@pytest.mark.parametrize("stdin", [
    b"", b"   \n", b"{", b'{"a": ', b"\xff\xfe", b"[]", b"null", b"42", b'"text"',
    pytest.param(b"[" * 200_000, id="deeply-nested"), b'{"a": 1} {"b": 2}',
    b'\xef\xbb\xbf{"bom": 1}',
])
def test_anything_but_one_json_object_is_payload_none(env: dict[str, str], stdin: bytes) -> None:
    done = hook(env, "fakeh", "stop", stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert seen(done)["payload"] is None or stdin.startswith(b"\xef\xbb\xbf")


def test_an_oversized_payload_is_none_and_does_not_block(env: dict[str, str]) -> None:
    blob = b'{"pad": "' + b"x" * (3 << 20) + b'"}'
    done = hook(env, "fakeh", "stop", stdin=blob)
    assert done.returncode == 0 and seen(done)["payload"] is None
    just_under = b'{"pad": "' + b"x" * ((1 << 20) - 20) + b'"}'
    assert len(seen(hook(env, "fakeh", "stop", stdin=just_under))["payload"]["pad"]) > 1000


def test_parse_payload_never_raises() -> None:
    assert parse_payload(None) is None
    assert parse_payload(b"[" * 100_000) is None
    assert parse_payload(b'{"k": [1, 2]}') == {"k": [1, 2]}
    assert parse_payload('{"ü": 1}'.encode("utf-16")) == {"ü": 1}


def _spawn_open_stdin(env: dict[str, str], data: bytes, **extra: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "firstmate", "hook", "fakeh", "stop"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**env, **extra})
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()
    return proc


def test_a_harness_that_never_closes_stdin_cannot_wedge_the_hook(env: dict[str, str]) -> None:
    proc = _spawn_open_stdin(env, b'{"partial": ', FM_HOOK_STDIN_TIMEOUT="1")
    try:
        out, err = proc.communicate(timeout=DEADLINE)  # closes stdin only after exit... or now
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out)["payload"] is None


def test_a_whole_object_on_an_open_stdin_is_taken_without_waiting_for_eof(env: dict[str, str]) -> None:
    proc = _spawn_open_stdin(env, b'{"whole": true}\n', FM_HOOK_STDIN_TIMEOUT="600")
    assert proc.stdout is not None
    started = time.monotonic()
    try:
        out = proc.stdout.readline()  # the hook answers while we still hold stdin open
        assert json.loads(out)["payload"] == {"whole": True}
        assert time.monotonic() - started < DEADLINE
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        proc.kill()
        proc.wait(timeout=DEADLINE)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.parametrize("name", ["nosuch", "../etc", "Claude", "a b", ""])
def test_an_unknown_harness_is_exit_5_naming_the_package(env: dict[str, str], name: str) -> None:
    done = hook(env, name, "stop", stdin=b"{}")
    assert done.returncode == 5
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and b"Traceback" not in done.stderr
    if name == "nosuch":
        assert lines[0].endswith("add it with: fm plugin add nosuch")


def test_a_disabled_plugin_is_exit_5_even_when_its_gate_says_no(env: dict[str, str]) -> None:
    done = hook(env, "fakeh", "stop", stdin=b"{}", FAKEH_GATE="false",
                FIRSTMATE_DISABLE_PLUGINS="other, fakeh")
    assert done.returncode == 5 and b"FIRSTMATE_DISABLE_PLUGINS" in done.stderr


@pytest.mark.parametrize("argv", [[], ["fakeh"], ["fakeh", "stop", "extra"], ["fakeh", "stop", "--bogus"],
                                  ["fakeh", "stop", "--home"], ["fakeh", "stop", "--home="]])
def test_bad_usage_is_one_line_and_exit_2(env: dict[str, str], argv: list[str]) -> None:
    done = hook(env, *argv)
    assert done.returncode == 2
    assert len(done.stderr.decode().splitlines()) == 1
    assert done.stderr.startswith(b"fm: hook: ") and done.stderr.endswith(b"; run 'fm hook --help'\n")
    assert done.stdout == b"" and b"Traceback" not in done.stderr


def test_help_is_exit_0(env: dict[str, str]) -> None:
    done = hook(env, "--help")
    assert done.returncode == 0 and done.stdout.startswith(b"usage: fm hook")


def test_home_option_pins_the_home(env: dict[str, str], tmp_path: Path) -> None:
    pinned = tmp_path / "pinned home"
    for argv in (["--home", str(pinned)], [f"--home={pinned}"]):
        done = hook(env, "fakeh", "stop", *argv, stdin=b"{}")
        assert seen(done)["home"] == str(pinned)


def test_the_home_is_resolved_but_never_created(env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "never-made"
    done = hook(env, "fakeh", "stop", stdin=b"{}", FM_HOME=str(missing))
    assert seen(done)["home"] == str(missing)
    assert not missing.exists()
