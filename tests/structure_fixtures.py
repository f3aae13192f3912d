"""The structure fixtures of test_structure.py: the reference with one change each, kept as
patches on solutions/mha.py's text (as mistakes.py does) so that they follow the reference.

PATCHES maps a fixture's name to (what the change is, [(old, new), ...]); each old text must
occur exactly once in the reference (``autograder.examples.patch``, the project's one patch
engine). ``write(name, folder)`` writes the patched module.
"""
from __future__ import annotations

from pathlib import Path

from autograder.examples import REFERENCE, patch, with_docstring

PATCHES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    'broadcast_scores': ('CORRECT values, scores as a broadcast product summed over p: it materialises (batch, M, n_q, n_k, p), fine on CPU, too big on a GPU.', [
        ("""        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)
        weights = masked_softmax(scores, valid_lens)""",
         """        scores = (Q.unsqueeze(-2) * K.unsqueeze(-3)).sum(-1) / math.sqrt(self.head_dim)
        weights = masked_softmax(scores, valid_lens)          # (batch, M, n_q, n_k)"""),
    ]),
    'correct_chunk_stack': ('CORRECT: heads split with chunk/stack and joined with unbind/cat.', [
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        M = self.num_heads
        Q = torch.stack(self.W_q(queries).chunk(M, dim=-1), dim=1)  # (batch, M, n_q, p)
        K = torch.stack(self.W_k(keys).chunk(M, dim=-1), dim=1)     # (batch, M, n_k, p)
        V = torch.stack(self.W_v(values).chunk(M, dim=-1), dim=1)   # (batch, M, n_k, p)"""),
        ("""        return self.W_o(concat_heads(heads))                  # (batch, n_q, d_model)""",
         """        return self.W_o(torch.cat(heads.unbind(1), dim=-1))   # (batch, n_q, d_model)"""),
    ]),
    'correct_einsum_where': ('CORRECT: einsum for every product, torch.where for the mask.', [
        ("""    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)""",
         """    weights = torch.softmax(torch.where(keep, scores, lowest), dim=-1)
    return torch.where(keep, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))"""),
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)""",
         """        def proj(layer, X):                                   # X W^T (+ b) with einsum
            Y = torch.einsum("bnd,ed->bne", X, layer.weight)
            return Y if layer.bias is None else Y + layer.bias
        Q = split_heads(proj(self.W_q, queries), self.num_heads)  # (batch, M, n_q, p)
        K = split_heads(proj(self.W_k, keys), self.num_heads)     # (batch, M, n_k, p)
        V = split_heads(proj(self.W_v, values), self.num_heads)   # (batch, M, n_k, p)
        scores = torch.einsum("bhqp,bhkp->bhqk", Q, K) / math.sqrt(self.head_dim)"""),
        ("""        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)""",
         """        heads = torch.einsum("bhqk,bhkp->bhqp", self.dropout(weights), V)"""),
    ]),
    'cpu_ones_mask': ('The key positions come from torch.ones(n_k).cumsum, created on the CPU.', [
        ("""    keys = torch.arange(n_k, device=scores.device)            # (n_k,)""",
         """    keys = torch.ones(n_k, dtype=torch.long).cumsum(0) - 1       # (n_k,), on the CPU"""),
    ]),
    'extra_param_per_head': ('An unused per-head (d_model, d_total) parameter: the count grows with M.', [
        ("""        self.W_v = nn.Linear(d_model, d_total, bias=bias)""",
         """        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        self.head_mixers = nn.Parameter(torch.zeros(num_heads, d_model, d_total))"""),
    ]),
    'fill_minus_1e5': ("The mask fill is -1e5, beyond float16's range (65504).", [
        ("""    lowest = torch.finfo(scores.dtype).min
    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)""",
         """    weights = torch.softmax(scores.masked_fill(~keep, -1e5), dim=-1)"""),
    ]),
    'host_sync_guard': ('masked_softmax skips the mask when no length is short: a Python branch.', [
        ("""    n_q, n_k = scores.shape[-2:]""",
         """    n_q, n_k = scores.shape[-2:]
    if int(torch.as_tensor(valid_lens).min()) >= n_k:        # nothing to mask
        return torch.softmax(scores, dim=-1)"""),
    ]),
    'tied_at_first_forward': ("The first forward in training mode (training from scratch starts so) first copies head 0's block of W_q/W_k/W_v into every head: from then on the heads are one head.", [
        ("""        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION""",
         """        self.dropout = nn.Dropout(dropout)
        self.first = True
        ### END SOLUTION"""),
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)""",
         """        if self.first and self.training:                      # once, the first training step
            self.first = False
            with torch.no_grad():
                for layer in (self.W_q, self.W_k, self.W_v):
                    layer.weight.copy_(layer.weight[:self.head_dim].repeat(self.num_heads, 1))
        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)"""),
    ]),
    'correct_rescaled_at_first_forward': ("CORRECT: the first forward in training mode rescales W_q/W_k/W_v as a whole (a lazy initialisation): the heads stay distinct.", [
        ("""        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION""",
         """        self.dropout = nn.Dropout(dropout)
        self.first = True
        ### END SOLUTION"""),
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)""",
         """        if self.first and self.training:                      # once, the first training step
            self.first = False
            with torch.no_grad():
                for layer in (self.W_q, self.W_k, self.W_v):
                    layer.weight.mul_(0.5)
        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)"""),
    ]),
    'identical_init_copy': ('Every head block of W_q/W_k/W_v is overwritten with block 0 at init.', [
        ("""        self.W_v = nn.Linear(d_model, d_total, bias=bias)""",
         """        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        with torch.no_grad():
            for layer in (self.W_q, self.W_k, self.W_v):
                layer.weight.copy_(layer.weight[:self.head_dim].repeat(num_heads, 1))"""),
    ]),
    'loop_correct': ('CORRECT values, but the heads are pooled one at a time in a Python loop.', [
        ("""        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)
        weights = masked_softmax(scores, valid_lens)""",
         """        outs, ws = [], []
        for j in range(self.num_heads):                       # one head at a time
            scores = Q[:, j] @ K[:, j].transpose(-2, -1) / math.sqrt(self.head_dim)
            w = masked_softmax(scores, valid_lens)            # (batch, n_q, n_k)
            ws.append(w)
            outs.append(self.dropout(w) @ V[:, j])            # (batch, n_q, p)
        weights = torch.stack(ws, dim=1)                      # (batch, M, n_q, n_k)"""),
        ("""        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)""",
         """        heads = torch.stack(outs, dim=1)                      # (batch, M, n_q, p)"""),
    ]),
    'qk_aliased': ('W_k is assigned the same layer as W_q.', [
        ("""        self.W_k = nn.Linear(d_model, d_total, bias=bias)""",
         '''        self.W_k = self.W_q                                    # "saves parameters"'''),
    ]),
    'sdpa_in_forward': ('forward pools with F.scaled_dot_product_attention (weights by hand).', [
        ("""        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)""",
         """        heads = nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=weights > 0)
        heads = torch.nan_to_num(heads) * (weights.sum(-1, keepdim=True) > 0)"""),
    ]),
    'sdpa_key_mask': ('forward pools with F.scaled_dot_product_attention and a key mask of its own.', [
        ("""        heads = self.dropout(weights) @ V                     # (batch, M, n_q, p)""",
         """        if valid_lens is None:
            keys_kept = None
        else:
            lens = valid_lens.reshape(valid_lens.shape[0], 1, -1, 1)
            keys_kept = torch.arange(K.shape[-2], device=K.device) < lens   # (batch, 1, 1|n_q, n_k)
        heads = nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=keys_kept)"""),
    ]),
    'shared_einsum_block': ("Contract-shaped layers, but einsum with head 0's block for every head.", [
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        p, M = self.head_dim, self.num_heads

        def block0(layer, X):
            W = layer.weight[:p].T                                # (d_model, p): head 0's block
            Y = torch.einsum("bnd,dp->bnp", X, W)
            if layer.bias is not None:
                Y = Y + layer.bias[:p]
            return Y.unsqueeze(1).expand(-1, M, -1, -1)           # (batch, M, n, p)
        Q, K, V = block0(self.W_q, queries), block0(self.W_k, keys), block0(self.W_v, values)"""),
    ]),
    'shared_expand': ("One head's (d_model, p) projections, expanded (broadcast) to every head.", [
        ("""        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)""",
         """        p = d_total // num_heads
        self.W_q = nn.Linear(d_model, p, bias=bias)             # one head's width
        self.W_k = nn.Linear(d_model, p, bias=bias)
        self.W_v = nn.Linear(d_model, p, bias=bias)"""),
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        M = self.num_heads
        Q = self.W_q(queries).unsqueeze(1).expand(-1, M, -1, -1)   # (batch, M, n_q, p), shared
        K = self.W_k(keys).unsqueeze(1).expand(-1, M, -1, -1)      # (batch, M, n_k, p)
        V = self.W_v(values).unsqueeze(1).expand(-1, M, -1, -1)    # (batch, M, n_k, p)"""),
    ]),
    'shared_mean_block': ('Every head uses the MEAN of the head blocks (all blocks get a gradient).', [
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        p, M = self.head_dim, self.num_heads

        def mean_block(layer, X):
            W = layer.weight.view(M, p, -1).mean(0).repeat(M, 1)  # (M*p, d): one averaged block
            b = None if layer.bias is None else layer.bias.view(M, p).mean(0).repeat(M)
            return split_heads(nn.functional.linear(X, W, b), M)
        Q, K, V = mean_block(self.W_q, queries), mean_block(self.W_k, keys), mean_block(self.W_v, values)"""),
    ]),
    'shared_modulelist': ('A ModuleList of ONE Linear repeated M times ([layer] * M), one per head.', [
        ("""        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)""",
         """        p = d_total // num_heads
        self.q_heads = nn.ModuleList([nn.Linear(d_model, p, bias=bias)] * num_heads)
        self.k_heads = nn.ModuleList([nn.Linear(d_model, p, bias=bias)] * num_heads)
        self.v_heads = nn.ModuleList([nn.Linear(d_model, p, bias=bias)] * num_heads)
        self.W_q, self.W_k, self.W_v = self.q_heads[0], self.k_heads[0], self.v_heads[0]"""),
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        Q = torch.stack([layer(queries) for layer in self.q_heads], dim=1)  # (batch, M, n_q, p)
        K = torch.stack([layer(keys) for layer in self.k_heads], dim=1)     # (batch, M, n_k, p)
        V = torch.stack([layer(values) for layer in self.v_heads], dim=1)   # (batch, M, n_k, p)"""),
    ]),
    'shared_param': ("The contract's layers exist, but every head uses one (d_model, p) nn.Parameter.", [
        ("""        self.W_v = nn.Linear(d_model, d_total, bias=bias)""",
         """        self.W_v = nn.Linear(d_model, d_total, bias=bias)
        p = d_total // num_heads
        self.Wq_head = nn.Parameter(torch.randn(d_model, p) / math.sqrt(d_model))
        self.Wk_head = nn.Parameter(torch.randn(d_model, p) / math.sqrt(d_model))
        self.Wv_head = nn.Parameter(torch.randn(d_model, p) / math.sqrt(d_model))"""),
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        M = self.num_heads
        Q = project(queries, self.Wq_head).unsqueeze(1).repeat(1, M, 1, 1)   # (batch, M, n_q, p)
        K = project(keys, self.Wk_head).unsqueeze(1).repeat(1, M, 1, 1)      # (batch, M, n_k, p)
        V = project(values, self.Wv_head).unsqueeze(1).repeat(1, M, 1, 1)    # (batch, M, n_k, p)"""),
    ]),
    'shared_project_heads': ("project_heads with head 0's block expanded to (M, d_model, p).", [
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        p, M = self.head_dim, self.num_heads

        def heads_of(layer, X):
            blocks = layer.weight.view(M, p, -1)[:1].expand(M, -1, -1)  # (M, p, d): block 0
            Y = project_heads(X, blocks.transpose(1, 2))             # (batch, M, n, p)
            if layer.bias is not None:
                Y = Y + layer.bias.view(M, 1, p)[:1]
            return Y
        Q, K, V = heads_of(self.W_q, queries), heads_of(self.W_k, keys), heads_of(self.W_v, values)"""),
    ]),
    'shared_tied': ("Per-head Linear layers whose weights are tied to head 0's by assigning .weight.", [
        ("""        self.W_q = nn.Linear(d_model, d_total, bias=bias)
        self.W_k = nn.Linear(d_model, d_total, bias=bias)
        self.W_v = nn.Linear(d_model, d_total, bias=bias)""",
         """        p = d_total // num_heads

        def tied():
            layers = [nn.Linear(d_model, p, bias=bias) for _ in range(num_heads)]
            for layer in layers[1:]:
                layer.weight = layers[0].weight                 # tie to head 0
                if bias:
                    layer.bias = layers[0].bias
            return nn.ModuleList(layers)
        self.q_heads, self.k_heads, self.v_heads = tied(), tied(), tied()
        self.W_q, self.W_k, self.W_v = self.q_heads[0], self.k_heads[0], self.v_heads[0]"""),
        ("""        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        def project_all(layers, X):                           # one matmul for all heads
            W = torch.cat([layer.weight for layer in layers])     # (M*p, d_model)
            b = None if layers[0].bias is None else torch.cat([layer.bias for layer in layers])
            return split_heads(nn.functional.linear(X, W, b), self.num_heads)
        Q = project_all(self.q_heads, queries)                # (batch, M, n_q, p)
        K = project_all(self.k_heads, keys)                   # (batch, M, n_k, p)
        V = project_all(self.v_heads, values)                 # (batch, M, n_k, p)"""),
    ]),
    'softmax_dtype_float32': ('softmax(..., dtype=torch.float32) for stability, cast back.', [
        ("""    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)""",
         """    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1,
                            dtype=torch.float32).to(scores.dtype)"""),
    ]),
    'unused_query_blocks': ("Every head's queries come from W_q's first block; K and V are per head.", [
        ("""        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)""",
         """        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)
        Q = Q[:, :1].expand_as(Q)                             # head 0's queries for all"""),
    ]),
}


def source(name: str) -> str:
    """The reference's text with the fixture's replacements, its docstring saying what changed."""
    return patched(name, *PATCHES[name])


def patched(name: str, description: str, replacements) -> str:
    """The reference's text with these replacements, its docstring the description."""
    text = patch(f"fixture {name}", REFERENCE.read_text(), replacements)
    return with_docstring(text, f"{description}\n\n"
                                "The reference solution (solutions/mha.py) with this one change.")


def write(name: str, folder: Path) -> Path:
    path = folder / f"{name}.py"
    path.write_text(source(name))
    return path
