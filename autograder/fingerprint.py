"""A cheap, exact key for a request or a question: what the reference's answers are cached
by (``api``'s reference cache, ``carry.Answers``)."""
from __future__ import annotations

import hashlib

import torch

#: torch's own Tensor.numpy (``probes`` wraps torch.Tensor's to count host reads)
_numpy = torch._C.TensorBase.numpy
#: dtypes whose tensors numpy holds as they are
_PLAIN = frozenset({torch.float64, torch.float32, torch.float16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64,
                    torch.complex128})


def fingerprint(value) -> str:
    """A cheap, exact key for a request: shapes and bytes of tensors, reprs of the rest."""
    h = hashlib.blake2b(digest_size=16)

    def walk(v):
        if isinstance(v, torch.Tensor):
            h.update(str((v.dtype, tuple(v.shape))).encode())
            if v.dtype in _PLAIN and v.device.type == "cpu" and v.is_contiguous():
                h.update(_numpy(v))          # its memory as it is: C order already
            else:
                h.update(_numpy(v.contiguous().reshape(-1).view(torch.uint8)))
        elif isinstance(v, dict):
            for k in sorted(v):
                h.update(str(k).encode())
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(b"[" if isinstance(v, list) else b"(")      # a tuple is not a list
            for x in v:
                walk(x)
            h.update(b"]" if isinstance(v, list) else b")")
        else:
            h.update(repr(v).encode())
    walk(value)
    return h.hexdigest()
