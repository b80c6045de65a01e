"""A stand-in plugin made findable: fm finds a harness's plugin by its ``firstmate.plugins``
entry point alone, so a test's plugin module on ``PYTHONPATH`` needs a distribution's metadata
that names it, in a directory on ``sys.path`` too."""

from __future__ import annotations

from pathlib import Path


def declare(site: Path, harness: str, module: str, attr: str = "plugin", *,
            version: str = "0.0.0") -> Path:
    """Make *module*'s *attr* the plugin of *harness*: a distribution in *site* (made if
    missing; put it on the child's ``PYTHONPATH``) whose entry point says so. Returns its
    dist-info directory."""
    dist = f"fmtest_{harness.replace('-', '_')}_{module.replace('.', '_')}"
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        f"[firstmate.plugins]\n{harness} = {module}:{attr}\n")
    return info


__all__ = ["declare"]
