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


def test_the_reference_gets_the_full_total_whatever_check_is_disabled(tmp_path):
    """A rubric that disables a check others require grades the dependents without that gate:
    the reference still earns the rubric's whole total (each check disabled in turn)."""
    from autograder import scoring
    g = api.Grader(seed=3)
    try:
        names = [c.name for c in g.selected()]
        for name in names:
            text = scoring.DEFAULT_RUBRIC.read_text().replace("checks = []", f"checks = [{name!r}]")
            path = tmp_path / "rubric.toml"
            path.write_text(text)
            g.rubric = scoring.load_rubric(path, known=set(g.checks))
            report = g.grade(api.PROJECT / "solutions" / "mha.py")
            assert name not in {r.name for r in report.results}
            assert report.score == report.max_score, (name, [
                (r.name, r.feedback[:120]) for r in report.results if r.score < r.max_score])
            total = sum(g.rubric.points.values())      # the disabled check counts 0
            assert report.max_score == round(total, 2), (name, report.max_score, total)
    finally:
        g.close()
