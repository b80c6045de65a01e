"""Declaring a throwaway plugin module in a test's site directory: fm finds a harness's plugin by
its ``firstmate.plugins`` entry point alone, so a module on ``PYTHONPATH`` needs a dist-info
that names it."""

from __future__ import annotations

from pathlib import Path


def declare(site: Path, harness: str, module: str, attr: str = "plugin") -> Path:
    """Make *module*'s *attr* (a module in *site*) the plugin of *harness*: a distribution in
    *site* whose entry point says so. Returns its dist-info directory."""
    dist = f"fmtest_{harness.replace('-', '_')}_{module.replace('.', '_')}"
    info = site / f"{dist}-0.0.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(
        f"[firstmate.plugins]\n{harness} = {module}:{attr}\n")
    return info
