"""What every writer calls a check's outcome: its status, or *blocked* where it was held back.

A check that was not graded because a check it requires did not pass (``blocked_by``) is
scored 0 like a failure, but the student did nothing wrong there yet: every writer and the
class report show it apart ("BLOCKED by split_heads.values"), never as FAIL.
"""
from __future__ import annotations

BLOCKED = "blocked"


def outcome(result) -> str:
    """"blocked", or the status's word ("passed", "failed", "error", "skipped")."""
    return BLOCKED if result.blocked_by else result.status.value


def blocked_label(result) -> str:
    """"BLOCKED by a, b": which checks must pass first; "" for a check that was graded."""
    return f"BLOCKED by {', '.join(result.blocked_by)}" if result.blocked_by else ""
