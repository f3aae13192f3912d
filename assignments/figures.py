"""The notebook's figures, drawn with matplotlib from this code (no picture without its source).

* ``block_diagram()`` and ``split_diagram()``: the two fixed figures; ``assignments.build``
  embeds them in the notebook as SVG attachments of their markdown cells, so they show in
  the released notebook before anything runs;
* ``show_heads(MultiHeadAttention)``: the helper the notebook defines in a locked cell (its
  source is copied there verbatim): it draws the student's own per-head attention maps above
  those of the same module whose heads all share head 0's projection matrices.

Only matplotlib's object API is used (``Figure``, no ``pyplot``): no global state, no window.
"""
from __future__ import annotations

import io

HEAD_COLOURS = ("#4a78b5", "#d9822b", "#3a9b4a", "#8e5ea2", "#c44e52", "#8c8c3a")


def _svg(fig) -> str:
    """SVG text; glyphs as paths, so it looks the same in every browser and in Jupyter."""
    from matplotlib import rc_context
    buffer = io.StringIO()
    with rc_context({"svg.fonttype": "path", "svg.hashsalt": "mha-notebook"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    return buffer.getvalue()


def _box(ax, x, y, w, h, text, colour="#eef2f8", edge="#4a5a70", size=9, weight="normal"):
    from matplotlib.patches import FancyBboxPatch
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=colour, edgecolor=edge, linewidth=1.1))
    ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight)


def _arrow(ax, start, end, colour="#4a5a70", width=1.0):
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="-|>", color=colour, linewidth=width, shrinkA=0, shrinkB=0))


def block_diagram() -> str:
    """Figure 1: queries, keys and values go through every head's own projections and its
    attention pooling; the heads' outputs are concatenated and projected by W_o."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10, 4.6))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set(xlim=(0, 10), ylim=(0, 4.6))
    ax.set_axis_off()
    inputs = {"queries": 3.6, "keys": 2.3, "values": 1.0}
    for name, y in inputs.items():
        _box(ax, 0.8, y, 1.2, 0.55, f"{name}\n(n × d)", colour="#f4f4f4")
    heads = [("head 1", 3.7, 0), ("head 2", 2.55, 1), ("head M", 0.75, 2)]
    for label, y, k in heads:
        colour = HEAD_COLOURS[k]
        j = label.split()[1]
        for name, yi in inputs.items():
            _arrow(ax, (1.42, yi), (2.55, y), colour="#9aa5b5", width=0.7)
        _box(ax, 3.35, y, 1.55, 0.8, f"{label}: its own\nW_q, W_k, W_v\n(each d × p)",
             colour="#ffffff", edge=colour, size=8.5)
        _arrow(ax, (4.13, y), (4.7, y), colour=colour)
        _box(ax, 5.5, y, 1.55, 0.8, "attention pooling f\nsoftmax(QKᵀ/√p) V",
             colour="#ffffff", edge=colour, size=8.5)
        _arrow(ax, (6.28, y), (6.75, 2.3 + (y - 2.3) * 0.25), colour=colour)
        ax.text(6.28, y + 0.44, f"output h{ {'1': '₁', '2': '₂'}.get(j, '_M') } (n × p)",
                fontsize=8, color=colour, ha="right", va="bottom")
    ax.text(3.35, 1.72, "⋮", fontsize=16, ha="center", va="center", color="#4a5a70")
    ax.text(5.5, 1.72, "⋮", fontsize=16, ha="center", va="center", color="#4a5a70")
    _box(ax, 7.35, 2.3, 1.15, 0.9, "concat\n[h₁ | … | h_M]\n(n × M·p)", colour="#eef2f8", size=8.5)
    _arrow(ax, (7.93, 2.3), (8.3, 2.3))
    _box(ax, 8.75, 2.3, 0.85, 0.7, "W_o\n(M·p × d)", colour="#eef2f8", size=8.5)
    _arrow(ax, (9.18, 2.3), (9.45, 2.3))
    ax.text(9.5, 2.3, "output\n(n × d)", fontsize=8.5, ha="left", va="center")
    ax.text(5, 0.12, "M heads run side by side on the same input; with p = d_total / M they "
            "hold as many parameters as one head of width d_total.",
            ha="center", va="bottom", fontsize=8.5, style="italic", color="#333333")
    return _svg(fig)


def split_diagram(n: int = 3, heads: int = 3, p: int = 2) -> str:
    """Figure 2: split_heads on one batch element: (n, M·p) becomes M matrices (n, p);
    head j takes columns [jp, (j+1)p) of every row. The numbers follow each entry."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    cell = 0.42
    width = heads * p * cell
    fig = Figure(figsize=(10, 2.9))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set(xlim=(0, 10), ylim=(0, 2.9))
    ax.set_aspect("equal")
    ax.set_axis_off()
    top = 2.15

    def grid(x0, rows, cols, value, colour, title):
        for r in range(rows):
            for c in range(cols):
                ax.add_patch(Rectangle((x0 + c * cell, top - (r + 1) * cell), cell, cell,
                                       facecolor=colour(c), edgecolor="white", linewidth=1.5))
                ax.text(x0 + (c + 0.5) * cell, top - (r + 0.5) * cell, str(value(r, c)),
                        ha="center", va="center", fontsize=8.5, color="white", weight="bold")
        ax.text(x0 + cols * cell / 2, top + 0.18, title, ha="center", va="bottom", fontsize=8.5)

    def tint(j):
        return HEAD_COLOURS[j % len(HEAD_COLOURS)]

    x0 = 0.75
    grid(x0, n, heads * p, lambda r, c: r * heads * p + c, lambda c: tint(c // p),
         f"X[0]: (n, M·p) = ({n}, {heads * p})")
    for r in range(n):
        ax.text(x0 - 0.08, top - (r + 0.5) * cell, f"pos {r}", ha="right", va="center", fontsize=7)
    _arrow(ax, (x0 + width + 0.2, top - n * cell / 2), (x0 + width + 1.1, top - n * cell / 2))
    ax.text(x0 + width + 0.65, top - n * cell / 2 + 0.12, "split_heads", ha="center",
            va="bottom", fontsize=8.5)
    ax.text(x0 + width + 0.65, top - n * cell / 2 - 0.12, "reshape (n, M, p),\nthen transpose",
            ha="center", va="top", fontsize=7)
    start = x0 + width + 1.35
    for j in range(heads):
        xj = start + j * (p * cell + 0.35)
        grid(xj, n, p, lambda r, c, j=j: r * heads * p + j * p + c, lambda c, j=j: tint(j),
             f"head {j}: ({n}, {p})")
    ax.text(5, 0.25, f"(batch, n, M·p) → (batch, M, n, p): here batch 1, n = {n} positions, "
            f"M = {heads} heads, p = {p}. Each head keeps every position, and only its own columns.",
            ha="center", va="bottom", fontsize=8.5, style="italic", color="#333333")
    return _svg(fig)


def show_heads(MultiHeadAttention, d_model=16, num_heads=4, n=8, seed=0):
    """Draw your module's attention weights, one map per head (top row), above those of the
    same module once every head uses head 0's W_q, W_k, W_v (bottom row): distinct
    projections give distinct maps; one shared set gives M identical maps. Returns the
    matplotlib Figure, or None (with a message) if it cannot be drawn yet."""
    import io as _io

    import torch
    try:
        from matplotlib.figure import Figure
    except ImportError:
        print("show_heads needs matplotlib (pip install matplotlib); run this cell again then")
        return None
    torch.manual_seed(seed)
    x = torch.randn(1, n, d_model)
    try:
        model = MultiHeadAttention(d_model, num_heads)
        model.eval()
        with torch.no_grad():
            model(x, x, x)
            own = model.attention_weights[0].detach().double().clone()
            p = model.W_q.weight.shape[0] // num_heads
            for layer in (model.W_q, model.W_k, model.W_v):   # every head block := head 0's
                layer.weight.copy_(layer.weight[:p].repeat(num_heads, 1))
                if layer.bias is not None:
                    layer.bias.copy_(layer.bias[:p].repeat(num_heads))
            model(x, x, x)
            shared = model.attention_weights[0].detach().double().clone()
        if tuple(own.shape) != (num_heads, n, n):
            raise ValueError(f"attention_weights[0] has shape {tuple(own.shape)}, expected "
                             f"(num_heads, n_q, n_k) = ({num_heads}, {n}, {n})")
    except Exception as error:                       # the student's module is not done yet
        print(f"show_heads: your MultiHeadAttention cannot be drawn yet: "
              f"{type(error).__name__}: {error}")
        return None
    fig = Figure(figsize=(2.1 * num_heads + 1.2, 4.9), layout="constrained")
    axes = fig.subplots(2, num_heads, squeeze=False)
    top = max(float(own.max()), float(shared.max())) or 1.0
    rows = ((own, "your module"), (shared, "one shared set"))
    image = None
    for row, (maps, label) in enumerate(rows):
        for j in range(num_heads):
            ax = axes[row][j]
            image = ax.imshow(maps[j].tolist(), vmin=0.0, vmax=top, cmap="viridis")
            ax.set_title(f"{label}: head {j}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel("query", fontsize=8)
            if row == 1:
                ax.set_xlabel("key", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    differ = max(float((own[j] - own[0]).abs().max()) for j in range(num_heads))
    fig.suptitle(f"Self-attention of {n} random tokens, d_model={d_model}, num_heads={num_heads}. "
                 f"Largest difference from head 0: yours {differ:.3f}, shared "
                 f"{max(float((shared[j] - shared[0]).abs().max()) for j in range(num_heads)):.3f}",
                 fontsize=9)
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
        if get_ipython() is not None:
            buffer = _io.BytesIO()
            fig.savefig(buffer, format="png", dpi=80)
            display(Image(data=buffer.getvalue(), format="png"))
    except ImportError:
        pass
    return fig
