"""The contract kit's continuity check fails fast, and names the turn end, for a plugin that
re-arms only sometimes: at its first turn end only, at every other one, all but its third, or
only while the queue is empty. Real arms, watchers and store; the harness is a fake whose parked stop hook skips the
turn ends its rule says."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fakeplugin_support import FakeSite, fake_site  # noqa: F401
from firstmate.plugin.manager import load_harness
from firstmate.testing import rearm

#: A strategy that runs the parked stop hook only at the turn ends its rule allows and lets the
#: others end quietly (counting the calls in the home, since each call is its own process).
SOMETIMES = '''
import attrs
from firstmate.api import ParkedStop


def queued(home):
    from firstmate.rearm.parkedstop import queued as depth

    return depth(home)


@attrs.frozen
class Sometimes:
    rule: str
    inner: ParkedStop = ParkedStop(park_seconds=600)

    def events(self, info):
        return self.inner.events(info)

    @property
    def receipt(self):
        return self.inner.receipt

    def run(self, info, event, payload, home, env):
        # One byte appended per call: concurrent calls each count once, none reads half a write.
        with open(home.root / "turn-ends", "ab") as counter:
            counter.write(b".")
            number = counter.tell()
        skip = {"never": True, "first": number > 1, "odd": number % 2 == 0, "third": number == 3,
                "empty-queue": home.db.exists() and queued(home) > 0}[self.rule]
        if skip:
            return self.inner.reply.allow()
        return self.inner.run(info, event, payload, home, env)
'''

#: Each rule and how the kit names the turn end it breaks. The kit's second turn end meets a
#: queued wake; the others park.
QUIET = r"turn end 2 of 4 let the turn end quietly with the wake CONTRACT-WAKE-\w+ queued"
CASES = {
    "never": r"turn end 1 of 4 ended before any wake: it never armed a watcher",
    "first": QUIET,
    "odd": QUIET,
    "empty-queue": QUIET,
    "third": r"turn end 3 of 4 ended before any wake without parking, though an earlier turn "
             r"end parked: the plugin re-arms only sometimes",
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_a_plugin_that_rearms_only_sometimes_fails_fast_naming_the_turn_end(
        fake_site: FakeSite, tmp_path: Path, rule: str) -> None:  # noqa: F811
    (fake_site.path / "sometimes.py").write_text(SOMETIMES)
    fake_site.hook_plugin("fakesome", f"__import__('sometimes').Sometimes({rule!r})")
    with rearm.continuity_rig("fakesome", tmp_path, {}) as rig:
        info = load_harness("fakesome", rig.env).harness("fakesome")
        started = time.monotonic()
        with pytest.raises((AssertionError, pytest.fail.Exception), match=CASES[rule]):
            rearm.drive_hook(rig, info)
        took = time.monotonic() - started
    assert took < 10.0, f"the kit took {took:.1f}s to fail a plugin that re-arms {rule!r}"
