"""Fuzzing ``fm wake …`` and ``fm arm …``: arguments, wake text and hand-written rows.

Whatever the input, ``fm`` never prints a traceback or an internal error, always exits with a
status docs/cli.md documents, reports a failure in one line, and a drained row never carries a
control sequence: no ESC, no C0 control but the TABs separating its four fields, no C1 control,
no line or paragraph separator — on stdout as text and inside ``--json`` values alike.

Most examples run ``firstmate.cli.main.main`` in this process (fast); the ones that need real
process boundaries (bytes that are not UTF-8 in argv, a real arm cycle) spawn ``fm``. Example
counts follow the hypothesis profile (``HYPOTHESIS_PROFILE``: ``ci`` keeps them modest,
``deep`` runs thousands); process-spawning tests use a quarter of it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import subprocess
from collections.abc import Iterator

import pytest
from chaos_support import DEADLINE, base_env, fm_argv, run_fm, stop_watcher
from firstmate.base.errors import HelpShown, UsageError
from firstmate.cli.main import main as fm_main
from firstmate.cli.main import wants_help
from firstmate.continuity import armargs, watchchild
from firstmate.store import drain, queue
from firstmate.store.database import open_store
from firstmate.store.home import Home
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

WAKE_CODES = {0, 1, 2, 3, 4}
ARM_CODES = {0, 1, 2, 3, 4, 129, 130, 143}
#: Process-spawning tests run a quarter of the profile's examples (at least 5).
SPAWN_EXAMPLES = max(5, settings.default.max_examples // 4)
# A deep profile outlasts the suite-wide 300 s timeout; a process-spawning example takes ~1 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(300, 4 * settings.default.max_examples))]
#: Any control character but TAB, and the Unicode line/paragraph separators.
FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
FORBIDDEN_BYTES = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")

# --- strategies ----------------------------------------------------------------------------

#: Terminal escape sequences and other hostile fragments.
ESCAPES = st.sampled_from([
    "\x1b[31m", "\x1b[0m", "\x1b[2J", "\x1b[1;1H", "\x1b]0;pwned\x07", "\x1b]8;;http://x\x1b\\",
    "\x1bP+q\x1b\\", "\x1b_apc\x1b\\", "\x1b^pm\x1b\\", "\x1bX", "\x1b(B", "\x1b", "\x9b31m",
    "\x9d0;t\x9c", "\x07", "\x08", "\x00", "\r", "\n", "\t", "\v", "\f", "\x85", "\u2028",
    "\u2029", "\x7f", "\ud800", "\udcff", "\ufeff", "\u202e",
])
TEXT = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(ESCAPES, st.text(max_size=8)), max_size=12).map("".join),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "\x1b[", "\t", "€"]),
              st.integers(0, 9000)),
)
NUMBERS = st.one_of(
    st.integers(-5, 10**30).map(str), st.sampled_from(["", " 1", "1 ", "٣", "0x10", "1e3",
                                                       "08", "00", "-0", "+1", "1.5"]),
)
GENERATIONS = st.one_of(st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True), TEXT)
WAKE_TOKENS = st.one_of(
    st.sampled_from(["append", "drain", "grant", "query", "--json", "--actor", "main", "branch",
                     "--ack-through", "--recovery-generation", "--actor=main",
                     "--actor=branch", "--ack-through=0", "signal", "stale", "check",
                     "heartbeat", "activate", "publish", "withhold", "release", "deactivate",
                     "-h", "--help", "--", "-"]),
    TEXT, NUMBERS, GENERATIONS,
)


def wake_argv() -> st.SearchStrategy[list[str]]:
    appends = st.tuples(st.sampled_from(["signal", "stale", "check", "heartbeat"]), TEXT,
                        TEXT).map(lambda t: ["append", *t])
    acks = st.tuples(NUMBERS, GENERATIONS, st.sampled_from([[], ["--json"], ["--actor", "main"]])
                     ).map(lambda t: ["drain", "--ack-through", t[0], "--recovery-generation",
                                      t[1], *t[2]])
    free = st.lists(WAKE_TOKENS, max_size=7)
    return st.one_of(appends, acks, free, st.lists(WAKE_TOKENS, max_size=3).map(
        lambda rest: ["drain", *rest]))


ARM_TOKENS = st.one_of(
    st.sampled_from(["--restart", "--stop", "--take-over", "--handling-delivered",
                     "--watcher-pid", "--arm", "-h", "--help", "--json", "arm"]),
    NUMBERS, GENERATIONS, TEXT,
)

def arm_mode(args: list[str]) -> armargs.Mode:
    """The mode ``fm arm ARGS`` runs: its command line (firstmate.cli.arm), then the values
    armargs checks. UsageError for a refusal, HelpShown for a help request."""
    from firstmate.cli.arm import canonical

    with contextlib.redirect_stdout(io.StringIO()):
        return armargs.parse_args(canonical(args))


# --- running fm in this process ------------------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    made = Home(tmp_path_factory.mktemp("fuzz") / "home").ensure()
    try:
        yield made
    finally:
        with contextlib.suppress(Exception):
            stop_watcher(made)


@contextlib.contextmanager
def fm_env(home: Home) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(base_env(home.root))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_inline(home: Home, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with fm_env(home), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = fm_main(argv)
        except SystemExit as exc:  # pragma: no cover - main returns, it never exits
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def check_output(rc: int, out: str, err: str, codes: set[int]) -> None:
    assert "Traceback" not in out + err, (rc, out, err)
    assert "internal error" not in err, err
    assert rc in codes, (rc, out, err)
    # What the real process writes to a strict UTF-8 stdout must encode.
    out.encode("utf-8")
    if rc not in (0,) and err.startswith("fm: "):
        assert err.count("\n") == 1, f"a refusal is one line: {err!r}"


def check_row_line(line: str) -> None:
    """A row's fields as ``fm wake query`` shows them: four, TAB-separated, each clean."""
    assert line.count("\t") == 3, repr(line)
    assert not FORBIDDEN.search(line), repr(line)


def check_drain_text(out: str) -> None:
    """Every stdout line of a drain (rows and advisories) is free of control sequences, and
    holds no TAB (a row is ``  #<seq> …``, one line)."""
    for line in out.splitlines():
        assert not FORBIDDEN.search(line) and "\t" not in line, repr(line)


def check_drain_json(text: str) -> None:
    result = json.loads(text)
    for row in result["rows"]:
        for field in ("kind", "key", "payload"):
            assert not FORBIDDEN.search(row[field].replace("\t", "")), row
            assert "\t" not in row[field], row
    for line in [*result["notices"], *result["context"], result.get("held") or "",
                 result.get("skipped") or ""]:
        assert not FORBIDDEN.search(str(line).replace("\t", " ")), line


# --- fm wake … ----------------------------------------------------------------------------


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(argv=wake_argv())
# Numbers beyond SQLite's 64-bit INTEGER are bad input, not an overflow inside the store.
@example(argv=["drain", "--ack-through", str(2**63), "--recovery-generation", "0"])
@example(argv=["grant", "publish", "x", str(2**64)])
def test_fm_wake_arguments_never_crash(home: Home, argv: list[str]) -> None:
    rc, out, err = run_inline(home, ["wake", *argv])
    check_output(rc, out, err, WAKE_CODES)
    if wants_help(argv):  # the help, or an unknown subcommand refused (exit 2)
        assert out.startswith("usage: fm wake") if rc == 0 else rc == 2, (rc, out, err)
    elif argv[:1] == ["append"] and rc == 0:
        assert out.strip().isdigit(), out
    acking = any(a.startswith(("--ack-through", "--recovery-generation")) for a in argv)
    if argv[:1] == ["drain"] and rc == 0 and not acking:
        if "--json" in argv:
            for line in out.splitlines():
                check_drain_json(line)
        else:
            check_drain_text(out)
    # Drain and acknowledge everything, so every example starts from an empty queue.
    rc, out, err = run_inline(home, ["wake", "drain"])
    check_output(rc, out, err, WAKE_CODES)
    check_drain_text(out)
    acknowledge_all(home)


def acknowledge_all(home: Home) -> None:
    rc, out, err = run_inline(home, ["wake", "drain", "--json"])
    check_output(rc, out, err, WAKE_CODES)
    data = json.loads(out)
    if data["ack_through"] is not None:
        rc, out, err = run_inline(home, ["wake", "drain", "--ack-through", str(data["ack_through"]),
                                         "--recovery-generation", data["generation"]])
        check_output(rc, out, err, WAKE_CODES)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(kind=st.sampled_from(queue.KINDS), key=TEXT, payload=TEXT)
def test_wake_text_is_drained_without_control_sequences(home: Home, kind: str, key: str,
                                                        payload: str) -> None:
    """Through the Python API (which can carry NUL and lone surrogates) and both drain forms."""
    db = open_store(home)
    try:
        try:
            seq = queue.append(db, kind, key, payload)
        except UsageError:
            assert not queue.clean(key).strip()  # only an empty key is refused
            return
        result = drain.drain(db, "main", env={})
        shown = [row for row in result.rows if row.seq == seq]
        assert len(shown) == 1 or kind == "heartbeat"
        for row in result.rows:
            check_row_line(row.line())
            data = row.to_json()
            assert not FORBIDDEN.search(f"{data['key']}{data['payload']}"), data
            assert len(row.payload) <= queue.PAYLOAD_MAX and len(row.key) <= queue.KEY_MAX
        assert result.generation is not None and result.ack_through is not None
        drain.acknowledge(db, "main", result.ack_through, result.generation, env={})
    finally:
        db.close()
    rc, out, err = run_inline(home, ["wake", "query", "--json"])
    check_output(rc, out, err, WAKE_CODES)
    assert json.loads(out)["depth"] == 0


RAW_VALUES = st.one_of(
    st.none(), st.integers(-3, 3), st.floats(allow_nan=True), st.binary(max_size=30),
    st.text(max_size=30), st.sampled_from([b"\xff\xfe", b"\x1b[2J", "\x1b]0;t\x07", "\x9b1m",
                                           "signal", "check", "", " "]),
)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(rows=st.lists(st.tuples(RAW_VALUES, RAW_VALUES, RAW_VALUES, RAW_VALUES), min_size=1,
                     max_size=5),
       as_json=st.booleans())
def test_hand_written_rows_are_presented_clean_or_retired(
        home: Home, rows: list[tuple[object, object, object, object]], as_json: bool) -> None:
    """Rows written by hand or by older code (any type, any bytes) never crash a drain and
    never put a control sequence on the terminal."""
    open_store(home).close()
    with contextlib.closing(sqlite3.connect(str(home.db), timeout=30)) as conn:
        top = conn.execute("SELECT coalesce(max(seq), 0) FROM wakes").fetchone()[0]
        for offset, (at, kind, key, payload) in enumerate(rows, start=1):
            kind_sql = "CAST(? AS TEXT)" if isinstance(kind, bytes) else "?"
            conn.execute(f"INSERT INTO wakes (seq, at, kind, key, payload) VALUES "
                         f"(?, ?, {kind_sql}, CAST(? AS TEXT), ?)",
                         (int(top) + offset, at, kind, key, payload))
        conn.commit()
    rc, out, err = run_inline(home, ["wake", "drain", *(["--json"] if as_json else [])])
    check_output(rc, out, err, WAKE_CODES)
    assert rc == 0, err
    if as_json:
        check_drain_json(out)
    else:
        check_drain_text(out)
        for line in err.splitlines():
            assert not FORBIDDEN.search(line.replace("\t", " ")), repr(line)
    rc, out, err = run_inline(home, ["wake", "query", "--json"])
    check_output(rc, out, err, WAKE_CODES)
    status = json.loads(out)
    assert status["unusable"] == 0  # the main drain retired every unusable row
    acknowledge_all(home)


# --- real processes: bytes argv and arm cycles ---------------------------------------------

BYTES = st.one_of(
    st.binary(min_size=1, max_size=60).filter(lambda b: b"\0" not in b),
    st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x1b[31mred\x1b[0m",
                     b"\x9b2J", b"\xc2\x9b2J", b"a\tb\nc\rd", b"\xe2\x80\xa8", b"-", b"--json"]),
    st.builds(lambda b, n: b * n, st.sampled_from([b"x", b"\xff", b"\x1b["]),
              st.integers(1000, 20000)),
)


@settings(max_examples=SPAWN_EXAMPLES, suppress_health_check=[HealthCheck.too_slow],
          deadline=None)
@given(kind=st.one_of(st.sampled_from([b"signal", b"check"]), BYTES), key=BYTES, payload=BYTES)
def test_bytes_argv_that_is_not_utf8_never_crashes_append_or_drain(
        home: Home, kind: bytes, key: bytes, payload: bytes) -> None:
    env = base_env(home.root)
    done = run_fm(env, b"wake", b"append", kind, key, payload)
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "internal error" not in err, err
    assert done.returncode in (0, 2), (done.returncode, err)
    if done.returncode == 2:
        assert err.count("\n") == 1 and err.startswith("fm: "), err
    for args in ([b"wake", b"drain"], [b"wake", b"drain", b"--json"]):
        drained = run_fm(env, *args)
        err = drained.stderr.decode("utf-8", "replace")
        assert drained.returncode == 0 and "Traceback" not in err, err
        drained.stdout.decode("utf-8")  # valid UTF-8, strictly
        assert not FORBIDDEN_BYTES.search(drained.stdout.replace(b"\n", b" ")), drained.stdout[:300]
        if args[-1] != b"--json":
            check_drain_text(drained.stdout.decode())
        if args[-1] == b"--json":
            check_drain_json(drained.stdout.decode())
    data = json.loads(run_fm(env, "wake", "drain", "--json").stdout)
    if data["ack_through"] is not None:
        acked = run_fm(env, "wake", "drain", "--ack-through", str(data["ack_through"]),
                       "--recovery-generation", data["generation"])
        assert acked.returncode == 0, acked.stderr


@settings(max_examples=SPAWN_EXAMPLES, suppress_health_check=[HealthCheck.too_slow],
          deadline=None)
@given(args=st.lists(st.one_of(ARM_TOKENS.map(lambda s: s.encode("utf-8", "surrogatepass")),
                               BYTES).map(lambda b: b.replace(b"\0", b"")),  # argv has no NUL
                     max_size=4))
def test_fm_arm_bytes_arguments(home: Home, args: list[bytes]) -> None:
    """Garbage (including bytes that are not UTF-8) is one usage line and exit 2."""
    try:
        arm_mode([os.fsdecode(a) for a in args])
    except (UsageError, HelpShown):
        pass
    else:
        assume(False)  # a well-formed mode: exercised by the next test
    done = run_fm(base_env(home.root), b"arm", *args)
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in out + err and "internal error" not in err, out + err
    if wants_help([os.fsdecode(a) for a in args]):
        assert done.returncode == 0 and out.startswith("usage: fm arm"), out
        return
    assert done.returncode == 2, (done.returncode, out, err)
    assert out == "" and err.count("\n") == 1 and err.startswith("fm: "), (out, err)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(args=st.lists(ARM_TOKENS, max_size=5))
def test_fm_arm_arguments_parse_or_refuse_in_one_line(home: Home, args: list[str]) -> None:
    """In-process: every argv either parses to a mode or is a one-line usage error (exit 2)."""
    try:
        mode = arm_mode(args)
    except (UsageError, HelpShown) as exc:
        assert isinstance(exc, HelpShown) or "\n" not in exc.message
        rc, out, err = run_inline(home, ["arm", *args])
        check_output(rc, out, err, ARM_CODES)
        if wants_help(args):
            assert rc == 0 and out.startswith("usage: fm arm"), out
        else:
            assert rc == 2 and out == "" and err.count("\n") == 1, (rc, out, err)
        return
    assert mode.name in ("arm", "restart", "stop", "take-over", "handling-delivered")


ARM_MODES = st.one_of(
    st.just([]), st.just(["--arm"]), st.just(["--restart"]), st.just(["--stop"]),
    st.just(["--take-over"]),
    st.integers(2, 4 * 10**6).map(lambda p: ["--take-over", str(p)]),
    st.tuples(GENERATIONS, st.integers(2, 4 * 10**6)).map(
        lambda t: ["--handling-delivered", t[0], "--watcher-pid", str(t[1])]),
)


@settings(max_examples=SPAWN_EXAMPLES, suppress_health_check=[HealthCheck.too_slow],
          deadline=None)
@given(args=ARM_MODES, payload=TEXT)
def test_every_arm_mode_ends_with_a_reason_or_a_failed_line(home: Home, args: list[str],
                                                            payload: str) -> None:
    """Well-formed modes run for real against a queued wake (so a cycle closes at once): exit 0
    only with a reason line (or --stop / --handling-delivered's own line), otherwise exactly
    one ``watcher: FAILED`` line or a usage line, and never a traceback."""
    try:
        arm_mode(args)
    except UsageError:
        assume(False)
    env = base_env(home.root, FM_ARM_CONFIRM_TIMEOUT="20")
    queued = run_fm(env, "wake", "append", "signal", "fuzz",  # argv cannot carry NUL
                    ("signal: " + payload.replace("\0", "")).encode("utf-8", "surrogatepass"))
    assert queued.returncode in (0, 2), queued.stderr
    proc = subprocess.run(fm_argv("arm", *args), capture_output=True, env=env,
                          timeout=DEADLINE, check=False)
    out = proc.stdout.decode("utf-8")
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in out + err and "internal error" not in err, out + err
    assert proc.returncode in ARM_CODES, (proc.returncode, out, err)
    lines = [line for line in out.splitlines() if line.strip()]
    for line in lines:
        assert not FORBIDDEN.search(line), repr(line)
    if proc.returncode == 0:
        last = lines[-1] if lines else ""
        if args[:1] == ["--stop"]:
            assert last.startswith(("watcher: stopped pid=", "watcher: none running")), out
        elif args[:1] == ["--handling-delivered"]:
            assert last.startswith("watcher: handling delivered"), out
        else:
            assert watchchild.REASON_RE.match(last), out
            assert sum(1 for line in lines if watchchild.REASON_RE.match(line)) == 1, out
    elif proc.returncode == 2:
        assert err.count("\n") == 1, err
    else:
        assert sum(1 for line in lines if line.startswith("watcher: FAILED - ")) == 1, out
    stop_watcher(home)
    acknowledge_all(home)

