"""A stand-in plugin made findable: fm finds a harness's plugin by its ``firstmate.plugins``
entry point alone, so a test's plugin module on ``PYTHONPATH`` needs a distribution's metadata
that names it, in a directory on ``sys.path`` too."""

from __future__ import annotations

from pathlib import Path


def declare(site: Path, harness: str, module: str, attr: str = "plugin", *,
            dist: str | None = None, version: str = "0.0.0") -> Path:
    """Make *module*'s *attr* the plugin of *harness*: distribution *dist* (a name of its own
    when None) in *site* (made if missing; put it on the child's ``PYTHONPATH``) whose entry
    point says so. Returns its dist-info directory."""
    dist = dist or f"fmtest-{harness}-{module}".replace("_", "-").replace(".", "-")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        f"[firstmate.plugins]\n{harness} = {module}:{attr}\n")
    return info


__all__ = ["declare"]
