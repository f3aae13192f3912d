"""The demo's example submissions, kept as patches of the reference so that they follow it.

Each example is the reference solution (``solutions/mha.py``) with a few ``(old, new)``
replacements, its solution markers taken out and its docstring saying what it is;
:func:`write` makes the file when the demo grades it. :func:`patch` is the one patch engine
of the project: the tests' fixtures (``tests/mistakes.py``, ``tests/structure_fixtures.py``,
``tests/fair_fixtures.py``) use it too. Every old text must occur exactly once where it is
applied, so a patch that no longer fits the reference fails loudly instead of silently
changing nothing (or too much).
"""
from __future__ import annotations

import re
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent.parent / "solutions" / "mha.py"
_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION\n", re.M)
_DOCSTRING = re.compile(r'\A""".*?"""\n', re.S)


class PatchError(AssertionError):
    """A patch's old text is not in the text exactly once (the reference changed under it)."""


def patch(name: str, text: str, replacements) -> str:
    """``text`` with each ``(old, new)`` applied in turn; each old text must occur exactly once
    in the text as the earlier replacements left it, or :class:`PatchError` names ``name``."""
    for old, new in replacements:
        found = text.count(old)
        if found != 1:
            raise PatchError(f"{name}: the reference (solutions/mha.py) contains {old!r} "
                             f"{found} times, not once: update the patch to the reference's "
                             f"text (or make the old text long enough to be unique)")
        text = text.replace(old, new)
    return text


def with_docstring(text: str, docstring: str) -> str:
    """``text`` with its module docstring (the first thing in it) replaced by ``docstring``."""
    if not _DOCSTRING.match(text):
        raise PatchError("the reference (solutions/mha.py) no longer starts with a docstring")
    return _DOCSTRING.sub(lambda _: f'"""{docstring}"""\n', text, count=1)


#: name (the file is ``<name>.py``) -> (what it is, [(old, new), ...] on the reference's text)
EXAMPLES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "split_no_transpose": ("split_heads reshapes without the transpose (a layout mistake).", [
        ("    X = X.reshape(*X.shape[:-1], num_heads, p)                # (batch, n, num_heads, p)\n"
         "    return X.transpose(-3, -2)                                # (batch, num_heads, n, p)\n",
         "    return X.reshape(X.shape[0], num_heads, X.shape[1], p)\n"),
    ]),
    "d2l_masked_softmax": ("masked_softmax in the style of D2L: a -1e6 fill written into the "
                           "caller's scores.", [
        ("    lowest = torch.finfo(scores.dtype).min\n"
         "    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)\n"
         "    # Masked keys get exactly 0; rows with no valid key (uniform so far) become all zero.\n"
         "    return weights.masked_fill(~keep, 0.0)\n",
         "    X = scores.reshape(-1, n_k)\n"
         "    X[~keep.expand(scores.shape).reshape(-1, n_k)] = -1e6\n"
         "    return torch.softmax(scores, dim=-1)\n"),
    ]),
    "shared_heads": ("every head uses one head's projections (one set of W_q, W_k, W_v shared "
                     "by all heads).", [
        ("        self.W_q = nn.Linear(d_model, d_total, bias=bias)\n"
         "        self.W_k = nn.Linear(d_model, d_total, bias=bias)\n"
         "        self.W_v = nn.Linear(d_model, d_total, bias=bias)\n",
         "        self.W_q = nn.Linear(d_model, self.head_dim, bias=bias)\n"
         "        self.W_k = nn.Linear(d_model, self.head_dim, bias=bias)\n"
         "        self.W_v = nn.Linear(d_model, self.head_dim, bias=bias)\n"),
        ("        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)\n"
         "        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)\n"
         "        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)\n",
         "        M = self.num_heads\n"
         "        Q = split_heads(self.W_q(queries).repeat(1, 1, M), M)  # one head, M times\n"
         "        K = split_heads(self.W_k(keys).repeat(1, 1, M), M)\n"
         "        V = split_heads(self.W_v(values).repeat(1, 1, M), M)\n"),
    ]),
    "syntax_error": ("a missing colon: Python cannot import the file at all.", [
        ("def concat_heads(X: Tensor) -> Tensor:\n", "def concat_heads(X: Tensor) -> Tensor\n"),
    ]),
}


def source(name: str) -> str:
    """The example's text: the reference patched, without solution markers, its docstring
    ``Example submission: <what it is>``."""
    description, replacements = EXAMPLES[name]
    text = patch(f"example {name} (autograder/examples.py)", REFERENCE.read_text(encoding="utf-8"),
                 replacements)
    return with_docstring(_MARKER.sub("", text), f"Example submission: {description}")


def write(name: str, folder: Path) -> Path:
    """Write the example as ``folder/<name>.py`` and return its path."""
    path = Path(folder) / f"{name}.py"
    path.write_text(source(name), encoding="utf-8")
    return path
