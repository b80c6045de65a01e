"""Text blocks fm keeps in a user's Markdown or rules file: ``<!-- name:begin -->`` … ``<!-- name:end -->``.

Found by their marker lines, never by position, so the user may write around them; a block is
updated in place or appended after a blank line, and removed with the blank line that set it off.
"""

from __future__ import annotations

#: Default name in text-block markers: ``<!-- firstmate:begin -->`` … ``<!-- firstmate:end -->``.
BLOCK_NAME = "firstmate"


class ShapeError(ValueError):
    """A config document does not have the shape a merge expects (reported with its path)."""


def block_markers(name: str = BLOCK_NAME) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _find_block(text: str, name: str) -> tuple[int, int] | None:
    """Character span of the marked block, end line included; None when absent."""
    begin, end = block_markers(name)
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if not starts and not ends:
        return None
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ShapeError(
            f"the {begin} … {end} block is damaged ({len(starts)} begin and {len(ends)} end "
            "markers); delete the stray marker lines"
        )
    offset = [0]
    for line in lines:
        offset.append(offset[-1] + len(line))
    return offset[starts[0]], offset[ends[0] + 1]


def upsert_block(text: str, body: str, name: str = BLOCK_NAME) -> str:
    """*text* with our marked block holding *body*: replaced in place, or appended after a blank
    line. Idempotent."""
    begin, end = block_markers(name)
    block = f"{begin}\n{body.strip(chr(10))}\n{end}\n"
    span = _find_block(text, name)
    if span is not None:
        return text[:span[0]] + block + text[span[1]:]
    if not text.strip():
        return block
    return text.rstrip("\n") + "\n\n" + block


def remove_block(text: str, name: str = BLOCK_NAME) -> str:
    """*text* without our marked block (and the blank line that separated it)."""
    span = _find_block(text, name)
    if span is None:
        return text
    before, after = text[:span[0]], text[span[1]:]
    if before.endswith("\n\n") and (not after or after.startswith("\n")):
        before = before[:-1]  # the blank line that separated our block
    elif not before and after.startswith("\n"):
        after = after[1:]
    return before + after


__all__ = ["BLOCK_NAME", "ShapeError", "block_markers", "remove_block", "upsert_block"]
