"""The crew-log rules judged by hand (firstmate.fast.crewlog, firstmate.fast.captain) give the
answers of the regular expressions that define them, on any text."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from firstmate.base import wakeinput
from firstmate.fast import captain, crewlog
from hypothesis import given
from hypothesis import strategies as st

LINE = re.compile(crewlog.LINE_RE, re.DOTALL)
VERB = re.compile(crewlog.VERB_RE)
DECISION = re.compile(crewlog.DECISION_RE, re.IGNORECASE | re.DOTALL)
ANSWER = re.compile(crewlog.ANSWER_RE, re.IGNORECASE | re.DOTALL)
DEFAULT = re.compile(captain.DEFAULT_CAPTAIN_RE, re.IGNORECASE)

#: Pieces the rules look for, the characters IGNORECASE folds, other scripts' digits and spaces.
PIECES = ["needs-decision:", "NEEDS-Decision:", "answered:", "ANSWERED:", "key=", "KEY=", "[key=",
          "[Key=", "]", "[", ":", "=", "\t", ".", "-", "_", " ", "  ", "\n", "\r", "\x0b", "\x1c",
          "\x85", "\u00a0", "\u2028", "\u3000", "k", "K", "s", "i", "x1", "a.b", "9" * 13,
          "1700000000", "1700000000.5", "0.123456789", "1.1234567890", "\u0660\u0661", "\u0664",
          "\u0130", "\u0131", "\u017f", "\u212a", "\u00e9", "\u2014", "done:", "Blocked:",
          "pr ready", "PR\u00a0ready", "merged", "MERGED", "checks green", "ready in branch",
          "failed:", "dOnE:", "\u212aey=", "ne\u017fted", "need\u017f-deci\u017fion:", "\ufffd",
          "a" * 63, "b" * 64, "c" * 65]
SPACE = st.sampled_from(["", " ", "\t", "  \u00a0", "\u3000", "\x1c", "\n"])
KEY = st.sampled_from([0, 1, 2, 63, 64, 65]).flatmap(
    lambda n: st.text(alphabet="aZ09._-\u017f\u212a", min_size=n, max_size=n))
#: Lines shaped like a decision or an answer, with a key near its limits.
SHAPED = st.tuples(
    SPACE, st.sampled_from(["needs-decision:", "answered:", "Needs-Decision:", "ANSWERED:",
                            "need\u017f-decision:", "an\u017fwered:", "answered", "done:"]),
    SPACE, st.sampled_from(["[key=", "key=", "KEY=", "[KeY=", "\u212aey=", "[\u212aey=", "", "[",
                            "key"]),
    KEY, st.sampled_from(["]", "", " ", "\u00a0", "x", "]x", "] ", "\n", ":"]),
    st.text(max_size=8)).map("".join)
TEXT = (st.lists(st.sampled_from(PIECES) | st.text(max_size=3), max_size=10).map("".join)
        | st.text(max_size=40) | SHAPED)


@given(TEXT)
def test_a_line_and_its_stamp_are_the_patterns(raw: str) -> None:
    match = LINE.fullmatch(raw)
    expected = (match.group(2), float(match.group(1))) if match else (raw, None)
    assert crewlog.parse_line(raw, 3, 9) == (*expected, 3, 9)


@given(TEXT)
def test_the_verb_is_the_patterns(text: str) -> None:
    match = VERB.match(text)
    assert crewlog.verb(text) == (match.group(1).lower() if match else "")
    assert crewlog.from_captain(text) is (crewlog.verb(text) == "answered")


#: Keys at their limit, and each folded character where the rules look for letters.
EDGES = [f"{verb}{form}{key}{end} note" for verb in ("needs-decision: ", "answered: ")
         for form, end in (("[key=", "]"), ("key=", ""))
         for key in ("a" * 64, "b" * 65, "\u017f", "\u212a", "x\u0131", "\u0130")]
EDGES += ["needs-dec\u0130sion: x", "needs-decision\u0131: x", "an\u017fwered: key=a",
          "\u212aey=a", "ANSWERED: [\u212aEY=a] b"]


def _agree(text: str) -> None:
    asked = DECISION.fullmatch(text)
    assert crewlog.decision(text) == (
        None if asked is None else (asked.group(1) or asked.group(2), asked.group(3).strip()))
    closed = ANSWER.fullmatch(text)
    assert crewlog.answered(text) == (None if closed is None else closed.group(1) or closed.group(2))


@given(TEXT)
def test_decisions_and_answers_are_the_patterns(text: str) -> None:
    _agree(text)


def test_decisions_and_answers_at_the_edges_are_the_patterns() -> None:
    for text in EDGES:
        _agree(text)


@given(TEXT)
def test_the_default_captain_pattern_is_the_regex(text: str) -> None:
    assert captain.relevance(None)(text) is (DEFAULT.search(text) is not None)
    assert captain.relevance("  ")(text) is (DEFAULT.search(text) is not None)


def test_a_custom_or_invalid_captain_pattern() -> None:
    assert captain.relevance("shipped")("Shipped it") is True
    assert captain.relevance("shipped")("done: x") is False
    invalid = captain.relevance("(unclosed")
    assert invalid("done: x") is True and invalid("working") is False
    assert captain.captain_pattern("(unclosed")[1] is False


def _every_char() -> str:
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)


def test_folds_are_every_character_ignorecase_takes_for_an_ascii_letter() -> None:
    every = _every_char()
    outside = every[128:]
    matched = set(re.findall(r"[A-Za-z0-9._:=\[\]-]", outside, re.IGNORECASE))
    lowered = {char for char in outside if any(c.isascii() for c in char.lower())}
    assert matched | lowered == set(crewlog.FOLDS)


def test_printable_text_holds_nothing_clean_would_change() -> None:
    printable = "".join(char for char in _every_char() if char.isprintable())
    assert all(pattern.search(printable) is None for pattern in wakeinput._patterns())
    assert wakeinput.clean(printable) == printable


def test_cut_marks_a_cut_within_the_bytes() -> None:
    assert crewlog.cut("abc", 3) == "abc"
    assert crewlog.cut("abcdef", 5) == "ab..."
    assert crewlog.cut("\u00e9\u00e9\u00e9", 5) == "\u00e9..."


def test_a_snapshot_refuses_what_is_not_a_regular_file_without_waiting(tmp_path: Path) -> None:
    from firstmate.base.errors import StateError
    from firstmate.fast import crewview

    crew_dir = tmp_path / "crew"
    crew_dir.mkdir()
    (crew_dir / "alpha.pane").write_text("%1\n")
    (crew_dir / "alpha.status").write_text("1700000000.000\tdone: x\n")
    assert crewview.snapshot(str(crew_dir)) == [
        ("alpha", (os.stat(crew_dir / "alpha.status").st_ino, 0, 23,
                   (("done: x", 1_700_000_000.0, 0, 23),)),
         ("done: x", 1_700_000_000.0, 0, 23), (), None)]
    # A FIFO is refused at once (opened without waiting for a writer), never read: the drain
    # prints STATUS PRESENTATION INCOMPLETE instead of hanging.
    os.mkfifo(crew_dir / "alpha.drain-cursor")
    with pytest.raises(StateError, match=r"alpha\.drain-cursor is not a regular file"):
        crewview.snapshot(str(crew_dir))
    os.unlink(crew_dir / "alpha.drain-cursor")
    os.unlink(crew_dir / "alpha.status")
    os.mkfifo(crew_dir / "alpha.status")
    with pytest.raises(StateError, match=r"alpha\.status is not a regular file"):
        crewview.snapshot(str(crew_dir))
    os.unlink(crew_dir / "alpha.status")
    (crew_dir / "alpha.status").mkdir()
    with pytest.raises(StateError, match="is not a regular file"):
        crewview.snapshot(str(crew_dir))
    (crew_dir / "alpha.status").rmdir()
    os.mkfifo(crew_dir / "beta.pane")
    with pytest.raises(StateError, match=r"beta\.pane is not a regular file"):
        crewview.snapshot(str(crew_dir))
    os.unlink(crew_dir / "beta.pane")
    (crew_dir / "bad name.pane").write_text("%2\n")
    assert [snap[0] for snap in crewview.snapshot(str(crew_dir))] == ["alpha"]  # skipped


def test_a_line_longer_than_the_limit_is_read_past_keeping_its_beginning(tmp_path: Path) -> None:
    log = tmp_path / "w.status"
    blob = b"1.5\tdone: big " + b"x" * (3 << 20)
    log.write_bytes(b"1.0\tworking: a\n" + blob + b"\n2.0\tdone: later\n")
    whole = crewlog.read_span(str(log), 0)
    assert whole is not None
    texts = [(line[0][:10], line[1], crewlog.oversized(line)) for line in whole[3]]
    assert texts == [("working: a", 1.0, False), ("done: big ", 1.5, True),
                     ("done: late", 2.0, False)]
    assert len(whole[3][1][0].encode()) == crewlog.LINE_MAX - len(b"1.5\t")
    # Read from the blob with a 1 MiB limit: past it, and on to the line after it.
    part = crewlog.read_span(str(log), 15, limit=1 << 20)
    assert part is not None and part[2] == whole[2]
    assert [line[2:] for line in part[3]] == [line[2:] for line in whole[3][1:]]
    assert part[3][0][0] == whole[3][1][0]  # the same beginning, whichever way it was read


def test_an_oversized_line_still_being_written_is_left_for_later(tmp_path: Path) -> None:
    log = tmp_path / "w.status"
    log.write_bytes(b"y" * (2 << 20))  # no newline yet
    span = crewlog.read_span(str(log), 0, limit=1 << 20)
    assert span is not None and span[2] == 0 and span[3] == ()
    with open(log, "ab") as fh:
        fh.write(b"\n1.0\tdone: x\n")
    span = crewlog.read_span(str(log), 0, limit=1 << 20)
    assert span is not None and span[2] == log.stat().st_size
    assert [line[0] for line in span[3]][1:] == ["done: x"] and crewlog.oversized(span[3][0])


@given(sizes=st.lists(st.sampled_from([0, 1, 100, crewlog.LINE_MAX, crewlog.LINE_MAX + 1,
                                       (1 << 20) + 7]), min_size=1, max_size=5),
       limit=st.sampled_from([None, 1 << 20, 1 << 17]))
def test_reading_in_limited_steps_sees_what_one_read_sees(tmp_path_factory: pytest.TempPathFactory,
                                                         sizes: list[int], limit: int | None) -> None:
    log = tmp_path_factory.mktemp("log") / "w.status"
    log.write_bytes(b"".join(f"{i}.0\t".encode() + b"z" * n + b"\n" for i, n in enumerate(sizes)))
    whole = crewlog.read_span(str(log), 0)
    assert whole is not None
    seen: list[crewlog.Line] = []  # type: ignore[name-defined]
    offset = 0
    while offset < whole[2]:
        span = crewlog.read_span(str(log), offset, limit=limit)
        assert span is not None and span[2] > offset  # every read moves on
        seen += span[3]
        offset = span[2]
    assert seen == list(whole[3])
