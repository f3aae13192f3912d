"""Our own buggy submissions: the reference with one mistake, one per TAXONOMY code that the
value checks diagnose. Written from the catalogue's ideas, differently from its examples."""
from __future__ import annotations

import re
from pathlib import Path

from autograder.examples import REFERENCE, patch

SPLIT_OK = """    X = X.reshape(*X.shape[:-1], num_heads, p)                # (batch, n, num_heads, p)
    return X.transpose(-3, -2)                                # (batch, num_heads, n, p)"""
CONCAT_OK = """    X = X.transpose(-3, -2)                                   # (batch, n, num_heads, p)
    # reshape, not view: after the transpose the memory is not contiguous.
    return X.reshape(*X.shape[:-2], num_heads * p)            # (batch, n, num_heads*p)"""
FILL_OK = """    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)
    # Masked keys get exactly 0; rows with no valid key (uniform so far) become all zero.
    return weights.masked_fill(~keep, 0.0)"""
FORWARD_QKV = """        Q = split_heads(self.W_q(queries), self.num_heads)    # (batch, M, n_q, p)
        K = split_heads(self.W_k(keys), self.num_heads)       # (batch, M, n_k, p)
        V = split_heads(self.W_v(values), self.num_heads)     # (batch, M, n_k, p)"""
POOL_SCORES = "    scores = Q @ K.transpose(-2, -1) / math.sqrt(p)           # (..., n_q, n_k)"
FWD_SCORES = "        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.head_dim)  # (batch, M, n_q, n_k)"
FWD_OUT = "        return self.W_o(concat_heads(heads))                  # (batch, n_q, d_model)"

#: code (or code/variant, one more way to write it) -> the patches that make it
MISTAKES: dict[str, list[tuple[str, str]]] = {
    "split.no-transpose": [(SPLIT_OK, "    return X.reshape(X.shape[0], num_heads, X.shape[1], p)")],
    "split.wrong-head-order": [(SPLIT_OK, "    return torch.stack([X[..., j::num_heads] for j in "
                                          "range(num_heads)], dim=1)")],
    "concat.no-transpose": [(CONCAT_OK, "    return X.reshape(X.shape[0], n, num_heads * p)")],
    "concat.view-noncontiguous": [(CONCAT_OK, "    return X.permute(0, 2, 1, 3).view(X.shape[0], n, -1)")],
    "proj.heads-no-permute": [("    return H.unsqueeze(-3) @ W_heads                          # (batch, num_heads, n, p)",
                               "    fused = H @ torch.cat(list(W_heads), dim=-1)\n"
                               "    return fused.view(H.shape[0], W_heads.shape[0], H.shape[1], -1)")],
    "proj.transposed-weight": [(FORWARD_QKV,
                                "        b = lambda l: 0 if l.bias is None else l.bias\n"
                                "        Q = split_heads(queries @ self.W_q.weight + b(self.W_q), self.num_heads)\n"
                                "        K = split_heads(keys @ self.W_k.weight + b(self.W_k), self.num_heads)\n"
                                "        V = split_heads(values @ self.W_v.weight + b(self.W_v), self.num_heads)")],
    "proj.ignores-bias": [(FORWARD_QKV,
                           "        Q = split_heads(torch.nn.functional.linear(queries, self.W_q.weight), self.num_heads)\n"
                           "        K = split_heads(torch.nn.functional.linear(keys, self.W_k.weight), self.num_heads)\n"
                           "        V = split_heads(torch.nn.functional.linear(values, self.W_v.weight), self.num_heads)")],
    "module.self-attention-only": [(FORWARD_QKV,
                                    "        x = queries\n"
                                    "        Q, K, V = (split_heads(l(x), self.num_heads) for l in (self.W_q, self.W_k, self.W_v))")],
    "module.missing-out-proj": [(FWD_OUT, "        return concat_heads(heads)")],
    "module.dropout-in-eval": [("        heads = self.dropout(weights) @ V",
                                "        heads = torch.nn.functional.dropout(weights, self.dropout.p, True) @ V")],
    "pool.no-scale": [(POOL_SCORES, "    scores = Q @ K.transpose(-2, -1)"),
                      (FWD_SCORES, "        scores = Q @ K.transpose(-2, -1)")],
    "pool.scale-d-model": [(FWD_SCORES, "        scores = Q @ K.transpose(-2, -1) / self.W_q.in_features ** 0.5")],
    "pool.softmax-wrong-axis": [("        return torch.softmax(scores, dim=-1)", "        return scores.softmax(dim=-2)"),
                                ("    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)",
                                 "    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-2)")],
    "pool.transpose-wrong-axes": [(POOL_SCORES, "    scores = Q @ K.transpose(1, 2) / math.sqrt(p)"),
                                  (FWD_SCORES, "        scores = Q @ K.transpose(1, 2) / math.sqrt(self.head_dim)")],
    "mask.wrong-axis": [("    keys = torch.arange(n_k, device=scores.device)            # (n_k,)\n"
                         "    keep = keys < lens                                        # (batch, 1.., n_q|1, n_k)",
                         "    rows = torch.arange(n_q, device=scores.device).unsqueeze(-1)\n"
                         "    keep = (rows < lens).expand(scores.shape)")],
    "mask.ignores-valid-lens": [("        weights = masked_softmax(scores, valid_lens)\n        self.attention_weights",
                                 "        weights = masked_softmax(scores)\n        self.attention_weights")],
    "mask.zero-len-nan": [(FILL_OK, "    return torch.softmax(torch.where(keep, scores, float('-inf')), dim=-1)")],
    # the 0/0 cleaned after the softmax: the forward is right, its gradients are NaN
    "mask.zero-len-nan/cleaned": [(FILL_OK, "    penalty = torch.zeros_like(scores).masked_fill(~keep, -math.inf)\n"
                                            "    return torch.softmax(scores + penalty, dim=-1).nan_to_num(0.0)")],
    # a finite penalty added to the scores (Keras, BERT): an empty row is the unmasked softmax
    "mask.zero-len-uniform/additive": [(FILL_OK, "    penalty = (~keep).to(scores.dtype) * -10000.0\n"
                                                 "    return torch.softmax(scores + penalty, dim=-1)")],
    # one length per query row, copied with .repeat(n_q) and shared by the heads
    "mask.repeat-not-interleave/per-row": [
        ("    if lens.dim() == 1:\n        lens = lens.reshape(-1, *(1,) * (scores.dim() - 1))   # (batch, 1.., 1)",
         "    if lens.dim() == 1:\n        rows = lens.repeat(n_q).reshape(len(lens), n_q)\n"
         "        lens = rows.reshape(-1, *(1,) * (scores.dim() - 3), n_q, 1)")],
    # the key mask turned onto the query axis as it is: fits only where n_q == n_k
    "mask.wrong-axis/square": [
        ("    keep = keys < lens                                        # (batch, 1.., n_q|1, n_k)",
         "    keep = keys < lens\n"
         "    if valid_lens.dim() == 1:\n"
         "        keep = keep.transpose(-2, -1)")],
    "mask.zero-len-uniform": [(FILL_OK, "    return torch.softmax(scores.masked_fill(~keep, -1e4), dim=-1)")],
    "mask.after-softmax": [(FILL_OK, "    return torch.softmax(scores, dim=-1) * keep")],
    "mask.repeat-not-interleave": [
        ("    if lens.dim() == 1:\n        lens = lens.reshape(-1, *(1,) * (scores.dim() - 1))   # (batch, 1.., 1)",
         "    if lens.dim() == 1:\n        rows = scores[0, ..., 0].numel()\n"
         "        lens = lens.repeat(rows).reshape(*scores.shape[:-1], 1)")],
    # D2L's layout: the heads folded into the batch, the lengths copied with .repeat(heads)
    "mask.repeat-not-interleave/folded": [
        (FWD_SCORES + "\n        weights = masked_softmax(scores, valid_lens)",
         "        batch, M = Q.shape[:2]\n"
         "        Q, K = (X.reshape(batch * M, *X.shape[2:]) for X in (Q, K))\n"
         "        lens = None if valid_lens is None else valid_lens.repeat(\n"
         "            M, *(1,) * (valid_lens.dim() - 1))\n"
         "        scores = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(self.head_dim)\n"
         "        weights = masked_softmax(scores, lens).reshape(batch, M, *scores.shape[1:])")],
    "shape.head-weight-full-width": [("    return (d, d_total // num_heads)", "    return (d, d_total)")],
    "shape.no-valueerror": [("    if d_total % num_heads != 0:\n        raise ValueError(",
                             "    if d_total % num_heads != 0:\n        raise RuntimeError(")],
    "api.mutates-input": [("    weights = torch.softmax(scores.masked_fill(~keep, lowest), dim=-1)",
                           "    scores.masked_fill_(~keep, lowest)\n"
                           "    weights = torch.softmax(scores, dim=-1)")],
}
#: Codes that legitimately come along with a fixture's own code (TAXONOMY: "Telling
#: neighbouring codes apart").
ALSO_ALLOWED = {"mask.zero-len-uniform": {"mask.fp16-overflow"},
                # the reference's forward scales by sqrt(head_dim from head_weight_shape)
                "shape.head-weight-full-width": {"pool.scale-d-model"}}


def source(code: str) -> str:
    """The reference's text with the fixture's patches (each old text exactly once:
    ``autograder.examples.patch``, the project's one patch engine)."""
    return patch(f"fixture {code} (tests/mistakes.py)", REFERENCE.read_text(), MISTAKES[code])


def write(code: str, folder: Path) -> Path:
    path = folder / (re.sub(r"[./-]", "_", code) + ".py")
    path.write_text(source(code))
    return path
