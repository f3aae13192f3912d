"""The class report's plots, drawn with matplotlib and returned as PNG bytes.

Only matplotlib's object API is used (``Figure``, no ``pyplot``): no global state, no
window, nothing to close. Each function takes plain data and returns ``bytes``.
"""
from __future__ import annotations

import io
import statistics

try:
    from matplotlib.figure import Figure
except ImportError:                                   # the optional 'report' extra
    Figure = None

STATUS_COLOURS = {"passed": "#3a9b4a", "failed": "#f0a030", "error": "#d64541",
                  "blocked": "#9fb8d8", "skipped": "#b8b8b8"}


def available() -> bool:
    return Figure is not None


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight",
                metadata={"Software": None})
    return buffer.getvalue()


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


def attention_grid(weights, title: str) -> bytes:
    """A heatmap per head: weights is (num_heads, n_q, n_k); all heads share one colour scale."""
    heads = len(weights)
    cols = min(heads, 4)
    rows = (heads + cols - 1) // cols
    fig = Figure(figsize=(2.3 * cols + 0.8, 2.3 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    top = max(max(max(row) for row in head) for head in weights) or 1.0   # one shared scale
    for j, ax in enumerate(axes.flat):
        if j >= heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights[j], vmin=0.0, vmax=top, cmap="viridis")
        ax.set_title(f"head {j}", fontsize=9)
        ax.set_xlabel("key", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
        ax.tick_params(labelsize=7)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(title, fontsize=10)
    return _png(fig)
