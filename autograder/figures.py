"""The class report's plots, drawn with matplotlib and returned as PNG bytes.

Only matplotlib's object API is used (``Figure``, no ``pyplot``): no global state, no
window, nothing to close. Each function takes plain data and returns ``bytes``. No text is
ever read as math (``text.parse_math`` off while a figure is drawn): a student id such as
``$\\left($`` is drawn as it is written, never parsed (where it would raise).
"""
from __future__ import annotations

import functools
import io
import math
import statistics
import warnings

try:
    from matplotlib import rc_context
    from matplotlib.figure import Figure
except ImportError:                                   # the optional 'report' extra
    Figure = None

STATUS_COLOURS = {"passed": "#3a9b4a", "failed": "#f0a030", "error": "#d64541",
                  "blocked": "#9fb8d8", "skipped": "#b8b8b8"}


def available() -> bool:
    return Figure is not None


def _plain_text(draw):
    """Draw with mathtext off: every label, title and tick is plain text."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        with rc_context({"text.parse_math": False, "text.usetex": False}):
            return draw(*args, **kwargs)
    return drawn


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():         # a glyph the font lacks (an id in CJK) is drawn as a box
        warnings.filterwarnings("ignore", message="Glyph .* missing", category=UserWarning)
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight",
                    metadata={"Software": None})
    return buffer.getvalue()


@_plain_text
def score_distribution(percents: list[float]) -> bytes:
    """A histogram of the scores, as percent of the maximum, with mean and median."""
    fig = Figure(figsize=(7, 3.4))
    ax = fig.subplots()
    ax.hist(percents, bins=[5 * i for i in range(21)], color="#4a78b5", edgecolor="white")
    mean, median = statistics.fmean(percents), statistics.median(percents)
    ax.axvline(mean, color="#d64541", linestyle="--", label=f"mean {mean:.1f}")
    ax.axvline(median, color="#333333", linestyle=":", label=f"median {median:.1f}")
    ax.set(xlim=(0, 100), xlabel="score (% of the maximum)", ylabel="submissions",
           title=f"Score distribution ({len(percents)} submissions)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(frameon=False)
    return _png(fig)


@_plain_text
def check_outcomes(rows: list[tuple[str, dict[str, float]]]) -> bytes:
    """One stacked bar per check: the share of submissions passed, failed, in error, blocked
    (not graded: a check it requires failed) and skipped."""
    fig = Figure(figsize=(7, 0.32 * len(rows) + 1.2))
    ax = fig.subplots()
    names = [name for name, _ in rows]
    left = [0.0] * len(rows)
    for status, colour in STATUS_COLOURS.items():
        shares = [100 * shares.get(status, 0.0) for _, shares in rows]
        ax.barh(names, shares, left=left, color=colour, label=status, height=0.7)
        left = [a + b for a, b in zip(left, shares)]
    ax.invert_yaxis()
    ax.set(xlim=(0, 100), xlabel="% of submissions", title="Outcome per check (hardest first)")
    ax.legend(ncols=5, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.5 / max(len(rows), 1)),
              frameon=False)
    return _png(fig)


@_plain_text
def diagnosis_counts(counts: list[tuple[str, int]], total: int) -> bytes:
    """How many submissions each recognised mistake was found in, most frequent first."""
    fig = Figure(figsize=(7, 0.34 * max(len(counts), 1) + 1.2))
    ax = fig.subplots()
    if counts:
        codes = [code for code, _ in counts]
        ax.barh(codes, [n for _, n in counts], color="#8e5ea2", height=0.7)
        for y, (_, n) in enumerate(counts):
            ax.text(n, y, f" {n} ({100 * n / total:.0f}%)", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlim(0, max(n for _, n in counts) * 1.25)
    else:
        ax.text(0.5, 0.5, "no recognised mistake in any submission", ha="center", va="center")
        ax.set_axis_off()
    ax.set(xlabel="submissions", title="What the class got wrong (diagnosis codes)")
    return _png(fig)


@_plain_text
def points_lost(rows: list[tuple[str, float, int]], students: int) -> bytes:
    """One bar per part: the points the class lost there (summed over submissions), each
    labelled with the number of students who lost any; most points lost first."""
    fig = Figure(figsize=(7, 0.34 * max(len(rows), 1) + 1.2))
    ax = fig.subplots()
    if rows:
        ax.barh([name for name, _, _ in rows], [lost for _, lost, _ in rows], color="#c0504d",
                height=0.7)
        for y, (_, lost, n) in enumerate(rows):
            ax.text(lost, y, f" {lost:g} ({n} of {students} students)", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, max(lost for _, lost, _ in rows) * 1.35 or 1)
    else:
        ax.text(0.5, 0.5, "no points lost anywhere", ha="center", va="center")
        ax.set_axis_off()
    ax.set(xlabel="points lost, all submissions together", title="Where the points went (per part)")
    return _png(fig)


@_plain_text
def attention_grid(weights, title: str) -> bytes:
    """A heatmap per head: weights is (num_heads, n_q, n_k); all heads share one colour scale."""
    heads = len(weights)
    cols = min(heads, 4)
    rows = (heads + cols - 1) // cols
    fig = Figure(figsize=(2.3 * cols + 0.8, 2.3 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    values = [v for head in weights for row in head for v in row if math.isfinite(v)]
    low, top = min(values + [0.0]), max(values + [0.0])   # one shared scale, 0 included
    if top <= low:                                         # all zero (or nothing finite)
        top = low + 1.0
    for j, ax in enumerate(axes.flat):
        if j >= heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights[j], vmin=low, vmax=top, cmap="viridis")
        ax.set_title(f"head {j}", fontsize=9)
        ax.set_xlabel("key", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
        ax.tick_params(labelsize=7)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(title, fontsize=10)
    return _png(fig)
