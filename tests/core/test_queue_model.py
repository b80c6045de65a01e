"""Queue + claims + grants + episodes against a small pure-Python reference model.

Hypothesis drives random sequences of appends, drains and acknowledgements by both actors,
grant verbs, an owner that dies, hand-written unusable rows and watcher-side episode
transitions; after every step the real SQLite state must equal the model's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import attrs
import pytest
from firstmate.base.errors import ConflictError, FirstmateError, UsageError
from firstmate.fast import drainsteps as presented
from firstmate.store import drain, episodes, grants, identity, queue
from firstmate.store.database import Store, last_seq, open_store
from firstmate.store.home import Home
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from wakeq_support import raw

NEW = "<new>"
KEYS = ("a", "b", "heartbeat")
STALE_GEN = "old.0.x"


@attrs.define
class Ep:
    status: str
    kind: str
    gen: str
    announced_seq: int | None = None


@attrs.define
class MRow:
    kind: str
    key: str
    payload: str
    claim: str | None = None


@attrs.define
class MGrant:
    gen: str
    live: bool = True
    published: bool = False


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="fm-model-")
        self.home = Home(Path(self.dir) / "home").ensure()
        self.db: Store = open_store(self.home)
        self.rows: dict[int, MRow] = {}
        self.bad: set[int] = set()
        self.counter = 0
        self.ep: Ep | None = None
        self.grant: MGrant | None = None
        self.away = False
        self.withheld = 0
        self.seen_gens: set[str] = set()
        self.grants_made = 0
        self.payloads = 0
        #: The highest row a drain presented to each actor, and the generations drains printed.
        self.marks = {"main": 0, "branch": 0}
        self.printed: list[str] = []

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- model helpers ---------------------------------------------------------------------

    def last(self) -> int:
        return max([self.counter, *self.rows, *self.bad, 0])

    def fresh(self, status: str, kind: str) -> None:
        self.ep = Ep(status, kind, NEW, self.last() if status == "announced" else None)

    def m_publish_downtime(self, append: bool) -> None:
        ep = self.ep
        if ep is None or ep.status == "acked":
            self.fresh("pending", "downtime")
        elif ep.status == "pending" or ep.kind == "handling":
            self.ep = Ep("pending", "downtime", ep.gen)
        elif append:
            self.fresh("pending", "downtime")

    def m_begin_handling(self, expected: str | None = None) -> episodes.Handling:
        ep = self.ep
        if ep is None:
            return episodes.Handling.UNUSABLE
        if expected is not None and ep.gen != expected:
            return episodes.Handling.MISMATCH
        if ep.status == "acked":
            return episodes.Handling.ALREADY_ACKED if expected else episodes.Handling.UNUSABLE
        if ep.kind == "handling":
            return episodes.Handling.UNCHANGED
        ep.kind = "handling"
        return episodes.Handling.STARTED

    def sync(self) -> None:
        """Adopt a generation the code minted where the model said NEW (and check it is new)."""
        with self.db.reading() as conn:
            state = episodes.read(conn)
        if self.ep is None:
            assert isinstance(state, episodes.Missing)
            return
        assert isinstance(state, episodes.Episode)
        if self.ep.gen == NEW:
            assert state.generation not in self.seen_gens
            self.ep.gen = state.generation
            self.seen_gens.add(state.generation)

    def claim_of(self, actor: str) -> list[int]:
        return sorted(s for s, r in self.rows.items() if r.claim == actor)

    def give_back(self) -> None:
        for r in self.rows.values():
            if r.claim == "branch":
                r.claim = "returned"
        self.marks["branch"] = 0

    def reclaim(self) -> bool:
        if self.grant is not None and not self.grant.live:
            self.give_back()
            self.grant = None
            return True
        return False

    def record(self, result: drain.DrainResult) -> None:
        if result.ack_through is not None and result.generation is not None:
            actor = result.actor
            self.marks[actor] = max(self.marks[actor], result.ack_through)
            kept = [g for g in self.printed if g != result.generation] + [result.generation]
            self.printed = kept[-presented.GENERATIONS_KEPT:]

    def retire(self) -> None:
        if self.bad:
            self.counter = max(self.counter, *self.bad)
            self.bad.clear()

    def dedupe(self, seqs: list[int]) -> list[tuple[int, str, str, str]]:
        view: dict[tuple[str, str], tuple[int, str, str, str]] = {}
        for s in seqs:
            r = self.rows[s]
            view[("heartbeat", "") if r.kind == "heartbeat" else (r.kind, r.key)] = (s, r.kind, r.key, r.payload)
        return list(view.values())

    # --- rules -----------------------------------------------------------------------------

    @rule(kind=st.sampled_from(queue.KINDS), key=st.sampled_from(KEYS))
    def append(self, kind: str, key: str) -> None:
        self.payloads += 1
        payload = f"payload {self.payloads}"
        seq = queue.append(self.db, kind, key, payload)
        self.m_publish_downtime(append=True)
        expected = self.last() + 1
        assert seq == expected
        self.counter = seq
        self.rows[seq] = MRow(kind, key, payload)
        self.sync()

    @rule()
    def insert_unusable(self) -> None:
        seq = self.last() + 1
        with raw(self.home) as conn:
            conn.execute("INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, 1, 'bogus', 'k', 'p')", (seq,))
        self.bad.add(seq)

    @rule()
    def drain_main(self) -> None:
        result = drain.drain(self.db, "main", env={})
        reclaimed = self.reclaim()
        had_usable = bool(self.rows)
        had_bad = bool(self.bad)
        self.retire()
        for r in self.rows.values():
            if r.claim in (None, "returned"):
                r.claim = "main"
        assert any("reclaimed" in n for n in result.notices) == reclaimed
        assert any("retired" in n for n in result.notices) == had_bad
        self.check_presentation(result, "main", had_usable)

    @rule()
    def drain_branch(self) -> None:
        g = self.grant
        if g is None or not g.live or not self.claim_of("branch"):
            with pytest.raises(FirstmateError) as err:
                drain.drain(self.db, "branch", env={})
            assert err.value.exit_code == 1
            return
        result = drain.drain(self.db, "branch", env={})
        self.check_presentation(result, "branch", True)

    def check_presentation(self, result: drain.DrainResult, actor: str, had_usable: bool) -> None:
        mine = self.claim_of(actor)
        if not had_usable:
            assert result.rows == ()
            if self.ep is not None and self.ep.status != "acked":
                self.m_begin_handling()
                assert (result.ack_through, result.generation) == (0, self.ep.gen)
            else:
                assert result.ack_command is None
            self.sync()
            self.record(result)
            return
        if not mine:
            assert result.rows == () and result.ack_command is None
            assert result.held == grants.held_line(self.claim_of("branch"))
            return
        if self.ep is None or self.ep.status == "acked":
            self.m_publish_downtime(append=False)
        self.m_begin_handling()
        self.sync()
        assert self.ep is not None
        assert [(r.seq, r.kind, r.key, r.payload) for r in result.rows] == self.dedupe(mine)
        assert result.ack_through == max(mine)
        assert result.generation == self.ep.gen
        assert result.held is None
        self.record(result)

    @rule(data=st.data(), actor=st.sampled_from(["main", "branch"]),
          which=st.sampled_from(["current", "printed", "made-up"]))
    def acknowledge(self, data: st.DataObject, actor: str, which: str) -> None:
        current = self.ep.gen if self.ep is not None else STALE_GEN
        gen = {"current": current, "made-up": STALE_GEN,
               "printed": data.draw(st.sampled_from(self.printed)) if self.printed else current}[which]
        mine = self.claim_of(actor)
        mark = self.marks[actor]
        cutoff = data.draw(st.sampled_from([0, *mine, mark, mark + 1, self.last() + 1]))
        if actor == "branch" and self.grant is None:
            with pytest.raises(FirstmateError, match="no supervision grant"):
                drain.acknowledge(self.db, actor, cutoff, gen, env={})
            return
        known = (self.ep is not None and gen == self.ep.gen) or gen in self.printed
        last = max([mark, *(mine if actor == "main" else [])])
        if cutoff > last:
            # Refused whole: no reclaim, no retirement, nothing consumed (checked by the invariant).
            with pytest.raises(UsageError, match="beyond the last wake row presented to you"):
                drain.acknowledge(self.db, actor, cutoff, gen, env={})
            return
        result = drain.acknowledge(self.db, actor, cutoff, gen, env={})
        reclaimed = had_bad = False
        if actor == "main":
            reclaimed = self.reclaim()
            had_bad = bool(self.bad)
            self.retire()
        presented_max = max(self.claim_of(actor), default=0)
        gone = [s for s, r in self.rows.items() if r.claim == actor and s <= cutoff]
        for s in gone:
            del self.rows[s]
        remaining = len(self.rows) + len(self.bad)
        ep = self.ep
        open_elsewhere = ep is not None and ep.status != "acked" and ep.gen != gen
        retired = moved = False
        if remaining == 0 and ep is not None:
            if ep.gen == gen:
                retired = True
                ep.status = "acked"
            else:
                moved = open_elsewhere
        else:
            moved = open_elsewhere
        assert (result.consumed, result.retired, result.moved) == (len(gone), retired, moved)
        other = ("wake drain: reclaimed", "wake drain: retired", "wake drain:   ")
        kinds = [n.split(" ")[2] for n in result.notices if not n.startswith(other)]
        assert any(n.startswith("wake drain: retired") for n in result.notices) == had_bad
        if len(gone) == 0 and presented_max > cutoff:
            assert kinds == ["nothing"]
        elif not known:
            # A generation no drain printed: the rows go, the episode part is refused.
            assert kinds == ["acknowledged"] and not retired
            assert "was never printed by a drain" in result.notices[-1]
        elif not retired and not moved and remaining == 0 and ep is not None and ep.gen != gen:
            assert kinds == ["recovery"]
        elif moved:
            assert kinds == ["acknowledged"]
        else:
            assert kinds == []
        assert any("reclaimed" in n for n in result.notices) == reclaimed

    @rule(data=st.data(), actor=st.sampled_from(["main", "branch"]),
          which=st.sampled_from(["current", "printed", "made-up"]))
    def handle(self, data: st.DataObject, actor: str, which: str) -> None:
        """A drain, then its acknowledgement (or a mistyped one): the common sequence."""
        if actor == "main":
            self.drain_main()
        else:
            self.drain_branch()
        self.acknowledge(data, actor, which)

    @rule()
    def activate(self) -> None:
        self.grants_made += 1
        gen = f"br.{self.grants_made}.g"
        grants.activate(self.db, os.getpid(), gen)
        self.give_back()
        self.grant = MGrant(gen)

    @rule(data=st.data(), wrong_gen=st.booleans())
    def publish(self, data: st.DataObject, wrong_gen: bool) -> None:
        pool = sorted([*self.rows, self.last() + 1])
        seqs = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
        gen = "nope.1.x" if wrong_gen or self.grant is None else self.grant.gen
        g = self.grant
        if g is None or g.gen != gen:
            with pytest.raises(FirstmateError) as err:
                grants.publish(self.db, gen, seqs)
            assert err.value.exit_code == 1
            return
        current = self.claim_of("branch")
        expect: type[FirstmateError] | None = None
        if current and current != sorted(seqs):
            expect = FirstmateError
        elif not current:
            found = {s: self.rows[s] for s in seqs if s in self.rows}
            if any(r.claim == "main" for r in found.values()) or (any(r.kind == "check" for r in found.values()) and not self.away):
                expect = ConflictError
            elif len(found) != len(seqs):
                expect = FirstmateError
        if expect is not None:
            with pytest.raises(FirstmateError) as err:
                grants.publish(self.db, gen, seqs)
            assert type(err.value) is expect
            return
        grants.publish(self.db, gen, seqs)
        for s in seqs:
            self.rows[s].claim = "branch"
        g.published = True
        self.m_withhold()

    def m_withhold(self) -> bool:
        unclaimed = [s for s, r in self.rows.items() if r.claim in (None, "returned")] + \
            list(self.bad)
        newest = max(unclaimed, default=0)
        if newest <= self.withheld:
            return False
        self.m_publish_downtime(append=True)
        self.withheld = newest
        self.sync()
        return True

    @rule()
    def withhold(self) -> None:
        assert grants.withhold(self.db) == self.m_withhold()

    @rule(right=st.booleans())
    def release(self, right: bool) -> None:
        gen = self.grant.gen if self.grant is not None and right else "nope.1.x"
        if self.grant is None or self.grant.gen != gen:
            with pytest.raises(FirstmateError):
                grants.release(self.db, gen)
            return
        assert grants.release(self.db, gen) == len(self.claim_of("branch"))
        self.give_back()
        self.grant.published = False

    @rule()
    def deactivate(self) -> None:
        if self.grant is None:
            with pytest.raises(FirstmateError):
                grants.deactivate(self.db, os.getpid(), "br.0.g")
            return
        grants.deactivate(self.db, os.getpid(), self.grant.gen)
        self.give_back()
        self.grant = None

    @precondition(lambda self: self.grant is not None and self.grant.live)
    @rule()
    def owner_dies(self) -> None:
        me = identity.current()
        forged = identity.ProcessIdentity(me.pid, me.started, "f" * 16).token()
        with raw(self.home) as conn:
            conn.execute("UPDATE branch_grant SET identity = ?", (forged,))
        assert self.grant is not None
        self.grant.live = False

    @rule()
    def toggle_away(self) -> None:
        self.away = not self.away
        if self.away:
            self.home.away_record.write_text("away\n")
        else:
            self.home.away_record.unlink()

    @rule()
    def arm_check(self) -> None:
        with self.db.transaction() as conn:
            action = episodes.arm_check(conn, bool(self.rows or self.bad))
        ep = self.ep
        nonempty = bool(self.rows or self.bad)
        if ep is None or ep.status == "acked":
            expected = episodes.Action.RECOVER if nonempty else episodes.Action.NONE
            if nonempty:
                self.fresh("announced", "downtime")
        elif ep.status == "pending" and ep.kind == "downtime":
            expected = episodes.Action.RECOVER
            self.ep = Ep("announced", "downtime", ep.gen, self.last())
        else:
            expected = episodes.Action.WAIT
        assert action is expected
        self.sync()

    @rule()
    def reopen_announced(self) -> None:
        with self.db.transaction() as conn:
            episodes.reopen_announced(conn)
        ep = self.ep
        if ep is not None and ep.status == "announced":
            newest = max([*self.rows, *self.bad, 0])
            since = ep.announced_seq
            if newest and (since is None or newest > since):
                self.fresh("pending", "downtime")
        self.sync()

    @rule(which=st.sampled_from(["none", "current", "stale"]))
    def begin_handling(self, which: str) -> None:
        expected = None if which == "none" else STALE_GEN if which == "stale" else (
            self.ep.gen if self.ep else STALE_GEN)
        with self.db.transaction() as conn:
            outcome = episodes.begin_handling(conn, expected)
        assert outcome is self.m_begin_handling(expected)

    @rule()
    def publish_handling(self) -> None:
        with self.db.transaction() as conn:
            episodes.publish_handling(conn)
        self.ep = Ep("pending", "handling", NEW)
        self.sync()

    # --- the real state equals the model ---------------------------------------------------

    @invariant()
    def state_matches(self) -> None:
        with raw(self.home) as conn:
            got = {int(s): (k, key, p, c) for s, k, key, p, c in
                   conn.execute("SELECT seq, kind, key, payload, claim FROM wakes")}
            grant_row = conn.execute("SELECT generation, published_at FROM branch_grant").fetchone()
            kv = dict(conn.execute("SELECT key, value FROM kv WHERE key LIKE 'drain.%'"))
            assert last_seq(conn) == self.last()
        expected = {s: (r.kind, r.key, r.payload, r.claim) for s, r in self.rows.items()}
        expected.update({s: ("bogus", "k", "p", None) for s in self.bad})
        assert got == expected
        for actor, mark in self.marks.items():
            assert int(kv.get(presented.PRESENTED_KEY + actor, "0")) == mark
        assert kv.get(presented.GENERATIONS_KEY, "").split() == self.printed
        with self.db.reading() as conn:
            state = episodes.read(conn)
        if self.ep is None:
            assert isinstance(state, episodes.Missing)
        else:
            assert isinstance(state, episodes.Episode)
            assert (state.status, state.kind, state.generation) == (self.ep.status, self.ep.kind, self.ep.gen)
        if self.grant is None:
            assert grant_row is None
        else:
            assert grant_row is not None
            assert (grant_row[0], grant_row[1] is not None) == (self.grant.gen, self.grant.published)

    @invariant()
    def claims_are_exclusive(self) -> None:
        # A row is claimed by at most one actor, and only a published grant holds branch rows.
        if self.claim_of("branch"):
            assert self.grant is not None and self.grant.published


TestQueueModel = QueueMachine.TestCase
