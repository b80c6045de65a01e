"""The checkpoint guard (CheckpointGuard), run by core for a fake protocol harness: the stop hook
refuses a silent turn end while nothing watches, lets it end once the model has re-armed, and
bounds its blocks for a harness with no cap of its own. Real watchers and store."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeplugin_support import FakeSite, fake_site  # noqa: F401
from firstmate.plugin.manager import load_harness
from firstmate.testing import fm_command, rearm

#: Codex's shape: a block is a JSON decision, a notice a systemMessage, and blocks are bounded.
BOUNDED = ('CheckpointGuard(reply=HookReply.json("reason", notice_key="systemMessage", '
           'decision="block"), chain=StopChain.knobs("FM_FAKE_STOP", ceiling=100))')
#: Grok's shape: exit 2 with the banner, the harness's own loop flag ending the loop.
NATIVE = "CheckpointGuard(reply=HookReply(exit_code=2))"
GUARD = 'GuardProfile(style="block", loop_flags=("stop_hook_active",))'


@pytest.fixture
def rig(fake_site: FakeSite, tmp_path: Path) -> Iterator[rearm.ContinuityRig]:  # noqa: F811
    fake_site.hook_plugin("fakeguard", BOUNDED, guard=GUARD, owner="checkpoint",
                          rearm_command=("checkpoint", "--seconds", "600"))
    fake_site.hook_plugin("fakenative", NATIVE, guard=GUARD, owner="model-task",
                          rearm_command=("arm",))
    with rearm.continuity_rig("fakeguard", tmp_path,
                              {"FIRSTMATE_PLUGINS": "fakeguard,fakenative"}) as made:
        yield made


def stop(rig: rearm.ContinuityRig, harness: str = "fakeguard", **payload: object
         ) -> subprocess.CompletedProcess[str]:
    return rig.fm("hook", harness, "stop", stdin=json.dumps({"fake_session": "f", **payload}))


@pytest.mark.parametrize("harness", ["fakeguard", "fakenative"])
def test_the_model_rearms_and_each_wake_comes_back_once(rig: rearm.ContinuityRig,
                                                        harness: str) -> None:
    info = load_harness(harness, rig.env).harness(harness)
    rearm.drive_command(rig, info)
    assert len(rig.delivered) == 2


def test_blocks_are_bounded_and_a_healthy_watcher_restarts_the_chain(
        rig: rearm.ContinuityRig) -> None:
    for _ in range(3):  # the block budget
        done = stop(rig)
        answer = json.loads(done.stdout)
        assert done.returncode == 0 and answer["decision"] == "block"
        assert answer["reason"].startswith("FIRSTMATE_OP: WATCHER DOWN")
    spent = json.loads(stop(rig).stdout)
    assert list(spent) == ["systemMessage"] and "not blocking this stop" in spent["systemMessage"]
    proc = rig.spawn(fm_command("arm"))  # the model re-arms
    rig.parked(proc, "fm arm")
    assert (stop(rig).returncode, stop(rig).stdout) == (0, "")  # healthy: the turn ends
    rig.close()
    assert json.loads(stop(rig).stdout)["decision"] == "block"  # a fresh chain blocks again


def test_a_native_block_is_exit_2_and_a_spent_continuation_lets_it_end(
        rig: rearm.ContinuityRig) -> None:
    done = stop(rig, "fakenative", stop_hook_active=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("FIRSTMATE_OP: WATCHER DOWN")
    assert stop(rig, "fakenative", stop_hook_active=True).returncode == 0


def test_nothing_to_watch_lets_the_turn_end_quietly(rig: rearm.ContinuityRig) -> None:
    for path in (rig.home.state / "crew").iterdir():
        path.unlink()
    for harness in ("fakeguard", "fakenative"):
        done = stop(rig, harness)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
