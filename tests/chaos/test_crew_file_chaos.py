"""Oversized and undecodable crew files against every process that reads them.

A crew's status log and turn-end marker are plain files anything may write: a reporter that
loses its newlines, ``cat`` of a binary, a hook that writes ``-inf``. Against each, with real
processes: ``fm crew list`` (and ``--json``), ``fm top --once`` and ``fm wake drain`` on both
paths exit 0 with no traceback and show no control character; every ``fm arm`` closes with a
reason line; and the crew's next real report (``fm crew status … "done: …"``) still reaches the
primary within a few cycles. (The in-process counterpart over every crew file is
tests/core/test_crew_files_fuzz.py; the pane-state cache has its own suite.)
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from chaos_support import DEADLINE, base_env, fm_argv, run_fm
from firstmate.store.home import Home

pytestmark = pytest.mark.slow

SEED = 20240617
REPORT = "done: after the junk"


def _shown_clean(text: str) -> bool:
    return not any(unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\t\n" for ch in text)


def _noise(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _hostile(seed: int) -> bytes:
    """Lines of undecodable bytes, escapes, NUL, CR, bidi and zero-width characters."""
    rng = random.Random(seed)
    pieces = [b"\xff\xfe", b"\x00", b"\x1b[2J", b"\x1b]0;t\x07", b"\r", b"\x85",
              "\u202e\u2066\u200b\ufeff".encode(), b"done: ", b"needs-decision: key=z ",
              b"answered: key=z ", b"\t", b"9" * 30, b"\xc2\xb2", b"-inf", b"nan"]
    return b"".join(b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) + b"\n"
                    for _ in range(200))


#: (file suffix, bytes written, write mode): what a broken writer leaves.
CASES: dict[str, tuple[str, Callable[[], bytes], str]] = {
    "status: one line of 2 MiB": (".status", lambda: b"done: " + b"x" * (2 << 20) + b"\n", "ab"),
    "status: 3 MiB of a binary": (".status", lambda: _noise(3 << 20, SEED), "ab"),
    "status: 2 MiB with no newline yet": (".status", lambda: b"y" * (2 << 20), "ab"),
    "status: hostile lines": (".status", lambda: _hostile(SEED), "ab"),
    "turn-ended: minus infinity": (".turn-ended", lambda: b"-inf\n", "wb"),
    "turn-ended: 2 MiB of a binary": (".turn-ended", lambda: _noise(2 << 20, SEED + 1), "wb"),
    "turn-ended: hostile lines": (".turn-ended", lambda: _hostile(SEED + 2), "ab"),
}


def _rig(tmp: Path) -> tuple[Home, dict[str, str]]:
    root = tmp / "home"
    home = Home(root).ensure()
    env = base_env(root)
    for name, pane in (("c", "%1"), ("d", "%2")):
        assert run_fm(env, "crew", "add", name, "--pane", pane).returncode == 0
    assert run_fm(env, "crew", "status", "c", "working: first").returncode == 0
    assert run_fm(env, "crew", "status", "d", "needs-decision: key=q yes or no").returncode == 0
    assert _arm(env) == "signal: d.status: needs-decision: key=q yes or no (with c)"
    _handle(env)
    # A delivered turn-end wake: fm top looks its stamp up in the marker from now on.
    assert run_fm(env, "crew", "turn-ended", "c").returncode == 0
    assert _arm(env) == "signal: c.turn-ended"
    _handle(env)
    return home, env


def _arm(env: dict[str, str]) -> str:
    """One real ``fm arm`` cycle: its reason line (it must close with one, exit 0)."""
    done = subprocess.run(fm_argv("arm"), capture_output=True, env=env, timeout=DEADLINE,
                          check=False, stdin=subprocess.DEVNULL)
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0, (out, err)
    assert "Traceback" not in err and "internal error" not in err, err
    assert _shown_clean(out), out
    lines = out.splitlines()
    assert lines[0].startswith("watcher: started") and len(lines) == 2, lines
    return lines[1]


def _handle(env: dict[str, str]) -> str:
    """The primary's turn: drain (clean output), then the acknowledgement it printed; what the
    drain showed."""
    done = run_fm(env, "wake", "drain")
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0 and "Traceback" not in err, err
    assert _shown_clean(out)
    found = re.search(r"run fm wake drain (--ack-through .*)$", err, re.M)
    if found is not None:
        acked = run_fm(env, "wake", "drain", *found.group(1).split())
        assert acked.returncode == 0, acked.stderr
    return out


def _looks_fine(env: dict[str, str], *args: str) -> str:
    done = run_fm(env, *args)
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0, (args, err)
    assert "Traceback" not in err and "internal error" not in err, (args, err)
    assert _shown_clean(out), (args, out[:2000])
    return out


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_broken_crew_file_blinds_nothing(tmp_path: Path, case: str) -> None:
    suffix, make, mode = CASES[case]
    home, env = _rig(tmp_path)
    target = home.crew_dir / f"c{suffix}"
    with open(target, mode) as fh:
        fh.write(make())
    # The views, each on the junk as it is.
    listed = _looks_fine(env, "crew", "list")
    assert listed.startswith("c\t") and "\nd\t" in listed
    data = json.loads(_looks_fine(env, "crew", "list", "--json"))
    assert [c["name"] for c in data["crews"]] == ["c", "d"]
    assert "c " in _looks_fine(env, "top", "--once")
    # Both drain paths, each on its own copy of the home.
    for args in (["wake", "drain"], ["wake", "drain", "--json"]):
        copy = tmp_path / f"copy-{len(args)}"
        shutil.copytree(home.root, copy, symlinks=True)
        _looks_fine(base_env(copy), *args)
    # The watcher: every cycle closes with a reason, and the crew's next real report reaches
    # the primary: as a wake, or in the drain of a wake its junk caused (a 3 MiB log is read
    # 1 MiB a poll: a few cycles of junk may come first; what a drain showed wakes no one again).
    # Between cycles the primary drains and acknowledges, as it does.
    assert run_fm(env, "crew", "status", "c", REPORT).returncode == 0
    reasons: list[str] = []
    shown = ""
    while len(reasons) < 6:
        reasons.append(_arm(env))
        shown = _handle(env)
        if reasons[-1] == f"signal: c.status: {REPORT}" or REPORT in shown:
            break
    assert reasons[-1] == f"signal: c.status: {REPORT}" or REPORT in shown, reasons
    # And after all that, fm top still shows the fleet and the wakes delivered.
    assert "last wakes" in _looks_fine(env, "top", "--once")
