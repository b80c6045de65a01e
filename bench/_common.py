"""What every benchmark does at the end: one JSON result, printed and kept for comparison.

``emit(name, result)`` writes ``bench/results/<name>.json`` (gitignored; compare it between
commits) and prints the same object as one JSON line, the script's last line of output.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(RESULTS.parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def emit(name: str, result: dict[str, object]) -> None:
    """Record ``result`` (which must carry its baseline and ratio figures) under ``name``."""
    record: dict[str, object] = {
        **result,
        "bench": result.get("bench", name),
        "meta": {"commit": _commit(), "python": platform.python_version(),
                 "machine": platform.machine(), "cpus": os.cpu_count(),
                 "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    sys.stdout.flush()  # the note goes to stderr: keep it after the figures it follows
    print(f"(written to {path.relative_to(RESULTS.parent.parent)})", file=sys.stderr, flush=True)
    print(json.dumps(record, sort_keys=True), flush=True)
