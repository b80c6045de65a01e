"""`fm wake …` output contract, through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

import pytest
from firstmate.cli import wake as wake_cli
from firstmate.fast import drainview
from firstmate.store.drain import DrainResult
from firstmate.store.home import Home
from wakeq_support import child_env, claims, finish, fm, live_owner, rows, set_episode

ACK_RE = "WAKE_ACK_REQUIRED: after handling completes run fm wake drain --ack-through {} --recovery-generation {}\n"


def current_generation(home: Home) -> str:
    out = fm(home, "wake", "query", "--json")
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["episode"]).split(":")[2]


def test_append_prints_the_sequence(fm_home: Home) -> None:
    first = fm(fm_home, "wake", "append", "signal", "t1.status", "signal: /h/state/t1.status")
    second = fm(fm_home, "wake", "append", "stale", "w1", "stale: w1")
    assert (first.returncode, first.stdout, first.stderr) == (0, "1\n", "")
    assert (second.returncode, second.stdout) == (0, "2\n")


@pytest.mark.parametrize(("args", "needle"), [
    (["bogus", "k", "p"], "fm: wake append: invalid wake kind 'bogus'"),
    (["signal", "", "p"], "fm: wake append: empty wake key"),
    (["signal", "k"], "fm: wake append: the following arguments are required: PAYLOAD; "
                      "run 'fm wake append --help'"),
    (["signal", "k", "p", "extra"], "fm: wake append: unrecognized arguments: extra; "
                                    "run 'fm wake append --help'"),
])
def test_bad_append_exits_2_with_one_line_and_writes_nothing(fm_home: Home, args: list[str], needle: str) -> None:
    out = fm(fm_home, "wake", "append", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith(needle) and out.stderr.count("\n") == 1
    assert not fm_home.db.exists() or rows(fm_home) == []


def test_drain_prints_rows_on_stdout_and_exactly_the_ack_line_on_stderr(fm_home: Home) -> None:
    fm(fm_home, "wake", "append", "signal", "t1.status", "first")
    fm(fm_home, "wake", "append", "stale", "w1", "stale: w1")
    fm(fm_home, "wake", "append", "signal", "t1.status", "second")
    gen = current_generation(fm_home)
    out = fm(fm_home, "wake", "drain")
    assert out.returncode == 0
    # A section per kind, a header saying what such a row means, one line per row.
    assert out.stdout == (
        "SIGNALS (1 row): a crew reported a status line, ended a turn or closed its pane (or a "
        "script signalled): read each one and act on it.\n"
        "  #3 [t1.status] second\n"
        "STALE PANES (1 row): a crew's screen stopped changing while it did not look busy, so it "
        "may be stuck or waiting for input: look at its screen (fm crew peek NAME), then steer "
        'it (fm crew steer NAME "...") or stop it (fm crew stop NAME).\n'
        "  #2 stale: w1\n")
    assert out.stderr == ACK_RE.format(3, gen)
    acked = fm(fm_home, "wake", "drain", "--ack-through", "3", "--recovery-generation", gen)
    assert (acked.returncode, acked.stdout, acked.stderr) == (
        0, f"WAKE ACKNOWLEDGED through row 3: 3 rows consumed; recovery episode {gen} closed; "
           "nothing else is queued.\n", "")
    assert rows(fm_home) == []
    empty = fm(fm_home, "wake", "drain")
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, drainview.NOTHING + "\n", "")


def test_episode_only_drain_asks_for_ack_through_zero(fm_home: Home) -> None:
    set_episode(fm_home, "pending", "downtime", "seed.1.aaa")  # a watcher went down; no rows
    out = fm(fm_home, "wake", "drain")
    assert out.stdout.startswith("NOTHING QUEUED: the watcher stopped since your last acknowledgement")
    assert out.stdout.count("\n") == 1 and out.stderr == ACK_RE.format(0, "seed.1.aaa")
    acked = fm(fm_home, "wake", "drain", "--ack-through", "0", "--recovery-generation", "seed.1.aaa")
    assert (acked.returncode, acked.stdout, acked.stderr) == (
        0, "WAKE ACKNOWLEDGED: no rows to consume; recovery episode seed.1.aaa closed; nothing "
           "else is queued.\n", "")
    assert current_generation(fm_home) == "seed.1.aaa"
    assert fm(fm_home, "wake", "query", "--json").stdout.count("acked:handling:seed.1.aaa") == 1


def test_ack_beyond_the_presented_rows_exits_2_naming_the_command_and_keeps_every_row(fm_home: Home) -> None:
    fm(fm_home, "wake", "append", "signal", "a", "presented")
    fm(fm_home, "wake", "drain")
    fm(fm_home, "wake", "append", "signal", "b", "appended after the drain")
    gen = current_generation(fm_home)
    out = fm(fm_home, "wake", "drain", "--ack-through", "99", "--recovery-generation", gen)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "fm: wake drain: --ack-through 99 is beyond the last wake row presented to you (1); "
        f"nothing was acknowledged: run fm wake drain --ack-through 1 --recovery-generation {gen} "
        "after handling it\n"
    )
    assert claims(fm_home) == {1: "main", 2: None}
    right = fm(fm_home, "wake", "drain", "--ack-through", "1", "--recovery-generation", gen)
    assert (right.returncode, right.stderr) == (0, "")
    assert claims(fm_home) == {2: None}  # the row nobody saw waits for the next drain


def test_ack_with_a_made_up_generation_consumes_the_rows_and_names_the_remedy(fm_home: Home) -> None:
    # The generation binds only the episode: the handled row goes, the episode stays open, and
    # the notice says how to retire it.
    fm(fm_home, "wake", "append", "signal", "a", "x")
    fm(fm_home, "wake", "drain")
    gen = current_generation(fm_home)
    out = fm(fm_home, "wake", "drain", "--ack-through", "1", "--recovery-generation", "bogus.1")
    assert (out.returncode, out.stdout) == (0, "")
    assert out.stderr == (
        "wake drain: acknowledged wakes through 1 (1 row(s) consumed), but recovery generation "
        f"bogus.1 was never printed by a drain (the current episode is pending:handling:{gen}), "
        "so the episode stays open: re-run fm wake drain and use the WAKE_ACK_REQUIRED command "
        "it prints\n"
    )
    assert claims(fm_home) == {}
    assert current_generation(fm_home) == gen
    again = fm(fm_home, "wake", "drain")
    assert again.returncode == 0 and again.stdout.startswith("NOTHING NEW: ")
    assert again.stderr.endswith(f"--ack-through 0 --recovery-generation {gen}\n")
    done = fm(fm_home, "wake", "drain", "--ack-through", "0", "--recovery-generation", gen)
    assert (done.returncode, done.stderr) == (0, "")
    assert fm(fm_home, "wake", "query", "--json").stdout.count(f'"acked:handling:{gen}"') == 1


def test_drain_json_is_one_object_with_the_same_facts(fm_home: Home) -> None:
    fm(fm_home, "wake", "append", "heartbeat", "heartbeat", "heartbeat")
    fm(fm_home, "wake", "append", "heartbeat", "heartbeat", "heartbeat again")
    gen = current_generation(fm_home)
    out = fm(fm_home, "wake", "drain", "--json")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.count("\n") == 1
    data = json.loads(out.stdout)
    assert data["ack_through"] == 2 and data["generation"] == gen
    assert data["ack_required"] == ACK_RE.format(2, gen).rstrip("\n")
    assert [(r["seq"], r["payload"]) for r in data["rows"]] == [(2, "heartbeat again")]
    assert data["held"] is None and data["skipped"] is None and data["context"] == []


def test_ack_that_acknowledges_nothing_names_the_command(fm_home: Home) -> None:
    fm(fm_home, "wake", "append", "signal", "a", "x")
    gen = current_generation(fm_home)
    fm(fm_home, "wake", "drain")
    out = fm(fm_home, "wake", "drain", "--ack-through", "0", "--recovery-generation", gen)
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr == (
        "wake drain: nothing was acknowledged through 0 (none of your presented wake rows is at or "
        f"below it); the current wake is row 1: run fm wake drain --ack-through 1 "
        f"--recovery-generation {gen} after handling it\n"
    )
    js = fm(fm_home, "wake", "drain", "--ack-through", "1", "--recovery-generation", gen, "--json")
    data = json.loads(js.stdout)
    assert data["consumed"] == 1 and data["retired"] is True and data["moved"] is False


@pytest.mark.parametrize(("args", "needle"), [
    (["--ack-through", "x1", "--recovery-generation", "g"], "invalid acknowledgement sequence"),
    (["--ack-through", "1"], "acknowledgement requires its recovery generation"),
    (["--ack-through", "1", "--recovery-generation", "bad gen"], "invalid recovery generation"),
    (["--recovery-generation", "g"], "needs --ack-through"),
    (["--actor"], "argument --actor: expected one argument"),
    (["--actor", "captain"], "expected main or branch"),
    (["--unknown"], "wake drain: unrecognized arguments: --unknown; run 'fm wake drain --help'"),
])
def test_drain_usage_errors_exit_2_in_one_line(fm_home: Home, args: list[str], needle: str) -> None:
    out = fm(fm_home, "wake", "drain", *args)
    assert out.returncode == 2, out
    assert needle in out.stderr and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_unknown_actor_in_the_environment(fm_home: Home) -> None:
    out = fm(fm_home, "wake", "drain", FM_SUPERVISION_ACTOR="captain")
    assert out.returncode == 2
    assert out.stderr == "fm: unknown FM_SUPERVISION_ACTOR 'captain' (expected main or branch)\n"


def test_grant_verbs_and_the_held_line(fm_home: Home) -> None:
    for key in ("a", "b"):
        fm(fm_home, "wake", "append", "signal", key, key)
    owner = live_owner(fm_home)
    try:
        act = fm(fm_home, "wake", "grant", "activate", str(owner.pid), "br.1.g")
        assert act.returncode == 0, act.stderr
        pub = fm(fm_home, "wake", "grant", "publish", "br.1.g", "1", "2")
        assert pub.returncode == 0, pub.stderr
        held = fm(fm_home, "wake", "drain")
        assert held.stdout == (
            "WAKE ROWS HELD BY SUPERVISION BRANCH: 2 queued row(s) (1,2) are granted to the live "
            "supervision branch, which presents and acknowledges them.\n"
        )
        assert held.stderr == ""
        branch = fm(fm_home, "wake", "drain", FM_SUPERVISION_ACTOR="branch")
        assert branch.stdout == drainview.header("signal", 2) + "\n  #1 a\n  #2 b\n"
        assert branch.stderr.startswith("WAKE_ACK_REQUIRED: after handling completes run fm wake drain --ack-through 2 ")
        rel = fm(fm_home, "wake", "grant", "release", "br.1.g")
        assert rel.returncode == 0
        assert claims(fm_home) == {1: "returned", 2: "returned"}
        main = fm(fm_home, "wake", "drain")
        assert main.stdout.startswith(drainview.header("signal", 2) + "\n  #1 a\n")
        conflict = fm(fm_home, "wake", "grant", "publish", "br.1.g", "1")
        assert conflict.returncode == 3 and "main already claimed" in conflict.stderr
        missing = fm(fm_home, "wake", "grant", "publish", "br.1.g", "99")
        assert missing.returncode == 1
        assert fm(fm_home, "wake", "grant", "withhold").returncode == 0
        deact = fm(fm_home, "wake", "grant", "deactivate", str(owner.pid), "br.1.g")
        assert deact.returncode == 0
    finally:
        finish(owner)


@pytest.mark.parametrize("args", [[], ["bogus"], ["activate", "1"], ["publish", "g"], ["withhold", "x"],
                                  ["release"], ["deactivate", "1"]])
def test_grant_usage_errors(fm_home: Home, args: list[str]) -> None:
    out = fm(fm_home, "wake", "grant", *args)
    assert out.returncode == 2 and out.stderr.startswith("fm: wake grant")
    assert out.stderr.count("\n") == 1 and "--help'" in out.stderr


def test_query_text_and_json(fm_home: Home) -> None:
    fm(fm_home, "wake", "append", "signal", "a", "x")
    text = fm(fm_home, "wake", "query")
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0] == "depth: 1"
    assert lines[1].startswith("oldest: 1\tsignal\ta\tx (age ")
    assert "pending main: 1" in lines and "pending branch: 0" in lines
    assert any(line.startswith("episode: pending:downtime:") for line in lines)
    data = json.loads(fm(fm_home, "wake", "query", "--json").stdout)
    assert data["depth"] == 1 and data["pending"] == {"main": 1, "branch": 0}


def test_unknown_wake_command(fm_home: Home) -> None:
    out = fm(fm_home, "wake", "explode")
    assert out.returncode == 2 and out.stderr.startswith("fm: wake: argument COMMAND: invalid "
                                                         "choice: 'explode'")


def test_drain_context_hooks_print_after_the_rows(fm_home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[DrainResult] = []

    def crew_status(home: Home, result: DrainResult) -> Sequence[str]:
        seen.append(result)
        return ["UNREAD STATUS (test):", "t1 done: ok"]

    def broken(home: Home, result: DrainResult) -> Sequence[str]:
        raise RuntimeError("status log unreadable")

    wake_cli.DRAIN_CONTEXT[:] = [crew_status, broken]
    try:
        assert wake_cli.main(["append", "signal", "a", "x"]) == 0
        capsys.readouterr()
        assert wake_cli.main(["drain"]) == 0
        out, err = capsys.readouterr()
        assert out == drainview.header("signal", 1) + "\n  #1 [a] x\nUNREAD STATUS (test):\nt1 done: ok\n"
        assert err.splitlines()[0].startswith(
            "wake drain: context unavailable (RuntimeError: status log unreadable)")
        assert err.splitlines()[-1].startswith("WAKE_ACK_REQUIRED:")
        assert [r.ack_through for r in seen] == [1]
        assert wake_cli.main(["drain", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["context"] == ["UNREAD STATUS (test):", "t1 done: ok"]
    finally:
        wake_cli.DRAIN_CONTEXT.clear()


def test_append_hot_path_imports_no_psutil_pluggy_or_argparse(fm_home: Home) -> None:
    code = (
        "import sys\n"
        "from firstmate.cli.main import main\n"
        "rc = main(['wake', 'append', 'signal', 'k', 'p'])\n"
        "heavy = [m for m in ('psutil', 'pluggy', 'argparse', 'importlib.metadata') if m in sys.modules]\n"
        "print(rc, ','.join(heavy) or 'none')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=child_env(fm_home), check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "0 none"
