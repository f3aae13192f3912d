"""Text every output format can carry: no control characters, no terminal escapes.

Feedback quotes what a submission raised or printed, so it may hold anything. JSON could
escape it, but XML 1.0 cannot carry most control characters at all, and a terminal escape
in a web page or a CI log is noise at best. Every writer passes its strings through here.
"""
from __future__ import annotations

import re
import unicodedata

#: CSI sequences (colours, cursor moves), OSC sequences (titles, links), two-byte escapes
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def clean(text, limit: int | None = None) -> str:
    """Printable text: escapes and control characters removed, newlines and tabs kept.

    Other unprintable characters become a space (odd spaces, line separators) or U+FFFD
    (surrogates, unassigned code points), so nothing silently vanishes from a message.
    """
    text = _ESCAPES.sub("", str(text)).replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(ch if ch.isprintable() or ch in "\n\t" else _replacement(ch) for ch in text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"… ({len(text) - limit} more characters)"
    return text


def _replacement(ch: str) -> str:
    category = unicodedata.category(ch)
    if category == "Cc" or category == "Cf":     # controls, zero-width and bidi marks
        return ""
    if category in ("Zl", "Zp"):
        return "\n"
    if category == "Zs":
        return " "
    return "\ufffd"
