"""Error carried forward's answers (``autograder.carry``): the reference answers the questions
of a carried part from a sandbox of its own, with a submission's limits, never in the
grader's process; a question it cannot answer fails the student's check, and the grader
goes on."""
from __future__ import annotations

import resource
import sys

import torch

import solutions
from autograder import carry
from autograder.examples import REFERENCE
from autograder.sandbox import host
from autograder.sandbox.probes import CARRYABLE
from mistakes import write

#: the options of this module's `grader` (tests/conftest.py)
GRADER = {"seed": 11}
MEMORY = 1 << 30        # small: the interpreter needs ~0.7 GiB, a question of 0.5 GiB is too much


def check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


def carried_passes(report) -> list[str]:
    return [c["name"] for c in report["checks"]
            if c["status"] == "passed" and "error carried forward" in c["feedback"]]


def test_a_carried_question_is_answered_by_the_references_own_process(grader, tmp_path,
                                                                      monkeypatch):
    """A split bug's module checks pass given the correct split_heads, and every answer came
    through the ``answer`` probe of another process: the grader's process never ran a
    reference part for a question (no call of one from ``carry``)."""
    in_grader, probed = [], []

    def spy(name, part):
        def run(*args, **kwargs):
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_code.co_filename == carry.__file__:
                    in_grader.append(name)
                frame = frame.f_back
            return part(*args, **kwargs)
        return run
    for name in CARRYABLE:
        monkeypatch.setattr(solutions, name, spy(name, getattr(solutions, name)))
    probe = host.Sandbox.probe

    def counted(self, name, **kwargs):
        probed.append(name)
        return probe(self, name, **kwargs)
    monkeypatch.setattr(host.Sandbox, "probe", counted)
    report = grader.grade(write("split.no-transpose", tmp_path)).to_dict()
    assert "MultiHeadAttention.values" in carried_passes(report)
    assert probed.count("answer") > 0 and in_grader == []


def test_a_question_over_the_reference_sandboxs_memory_fails_the_check_only(
        grader, make_grader, tmp_path, monkeypatch):
    """A module that asks its carried attention_pool for 8192 x 8192 weights (0.5 GiB, let
    through here by a size bound raised for the test) gets an error for that check: the
    reference's sandbox ran out of memory, not the grader, whose peak stays where it was.
    The next submission is graded as usual, its questions answered."""
    small = make_grader(seed=11, memory_bytes=MEMORY)
    assert small.grade(REFERENCE).score == 100.0 and small.answers._box is None  # never asked
    monkeypatch.setattr(carry, "MAX_ELEMENTS", 1 << 30)
    replies, answers = [], small.answers

    def noted(question, allowed):
        replies.append(answers(question, allowed))
        return replies[-1]
    monkeypatch.setattr(small, "answers", noted)
    path = tmp_path / "greedy.py"
    path.write_text(REFERENCE.read_text() + GREEDY)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    report = small.grade(path).to_dict()
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - peak
    assert check(report, "MultiHeadAttention.values")["status"] == "failed"
    refused = [r["raised"] for r in replies if "raised" in r]
    assert refused and all("memory" in r for r in refused), refused
    assert grown < 256 << 20, f"the grader's own peak grew by {grown >> 20} MiB"
    split_bug = write("split.no-transpose", tmp_path)
    after = small.grade(split_bug).to_dict()
    assert "MultiHeadAttention.values" in carried_passes(after)
    assert after["score"] == grader.grade(split_bug).score


class Stopping:
    """A stand-in for the reference's sandbox that answers, or stops, as its plan says."""

    def __init__(self, plan: list[str]):
        self.plan, self.timed_out_groups, self.closed = plan, set(), False

    def probe(self, name, *, group, question):
        if self.plan.pop(0) == "stop":
            raise host.StudentError("the reference's process was killed")
        return {"answer": name}

    def close(self):
        self.closed = True


def test_a_reference_sandbox_that_stops_is_replaced():
    """One that answered before and stops is replaced, and the question asked once more of
    the new one; a new one that stops at once leaves the question unanswered (the student's
    proxy raises): never an exception in the grader."""
    plans, boxes = [["answer", "stop"], ["answer", "stop"], ["answer"]], []

    def start():
        boxes.append(Stopping(plans.pop(0)))
        return boxes[-1]
    answers = carry.Answers(start)

    def question(i):         # a new question each time (an answer given is kept)
        return {"fn": "split_heads", "mode": "value", "args": [torch.full((2, 5, 12), float(i)), 3]}
    assert answers(question(1), {"split_heads"}) == {"answer": "answer"}
    assert answers(question(2), {"split_heads"}) == {"answer": "answer"}     # the 2nd box's
    assert len(boxes) == 2 and boxes[0].closed and not boxes[1].closed
    assert answers(question(3), {"split_heads"}) == {"answer": "answer"}     # the 3rd box's
    assert len(boxes) == 3 and boxes[1].closed
    plans.append(["stop"])
    answers.close()                                  # the next question starts a 4th box
    assert answers(question(4), {"split_heads"}) == {
        "raised": "no answer: the reference's process was killed"}
    answers.close()


class Counting:
    """A stand-in for the reference's sandbox that counts what it is asked."""

    def __init__(self):
        self.asked, self.timed_out_groups = 0, set()

    def probe(self, name, *, group, question):
        self.asked += 1
        return {"answer": question["args"][0] * 2}

    def close(self):
        pass


def test_an_answer_given_is_kept_within_its_memory():
    """Students who make the same mistake ask the same questions: each is answered once (the
    reference is a pure function of the question), the same bytes with another shape or
    dtype are another question, and past the cache's memory the least recently asked goes."""
    box = Counting()
    answers = carry.Answers(lambda: box, memory=3 * 4 * 60)   # three answers of 60 float32
    x = torch.arange(60.0).reshape(1, 5, 12)
    ask = lambda t: answers({"fn": "split_heads", "mode": "value", "args": [t, 3]},  # noqa: E731
                            {"split_heads"})
    first = ask(x)
    assert torch.equal(ask(x.clone())["answer"], first["answer"]) and box.asked == 1
    ask(x.reshape(1, 6, 10).contiguous())
    ask(x.double())
    assert box.asked == 3                         # same bytes, other shape or dtype: asked
    ask(x + 1)                                    # a fourth answer: x's goes (least recent)
    ask(x.double())
    assert box.asked == 4
    ask(x)
    assert box.asked == 5


#: A wrong attention_pool (cheap on its own) and a module built on it whose forward first
#: asks it for one huge answer (its weights: 8192 x 8192 float64).
GREEDY = '''

def attention_pool(Q, K, V, valid_lens=None):
    return Q, Q


class MultiHeadAttention(MultiHeadAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        big = torch.ones(1, 8192, 1, dtype=torch.float64)
        attention_pool(big, big, big)
        Q = split_heads(self.W_q(queries), self.num_heads)
        K = split_heads(self.W_k(keys), self.num_heads)
        V = split_heads(self.W_v(values), self.num_heads)
        heads, self.attention_weights = attention_pool(Q, K, V, valid_lens)
        return self.W_o(concat_heads(heads))
'''


def test_a_question_the_reference_could_not_answer_is_told_to_the_instructor(
        grader, tmp_path, monkeypatch):
    """Where the reference's process gives no answer (killed, out of memory), the carried
    check fails as the student's proxy raises, and the report tells the instructor once; a
    question the reference raises on (the student's arguments) is no note."""
    from autograder import api
    killed = {"raised": carry.NO_ANSWER + "the reference's process was killed"}
    monkeypatch.setattr(grader, "answers", lambda question, allowed: dict(killed))
    report = grader.grade(write("split.no-transpose", tmp_path)).to_dict()
    told = [n for n in report["notes"] if n.startswith(api.UNANSWERED)]
    assert len(told) == 1 and "was killed" in told[0], report["notes"]
    assert "MultiHeadAttention.values" not in carried_passes(report)
    assert carry.unanswered(killed) and not carry.unanswered({"raised": "ValueError: no"})


def test_a_grader_fault_in_the_carried_pass_reaches_the_report(grader, tmp_path, monkeypatch):
    """A bug of the grader met while a check is redone with the reference's parts is noted
    for the instructor, as one met in the strict pass is (the carried pass's evidence is
    its own)."""
    import dataclasses
    name = "MultiHeadAttention.values"
    real = grader.checks[name]

    def body(probe):
        if probe.evidence.carry:
            raise RuntimeError("a bug met only in the carried pass")
        return real.body(probe)
    monkeypatch.setitem(grader.checks, name, dataclasses.replace(real, body=body))
    report = grader.grade(write("split.no-transpose", tmp_path)).to_dict()
    faults = [n for n in report["notes"] if "only in the carried pass" in n]
    assert len(faults) == 1 and faults[0].startswith("for the instructor"), report["notes"]
