"""Hook calls for the contract and the fuzzers: each plugin's declared sample payload, hostile
stdin, the user's own config files, and file-tree snapshots."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def sample_of(info: Any, event: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """*info*'s declared sample hook call for *event* (HarnessInfo.sample_payload/sample_env),
    the event name filled in; None when the harness declares none."""
    if not info.sample_payload:
        return None
    pascal = "".join(part.capitalize() for part in event.split("-"))  # Stop, StopFailure
    names = {"{Event}": pascal, "{event}": pascal[:1].lower() + pascal[1:]}

    def fill(value: Any) -> Any:
        return names.get(value, value) if isinstance(value, str) else value

    payload = {key: fill(value) for key, value in info.sample_payload.items()}
    env = {key: str(fill(value)) for key, value in info.sample_env.items()}
    return payload, env


def sample_call(harness: str, event: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """A realistic ``(payload, env)`` for *harness* calling its *event* hook, as its installed
    plugin declares it; None when it declares none or is not installed here."""
    from firstmate.plugin.manager import load

    info = load({}).harness(harness)
    return sample_of(info, event) if info is not None else None


def payload_harnesses() -> list[str]:
    """The installed harnesses that declare a sample hook payload."""
    from firstmate.plugin.manager import load

    return [info.name for info in load({}).harnesses() if info.sample_payload]


#: Hostile stdin for ``fm hook``: empty, truncated, not UTF-8, not an object, too large, and
#: an object of the wrong shape (common keys with the wrong type; :func:`garbage_payload` adds
#: every key of the harness's own sample payload).
GARBAGE_PAYLOADS: dict[str, bytes] = {
    "empty": b"",
    "truncated": b"{",
    "not-utf8": b"\xff\xfe",
    "array": b"[]",
    "oversized": b'{"pad": "' + b"x" * (2 << 20) + b'"}',
    "wrong-shape": json.dumps({
        "hook_event_name": 42, "hookEventName": {}, "turn_id": None,
        "session_id": ["x"], "stop_hook_active": "yes", "loop_count": -1, "status": {"a": 1},
    }).encode(),
}

def garbage_payload(name: str, sample_payload: Mapping[str, Any]) -> bytes:
    """The garbage stdin *name* for a harness whose sample payload is *sample_payload*: the
    wrong-shape object also carries each of the harness's own keys with a wrong type."""
    if name != "wrong-shape":
        return GARBAGE_PAYLOADS[name]
    shape = json.loads(GARBAGE_PAYLOADS[name])
    for key, value in sample_payload.items():
        shape.setdefault(key, [] if not isinstance(value, list) else {"a": 1})
    return json.dumps(shape).encode()


#: ``fm hook`` exit statuses a garbage payload may produce: 0 (nothing to do) or 2 (a harness's
#: own wake/block code). 1 would be an internal error, i.e. a bug.
HOOK_GARBAGE_EXITS = (0, 2)

def user_file_bytes(relpath: str, samples: Mapping[str, Any] | None = None) -> bytes:
    """What a user might already have at *relpath* (a project-relative config file): the
    plugin's own sample (``HarnessInfo.sample_user_files``, passed as *samples*), else a
    generic JSON or text file."""
    sample = (samples or {}).get(relpath)
    if isinstance(sample, str):
        return sample.encode()
    if sample is not None:
        return (json.dumps(sample, indent=4) + "\n").encode()
    if relpath.endswith(".json"):
        return b'{\n    "x-user-setting": {"keep": [1, "two", null]}\n}\n'
    return b"# Notes\n\nThe user's own notes.\n"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under *root*, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def json_contains(outer: Any, inner: Any) -> bool:
    """Whether *outer* still holds everything in *inner* (dict keys; list items in order)."""
    if isinstance(inner, dict):
        return isinstance(outer, dict) and all(
            key in outer and json_contains(outer[key], value) for key, value in inner.items())
    if isinstance(inner, list):
        if not isinstance(outer, list):
            return False
        it = iter(outer)
        return all(any(json_contains(candidate, item) for candidate in it) for item in inner)
    return bool(outer == inner)


def contract_plugin_names(env: Mapping[str, str] | None = None) -> list[str]:
    """Plugins the contract suite runs against: ``FIRSTMATE_CONTRACT_PLUGINS`` or every one installed."""
    env = os.environ if env is None else env
    named = [n.strip() for n in env.get("FIRSTMATE_CONTRACT_PLUGINS", "").split(",") if n.strip()]
    if named:
        return named
    from importlib.metadata import entry_points

    from firstmate.plugin.manager import ENTRY_POINT_GROUP

    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})
