"""Unicode format characters (bidi controls, zero-width characters) never reach what fm shows.

A crew's text reaches the captain through ``fm crew status`` (the log), the watcher's reason
line (relayed by ``fm arm``), the drain's rows and annotations, ``fm crew list`` and ``fm top``;
U+202E alone makes the rest of a line read backwards. One sanitiser
(:func:`firstmate.base.wakeinput.clean`, and the wake text's
:func:`firstmate.base.waketext.sanitise`, which shares its set) removes every character of
Unicode's category Cf on all of them.
"""

from __future__ import annotations

import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from firstmate.base.wakeinput import clean
from firstmate.base.waketext import compose, sanitise
from firstmate.fast.crewreport import status_text
from firstmate.store import crew
from firstmate.store.home import Home
from wakeq_support import child_env, fm

#: Every format character of the running Python's Unicode database.
CF = "".join(chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf")
HOSTILE = "done: \u202eevil\u202c \u2066iso\u2069 zero\u200bwidth\u200d \ufeffbom \u061calm"


def no_format(text: str) -> bool:
    return not any(unicodedata.category(ch) == "Cf" for ch in text)


def test_the_sanitisers_remove_every_format_character() -> None:
    assert CF and no_format(clean(f"a{CF}b")) and clean(f"a{CF}b") == "ab"
    assert sanitise(f"a{CF}b\nc") == "ab\nc"
    assert status_text(f"x {CF} y") == "x  y"
    assert no_format(compose([f"signal: w.status: {HOSTILE}"], None))


def test_ordinary_text_in_any_script_is_kept() -> None:
    for text in ("done: 完了 ✓ ünïcödé", "needs-decision: key=k ¿sí o no?", "مرحبا", "👍🏽"):
        assert clean(text) == text


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home").ensure()
    crew.add(h, "w1", "%1")
    return h


def test_a_crews_report_is_stored_shown_and_relayed_without_them(home: Home) -> None:
    """The crew reports through fm; the watcher closes on it (fm arm relays its reason); the
    drain annotates it; fm crew list and fm top show it: none of them carries a Cf character."""
    env = {"FM_SIGNAL_GRACE": "0", "FM_TMUX_SOCKET": str(home.root / "no-tmux")}
    assert fm(home, "crew", "status", "w1", HOSTILE, **env).returncode == 0
    log = Path(crew.path(home, "w1", crew.STATUS)).read_text(encoding="utf-8")
    assert "evil" in log and no_format(log)
    # A hand-written line (not through fm) holds them raw: every reader still strips them.
    with open(crew.path(home, "w1", crew.STATUS), "a", encoding="utf-8") as fh:
        fh.write(f"needs-decision: key=k {HOSTILE}\n")
    arm = subprocess.run([sys.executable, "-m", "firstmate", "arm"], capture_output=True,
                         text=True, timeout=60, check=False, env=child_env(home, **env))
    assert arm.returncode == 0 and "signal: w1.status: needs-decision: key=k done:" in arm.stdout
    assert no_format(arm.stdout + arm.stderr)
    drained = fm(home, "wake", "drain", **env)
    assert "wake annotation: latest" in drained.stdout and "OPEN DECISIONS" in drained.stdout
    assert "evil" in drained.stdout and no_format(drained.stdout + drained.stderr)
    for args in (["crew", "list"], ["crew", "list", "--json"], ["top", "--once"]):
        shown = fm(home, *args, **env)
        assert shown.returncode == 0, shown.stderr
        assert "w1" in shown.stdout and no_format(shown.stdout), args


def test_a_hand_written_harness_record_is_shown_clean(home: Home) -> None:
    Path(crew.path(home, "w1", crew.HARNESS)).write_text("cla\u202eude\x1b[31m\n")
    shown = fm(home, "crew", "list", FM_TMUX_SOCKET=str(home.root / "no-tmux"))
    assert shown.returncode == 0 and "w1\tcla" in shown.stdout
    assert no_format(shown.stdout) and "\x1b" not in shown.stdout
    assert crew.harness(home, "w1") == "claude"
