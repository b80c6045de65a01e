"""Every reader of a crew's files tolerates whatever those files hold.

Crew files are plain files a crew, its harness hook or a person may write by hand (``touch``,
``echo``, ``cat`` of a binary). Whatever bytes the status log, the turn-end marker, the cursors,
the turn-seen mark or the harness record hold, each reader — the watcher's status source, the
drain's presentation (both paths' shared core and the full path's wrapper), the store's crew
functions, ``fm crew list``'s rows, ``fm top``'s frame and the resurface source's decision check —
answers without raising, and what it shows carries no control, escape or bidi character.
(The process-level counterpart, with oversized files, is tests/chaos/test_crew_file_chaos.py.)
"""

from __future__ import annotations

import os
import time
import unicodedata

import attrs
import pytest
from firstmate.app import drain_context
from firstmate.app.crewops import rows
from firstmate.app.top import Gatherer
from firstmate.app.top_view import render
from firstmate.fast import crewview
from firstmate.fast.captain import relevance
from firstmate.store import crew, deliveries
from firstmate.store.home import Home
from firstmate.watch.backends.tmux import PaneListing
from firstmate.watch.sources.base import PollContext
from firstmate.watch.sources.resurface import open_decisions_exist
from firstmate.watch.sources.status import StatusSource
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from wakeq_support import db_for

SUFFIXES = (crew.STATUS, crew.TURN_ENDED, crew.SIGNAL_CURSOR, crew.DRAIN_CURSOR, crew.TURN_SEEN,
            crew.HARNESS)
NASTY = [b"-inf\n", b"nan\n", b"1e400\n", b"-1e400\n", b"inf\tdone: x\n", b"\xff\xfe\x00\n",
         b"\x00" * 64, b"9" * 40 + b" " + b"9" * 40 + b"\n", b"-1 -1\n", b"\xc2\xb2 1\n",
         "\u0661\u0662\t\u202edone: x\u2066\n".encode(), b"123456789012.123456789\tdone: x\n",
         b"needs-decision: key=" + b"k" * 100 + b" q\n", b"answered: key=\xff x\n",
         b"\x1b]0;title\x07done: \x1b[31mred\n", b"\r\r\n\x85\n", b"1 2 3 4 5\n",
         b"1 2 a b c\n"]


@attrs.define
class Panes:
    name: str = "fake"
    last_error: str | None = None

    def capture(self, target: str) -> str | None:
        return None

    def busy(self, target: str) -> bool:
        return False

    def pane_states(self) -> dict[str, str]:
        return {}

    def listing(self) -> PaneListing:
        return PaneListing()


def shown_clean(text: str) -> bool:
    """No control character (but the line breaks between lines), no escape, no format char."""
    return not any(unicodedata.category(ch) in ("Cc", "Cf") and ch != "\n" for ch in text)


def read_everything(home: Home) -> list[str]:
    """Run every reader once over *home*; the text each shows."""
    shown: list[str] = []
    source = StatusSource(home, backend=Panes())  # type: ignore[arg-type]
    triage: list[str] = []
    for now in (time.time(), time.time() + 100):
        ctx = PollContext(home=home, env={"FM_SIGNAL_GRACE": "0"}, now=now, poll=1,
                          triage=triage.append)
        wake = source.poll(ctx)
        if wake is not None:
            shown.append(wake.reason)
            source.commit(wake, ctx)
    snaps = crewview.snapshot(str(home.crew_dir))
    rows_in = [("signal", "a.status", "p"), ("signal", "a.turn-ended", "p")]
    shown += crewview.render(snaps, rows_in, relevance(None))
    presentation = drain_context.prepare(home, rows_in, env={})
    shown += presentation.lines
    presentation.commit()
    for member in crew.list(home):
        last = crew.last_line(home, member.name)
        if last is not None:
            shown.append(crew.clean_text(last.text))
        crew.open_decisions(home, member.name)
        crew.harness(home, member.name)
    for row in rows(home, Panes()):  # type: ignore[arg-type]
        shown.append(str(row.as_json(time.time())))
    open_decisions_exist(home)
    gatherer = Gatherer(home.root, {"FM_HOME": str(home.root)})
    try:
        shown += render(gatherer.gather(), 120)
    finally:
        gatherer.close()
    return shown


@pytest.fixture(scope="module")
def base_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    home = Home(tmp_path_factory.mktemp("fuzz") / "home").ensure()
    crew.add(home, "a", "%1")
    crew.append_status(home, "a", "done: first")
    crew.mark_turn_ended(home, "a")
    db = db_for(home)  # delivered wakes naming the crew: fm top looks up their stamps
    deliveries.record(db, 4242, "4242:1.00:aa", "signal: a.turn-ended")
    deliveries.record(db, 4243, "4243:1.00:bb", "signal: a.status: done: first")
    db.close()
    return home


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(suffix=st.sampled_from(SUFFIXES),
       content=st.one_of(st.sampled_from(NASTY), st.binary(max_size=600)),
       append=st.booleans())
@example(suffix=crew.TURN_ENDED, content=b"-inf\n", append=False)
@example(suffix=crew.STATUS, content=b"\xe2\x80\xae\xe2\x81\xa6done: x\xe2\x80\x8b\n", append=True)
def test_every_reader_tolerates_any_content(base_home: Home, tmp_path_factory: pytest.TempPathFactory,
                                            suffix: str, content: bytes, append: bool) -> None:
    root = tmp_path_factory.mktemp("case") / "home"
    import shutil

    shutil.copytree(base_home.root, root, symlinks=True)
    home = Home(root)
    target = crew.path(home, "a", suffix)
    with open(target, "ab" if append else "wb") as fh:
        fh.write(content)
    os.chmod(target, 0o600)
    for text in read_everything(home):
        assert shown_clean(text), repr(text)

