# ATTACK: races the result channel: a thread started at import finds the worker's Channel object (gc) and the socket under it, reads the run's nonce and the current request number, and sends a forged, well-formed "ok" answer for every request the moment it arrives, before the worker's own; it also writes stale frames (old request numbers) and raw garbage between requests.
# HONEST: 0
# EXPECT: answers are bound to this run's nonce and the request's number, and the first frame that does not answer the request stops the worker; forged values still fail against the reference; every check error/failed; score 0; grader exit status 0.
import gc
import sys
import threading
import time

import torch


def _channel():
    for obj in gc.get_objects():
        if type(obj).__name__ == "Channel" and hasattr(obj, "nonce"):
            return obj
    return None


def _forge():
    protocol = sys.modules.get("protocol")
    seen = -1
    while True:
        channel = _channel()
        if channel is None or protocol is None:
            time.sleep(0.001)
            continue
        if channel.seq != seen:
            seen = channel.seq
            frame = {"ok": {"value": torch.zeros(2, 3), "after": []}, "forbidden": [],
                     "nonce": channel.nonce, "seq": channel.seq}
            stale = dict(frame, seq=channel.seq - 1)
            try:
                channel._sendall(protocol.pack(frame))
                channel._sendall(protocol.pack(stale))
                channel._sendall(b"\x00\x00\x00\x10\x00\x00\x00\x00{\"ok\": true}\n[]\n")
            except OSError:
                return
        time.sleep(0.0005)


threading.Thread(target=_forge, daemon=True).start()


def head_weight_shape(d, d_total, num_heads):
    return (1, 1)


def project(H, W):
    return torch.zeros(1)


def project_heads(H, W_heads):
    return torch.zeros(1)


def split_heads(X, num_heads):
    return torch.zeros(1)


def concat_heads(X):
    return torch.zeros(1)


def masked_softmax(scores, valid_lens=None):
    return torch.zeros(1)


def attention_pool(Q, K, V, valid_lens=None):
    return torch.zeros(1), torch.zeros(1)


class MultiHeadAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, *, d_total=None, bias=False, dropout=0.0):
        super().__init__()

    def forward(self, queries, keys, values, valid_lens=None):
        return torch.zeros(1)
