"""Each mistake charged where it is: dropout's placement, ..."""
from __future__ import annotations

import textwrap

import pytest

from autograder import api
from test_forged_facts import BASE


@pytest.fixture(scope="module")
def grader():
    g = api.Grader(seed=11)
    yield g
    g.close()


def grade(grader, tmp_path, text: str) -> dict:
    path = tmp_path / "mha.py"
    path.write_text(BASE + textwrap.dedent(text))
    return grader.grade(path).to_dict()


def check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


DROPOUT_ON_OUTPUT = '''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
        return self.dropout(weights @ V), weights
'''
DROPOUT_AFTER_W_O = '''
class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        return attention_pool(Q, K, V, valid_lens)

    def forward(self, queries, keys, values, valid_lens=None):
        return self.dropout(super().forward(queries, keys, values, valid_lens))
'''
DROPOUT_FUNCTIONAL = '''
import torch.nn.functional as F

class MultiHeadAttention(MultiHeadAttention):
    def heads(self, Q, K, V, valid_lens):
        weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), valid_lens)
        return F.dropout(weights, self.dropout.p, training=self.training) @ V, weights
'''


@pytest.mark.parametrize("code", [DROPOUT_ON_OUTPUT, DROPOUT_AFTER_W_O])
def test_dropout_anywhere_but_on_the_weights_fails_the_dropout_check(grader, tmp_path, code):
    report = grade(grader, tmp_path, code)
    dropout = check(report, "MultiHeadAttention.dropout")
    assert dropout["status"] == "failed" and "not on the attention weights" in dropout["feedback"]
    assert check(report, "MultiHeadAttention.values")["status"] == "passed"


def test_dropout_on_the_weights_written_otherwise_passes(grader, tmp_path):
    report = grade(grader, tmp_path, DROPOUT_FUNCTIONAL)
    assert check(report, "MultiHeadAttention.dropout")["status"] == "passed"
    assert report["score"] == 100.0
