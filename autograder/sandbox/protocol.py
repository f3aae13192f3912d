"""Framing and encoding of the data that crosses the sandbox boundary.

Only data crosses: a frame is a JSON header plus raw bytes, never a pickle. Values are
None, bools, ints, finite or special floats, strings, lists, tuples, string-keyed dicts and
plain ``torch.Tensor`` objects (dtype, shape, bytes). The reading side validates every
field and every size before it builds anything.

This module is imported by both sides: by the grader as ``autograder.sandbox.protocol``
and inside the sandbox as ``protocol``, so it imports nothing from the grader.
"""
from __future__ import annotations

import json
import math
import struct

import torch

MAX_FRAME = 64 << 20         #: bytes in one frame, header and tensors together
MAX_HEADER = 4 << 20         #: bytes of JSON in one frame
MAX_DEPTH = 12
MAX_ITEMS = 100_000          #: elements of one list, tuple or dict
MAX_ELEMENTS = 1 << 40       #: a tensor's shape, its empty axes counted as 1 (meta ones have no bytes)
DTYPES = {name: getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
    "uint8", "bool", "complex64", "complex128")}
ITEMSIZE = {name: torch.empty((), dtype=dtype).element_size() for name, dtype in DTYPES.items()}
_PREFIX = struct.Struct(">II")
#: the dtypes numpy holds, with their names (bfloat16 goes through its bits)
NUMPY_DTYPES = {dtype: name for name, dtype in DTYPES.items() if name != "bfloat16"}
_EXACT = 2**53               #: the ints JSON carries as they are
_RAW = frozenset({bool, int, float, str, type(None)})     #: what JSON gives back as itself
#: torch's own Tensor.numpy: ``probes`` counts host reads by wrapping torch.Tensor's, and
#: sending a value (or keying it: ``fingerprint``) is no read of the student's
numpy_of = torch._C.TensorBase.numpy


class ProtocolError(Exception):
    """The other side sent something that is not a valid frame or value."""


def encode(value) -> tuple[bytes, list[bytes]]:
    blobs: list[bytes] = []
    header = json.dumps(_encode(value, blobs, 0), allow_nan=False).encode()
    return header, blobs


def _encode(value, blobs, depth):
    if depth > MAX_DEPTH:
        raise ProtocolError("value nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return {"int": str(value)} if abs(value) > _EXACT else value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind in (list, tuple):
        return {kind.__name__: _encode_items(value, blobs, depth + 1)}
    if kind is dict:
        keys = [str(k) for k in value]
        return {"dict": dict(zip(keys, _encode_items(value.values(), blobs, depth + 1)))}
    if kind is bytes:
        blobs.append(value)
        return {"bytes": len(blobs) - 1}
    if kind is torch.Size:
        return {"tuple": [int(v) for v in value]}
    if kind is torch.Tensor:
        name = NUMPY_DTYPES.get(value.dtype)
        if name is not None and value.device.type == "cpu":   # the common case, quicker
            blobs.append(numpy_of(value.detach() if value.requires_grad else value).tobytes())
            return {"tensor": {"dtype": name, "shape": list(value.shape), "blob": len(blobs) - 1}}
        t = value.detach()
        if t.device.type == "meta":
            return {"meta": {"dtype": str(t.dtype).removeprefix("torch."),
                             "shape": list(t.shape)}}
        t = t.to("cpu")
        if t.dtype is torch.bfloat16:                  # numpy has no bfloat16: its bits
            t = t.contiguous().view(torch.int16)
        blobs.append(numpy_of(t).tobytes())              # C order, whatever the strides
        return {"tensor": {"dtype": str(value.dtype).removeprefix("torch."),
                           "shape": list(t.shape), "blob": len(blobs) - 1}}
    raise ProtocolError(f"cannot send a value of type {kind.__name__}")


def _encode_items(values, blobs, depth) -> list:
    """_encode of each value at depth, the plain ones (most of them: ints, strings) without
    a call each."""
    if depth > MAX_DEPTH:
        return [_encode(v, blobs, depth) for v in values]
    out = []
    for v in values:
        kind = type(v)
        if kind is str or kind is bool or v is None or (kind is int and -_EXACT <= v <= _EXACT):
            out.append(v)
        else:
            out.append(_encode(v, blobs, depth))
    return out


def decode(header: bytes, blobs: list[bytes]):
    try:
        tree = json.loads(header)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:   # deep nesting included
        raise ProtocolError(f"bad JSON header: {type(e).__name__}") from None
    try:
        return _decode(tree, blobs, 0)
    except (RuntimeError, ValueError, TypeError, OverflowError, MemoryError) as e:
        raise ProtocolError(f"a value torch cannot build ({type(e).__name__})") from None


def _decode(node, blobs, depth):
    if depth > MAX_DEPTH:
        raise ProtocolError("value nested too deeply")
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict) or len(node) != 1:
        raise ProtocolError("malformed value")
    (tag, body), = node.items()
    if tag in ("list", "tuple"):
        if not isinstance(body, list) or len(body) > MAX_ITEMS:
            raise ProtocolError("malformed sequence")
        items = _decode_items(body, blobs, depth + 1)
        return items if tag == "list" else tuple(items)
    if tag == "dict":
        if not isinstance(body, dict) or len(body) > MAX_ITEMS:
            raise ProtocolError("malformed dict")
        return dict(zip(body, _decode_items(body.values(), blobs, depth + 1)))
    if tag == "int" and isinstance(body, str) and len(body) < 64:
        return int(body)
    if tag == "float" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "bytes" and type(body) is int and 0 <= body < len(blobs):
        return bytes(blobs[body])
    if tag == "tensor":
        return _decode_tensor(body, blobs)
    if tag == "meta":
        dtype, shape = _dtype_shape(body)
        return torch.empty(shape, dtype=dtype, device="meta")
    raise ProtocolError(f"unknown tag {tag!r}")


def _decode_items(nodes, blobs, depth) -> list:
    """_decode of each node at depth, the plain ones without a call each."""
    if depth > MAX_DEPTH:
        return [_decode(v, blobs, depth) for v in nodes]
    return [v if type(v) in _RAW else _decode(v, blobs, depth) for v in nodes]


def _dtype_shape(body):
    if not isinstance(body, dict) or body.get("dtype") not in DTYPES:
        raise ProtocolError("tensor with a missing or unsupported dtype")
    shape = body.get("shape")
    if not isinstance(shape, list) or len(shape) > 16:
        raise ProtocolError("tensor with a malformed shape")
    elements = 1                 # an empty axis counted as 1 (a meta tensor's, an empty one's)
    for s in shape:
        if type(s) is not int or not 0 <= s < 2**31:
            raise ProtocolError("tensor with a malformed shape")
        elements *= s if s > 1 else 1
    if elements > MAX_ELEMENTS:
        raise ProtocolError("tensor with a malformed shape")
    return DTYPES[body["dtype"]], shape


def _decode_tensor(body, blobs):
    dtype, shape = _dtype_shape(body)
    index = body.get("blob")
    if type(index) is not int or not 0 <= index < len(blobs):
        raise ProtocolError("tensor without its bytes")
    data = blobs[index]
    numel = math.prod(shape)
    itemsize = ITEMSIZE[body["dtype"]]
    if numel * itemsize != len(data):
        raise ProtocolError(f"tensor of shape {shape} and dtype {body['dtype']} needs "
                            f"{numel * itemsize} bytes, got {len(data)}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    data = bytearray(data)       # the tensor's own memory, writable
    if dtype is torch.bool and data.translate(None, b"\x00\x01"):
        raise ProtocolError("a bool tensor holds bytes other than 0 and 1")
    return torch.frombuffer(data, dtype=dtype).reshape(shape)


def pack(value) -> bytes:
    """One frame: lengths, JSON header, blob lengths, blobs."""
    header, blobs = encode(value)
    sizes = json.dumps([len(b) for b in blobs]).encode()
    body = header + b"\n" + sizes + b"\n" + b"".join(blobs)
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes is over the {MAX_FRAME}-byte limit")
    return _PREFIX.pack(len(body), 0) + body


def unpack(body: bytes):
    try:
        header, sizes_line, rest = body.split(b"\n", 2)
        sizes = json.loads(sizes_line)
    except (ValueError, RecursionError):
        raise ProtocolError("malformed frame") from None
    if (len(header) > MAX_HEADER or not isinstance(sizes, list)
            or not all(type(s) is int and s >= 0 for s in sizes) or sum(sizes) != len(rest)):
        raise ProtocolError("malformed frame sizes")
    blobs, offset, rest = [], 0, memoryview(rest)      # slices of it copy nothing
    for size in sizes:
        blobs.append(rest[offset:offset + size])
        offset += size
    return decode(header, blobs)


def read_frame(recv_exact) -> bytes:
    """Read one frame's body with ``recv_exact(n) -> bytes``, checking its size first."""
    length, _ = _PREFIX.unpack(recv_exact(_PREFIX.size))
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes is over the limit")
    return recv_exact(length)
