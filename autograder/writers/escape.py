"""Student text made inert for each kind of output: one helper per kind.

A student's id, file name, exception message or written answer may hold anything. Each
output that carries it passes it through the helper of its own kind:

- ``csv_cell``: a spreadsheet runs a cell that begins with ``= + - @`` (or a tab or a
  carriage return, or their full-width forms) as a formula, so such a cell gets a leading
  apostrophe, as OWASP's "CSV injection" advice says; numbers we write stay numbers.
- ``markdown``: one line of Markdown in which nothing is live: no link, image, HTML or
  emphasis, no bare URL that a GitHub-flavoured renderer would link. Characters are
  backslash-escaped (never turned into HTML entities, which a plain-text reader would see
  as ``-&gt;``); a line indented as code is quoted as code.
- ``html``: an allowlisting sanitiser (nh3, the Rust ``ammonia`` library) for HTML that a
  student wrote and that a page is meant to render (nbgrader's written answers); text
  that is only to be shown goes through ``html.escape`` instead.
- ``mathtext``: matplotlib reads ``$...$`` in a title as math (and ``$\\left($`` makes it
  raise); titles are drawn with ``parse_math=False`` and pass through here for characters
  no font can draw (a file name's undecodable bytes).
- ``readable``: text whose undecodable bytes (kept as surrogates by ``os.fsdecode``) are
  shown as U+FFFD, so that writing it as UTF-8 cannot fail.
"""
from __future__ import annotations

import re

#: What a spreadsheet may take for the start of a formula (ASCII and full-width forms).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
#: Markdown's punctuation that can start markup anywhere in a line.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>#!|~&$])")
#: What a GitHub-flavoured renderer links without any markup: scheme://, www.
_AUTOLINK = re.compile(r"(?i)\b(https?|ftp|file|mailto|javascript|data)(:)|\b(www)(\.)")
#: HTML a written answer may keep: text formatting, lists, tables, code, and images from
#: the answer's own attachments.
HTML_TAGS = {"a", "b", "i", "em", "strong", "code", "pre", "kbd", "samp", "var", "sub", "sup",
             "p", "br", "hr", "div", "span", "blockquote", "ul", "ol", "li", "dl", "dt", "dd",
             "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
             "img", "del", "ins", "s", "u", "details", "summary"}
HTML_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title", "width", "height"},
                   "td": {"colspan", "rowspan", "align"}, "th": {"colspan", "rowspan", "align"},
                   "ol": {"start"}}
HTML_SCHEMES = {"https", "http", "mailto", "attachment", "data"}   # data: images only


def readable(text) -> str:
    """``text`` with undecodable bytes (surrogates) as U+FFFD: always encodable as UTF-8."""
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:                      # a surrogate no file name holds
        return text.encode("utf-8", "replace").decode("utf-8")


def csv_cell(value):
    """A CSV cell no spreadsheet runs: text that could start a formula gets a leading
    apostrophe (shown as text, as typed); numbers are left as they are."""
    if not isinstance(value, str):
        return value
    value = readable(value)
    if value.lstrip(" ").startswith(FORMULA_STARTS):
        return "'" + value
    return value


def markdown(text) -> str:
    """One line of inert Markdown: every markup character backslash-escaped, bare URLs
    broken, line breaks kept as ``<br>`` (ours), lines indented as code quoted as code."""
    lines = readable(text).replace("\r", "").split("\n")
    out = []
    for line in lines:
        if line.startswith("    ") and line.strip():
            out.append(code_span(line.strip()))
        elif line.strip():
            out.append(_escape_line(" ".join(line.split())))
    return "<br>".join(out)


def _escape_line(line: str) -> str:
    line = _MARKDOWN.sub(r"\\\1", line)
    return _AUTOLINK.sub(lambda m: (m.group(1) or m.group(3)) + "\\" + (m.group(2) or m.group(4)),
                         line)


def code_span(text: str) -> str:
    """Text shown as code: inside backticks nothing is live (a pipe still needs its
    backslash in a table cell, and GitHub shows it as a pipe)."""
    text = " ".join(readable(text).split()).replace("|", "\\|")
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or run else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html(fragment: str) -> str:
    """HTML a student wrote, with only the allowlisted tags and attributes left: no script,
    no event handler, no style, no link or image to another site's scripts."""
    import nh3
    return nh3.clean(readable(fragment), tags=HTML_TAGS, attributes=HTML_ATTRIBUTES,
                     url_schemes=HTML_SCHEMES, link_rel="noopener noreferrer nofollow",
                     strip_comments=True, attribute_filter=_local_images)


def written_answer(source: str, attachments=None) -> str:
    """A student's Markdown cell, safe for nbconvert to render (formgrader, the feedback):
    unchanged where its rendering holds only allowlisted HTML; else that rendering,
    sanitised, as one HTML block (no blank line, so no Markdown is read inside it again).
    The rendering is nbconvert's own, which passes raw HTML and ``javascript:`` links."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
    renderer = IPythonRenderer(escape=False, attachments=attachments or {},
                               exclude_anchor_links=True)      # as HTMLExporter renders
    rendered = MarkdownWithMath(renderer=renderer).render(readable(source))
    cleaned = html(rendered)
    if not _markup(rendered) - _markup(cleaned):
        return source
    return "<div>\n" + re.sub(r"\n\s*\n", "\n", cleaned).strip() + "\n</div>\n"


def _markup(fragment: str) -> set:
    """(tag, attribute, value) of every element of an HTML fragment (``rel`` left out: the
    sanitiser adds it), to see what sanitising removed."""
    from html.parser import HTMLParser
    found: set = set()

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.add((tag, "", ""))
            found.update((tag, k, v or "") for k, v in attrs if k != "rel")
    Collect(convert_charrefs=True).feed(fragment)
    return found


def _local_images(element: str, attribute: str, value: str):
    """An image only from the notebook itself (an attachment, inline data, a file beside
    it): one from another site would tell it who looks at the answer, and when. Inline
    data only as an image's source (a browser runs no script in an <img>)."""
    value_lower = value.strip().lower()
    if element == "img" and attribute == "src" and re.match(r"(?i)\s*([a-z][a-z0-9+.-]*:|//)",
                                                           value):
        return value if value_lower.startswith(("attachment:", "data:image/")) else None
    if value_lower.startswith("data:"):
        return None
    return value


def mathtext(text) -> str:
    """A figure's text: drawable characters only; draw it with ``parse_math=False``."""
    return "".join(ch if ch.isprintable() else " " for ch in readable(text))
