"""The command line: --version, help on every argument, `checks`, pipes, the demo's lines,
and the exit status decided by the type of what a command raised."""
from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

from autograder import cli, commands, demo, errors
from autograder import checks as registry

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "autograder", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, **kwargs)


def shell(command: str) -> subprocess.CompletedProcess:
    """A bash pipeline in the project's root, as a person would type it."""
    return subprocess.run(["bash", "-c", command.replace("python", f'"{PYTHON}"', 1)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def no_zygote(monkeypatch):
    """main() starts the sandbox's zygote early for grade, demo and batch; these tests need none."""
    from autograder.sandbox import spawn
    monkeypatch.setattr(spawn, "prestart", lambda: None)


# --- --version ---------------------------------------------------------------------------

def test_version_is_the_projects():
    """Does `python -m autograder --version` print the program's name and the version
    pyproject.toml declares (not the command typed), exit 0?"""
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    done = run("--version")
    assert done.returncode == 0, done.stderr
    name = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert done.stdout.strip() == f"{name} {declared}" == f"mha-autograder {declared}"


def test_version_without_a_checkout(monkeypatch, tmp_path):
    """Without a pyproject.toml beside the package, does the installed metadata answer, and
    without either, "unknown" (not a traceback)?"""
    missing = tmp_path / "pyproject.toml"
    monkeypatch.setattr(metadata, "version", lambda name: "9.8.7")
    assert cli.version(missing) == "9.8.7"

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", not_installed)
    assert cli.version(missing) == "unknown"
    other = tmp_path / "other.toml"
    other.write_text('[project]\nname = "something-else"\nversion = "1.0"\n')
    assert cli.version(other) == "unknown"


# --- help ----------------------------------------------------------------------------------

def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_is_listed():
    """Are the contract's commands there (grade, batch, demo) and the others the README names?"""
    assert set(subcommands()) == {"grade", "batch", "report", "bench", "demo", "checks",
                                  "audit", "package", "variant"}


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_help_covers_every_argument(name, capsys):
    """Does `COMMAND --help` exit 0 and show, for each argument, its name and its help text,
    and examples of the command in its epilog?"""
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    arguments = [a for a in subcommands()[name]._actions if not isinstance(a, argparse._HelpAction)]
    assert arguments or name == "demo"
    for action in arguments:
        assert action.help, f"{name}: {action.dest} has no help"
        shown = action.option_strings or [action.metavar or action.dest]
        for label in shown:
            assert label in text, f"{name}: {label} missing from --help"
        assert " ".join(action.help.split()) in text, f"{name}: help of {action.dest} not shown"
    assert "examples:" in text and f"python -m autograder {name}" in text


def test_top_level_help_lists_commands_and_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "--version" in out and "exit status: 0" in out
    for name in subcommands():
        assert name in out


# --- checks ----------------------------------------------------------------------------------

def test_checks_prints_whole_purposes(capsys):
    """Is each check's purpose printed whole (the docstring's first paragraph, every word, a
    full sentence), wrapped under its line, no line over 100 characters?"""
    assert cli.main(["checks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(len(line) <= commands.WIDTH for line in lines)
    shown: dict[str, list[str]] = {}
    for line in lines:
        if line.startswith("    "):
            shown[current].append(line.strip())
        else:
            current = line.split()[0]
            assert re.fullmatch(r"\S+\s+\S+\s+[\d.]+ points\s+(public|hidden)", line), line
            shown[current] = []
    every = registry.load_all()
    assert list(shown) == list(every)
    for name, check in every.items():
        text = " ".join(shown[name])
        assert text == " ".join(check.doc.split("\n\n")[0].split()), name
        assert re.search(r"[.]\)?$", text), f"{name}: the purpose is not a whole sentence: {text!r}"


def test_purpose_takes_the_first_paragraph():
    assert commands.purpose("One thing\nacross lines.\n\nDetails for developers.") == \
        "One thing across lines."
    assert commands.purpose("") == "(no description)"


def test_checks_piped_into_head_exits_cleanly():
    """`python -m autograder checks | head -1`: one line, status 0, no traceback at all."""
    done = shell("python -m autograder checks | head -1")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1 and done.stdout.startswith("head_weight_shape")
    assert done.stderr == ""


def test_a_reader_that_leaves_at_once_gives_no_traceback():
    """When the reader has gone before anything is written (`| true`), does the command
    stop with status 141 (as a shell tool killed by SIGPIPE) and print nothing to stderr?"""
    done = shell('python -m autograder checks | true; echo "status ${PIPESTATUS[0]}"')
    assert done.stdout.strip() == f"status {errors.EXIT_PIPE_CLOSED}"
    assert done.stderr == "", done.stderr


def test_leaving_skips_the_last_garbage_collection():
    """Does `python -m autograder` freeze the heap as it leaves, so that the interpreter's
    last collection skips torch's objects (0.5 to 1 s of every command, about 10 ms a
    notebook of a 100-notebook batch), with the same output and exit status, and the atexit
    handlers still run?"""
    code = ("import atexit, gc, runpy, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
            "sys.argv = ['autograder', 'checks']\n"
            "runpy.run_module('autograder', run_name='__main__', alter_sys=True)\n")
    frozen = subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    plain = run("checks")
    assert frozen.returncode == plain.returncode == 0, frozen.stderr
    assert frozen.stdout == plain.stdout and frozen.stdout.startswith("head_weight_shape")
    count = int(frozen.stderr.split("frozen ", 1)[1].split()[0])
    assert count > 10_000, frozen.stderr          # the imported modules' objects, torch's


def test_the_installed_command_leaves_as_python_m_autograder_does():
    """``mha-autograder`` (the console script pyproject.toml declares) runs the same function
    as ``python -m autograder``: the heap frozen as it leaves."""
    from autograder.scoring import tomllib        # tomli on Python 3.10
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["mha-autograder"]
    module, name = target.split(":")
    code = ("import atexit, gc, importlib, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
            "sys.argv = ['mha-autograder', 'checks']\n"
            f"sys.exit(getattr(importlib.import_module({module!r}), {name!r})())\n")
    done = subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("head_weight_shape"), done.stderr
    assert int(done.stderr.split("frozen ", 1)[1].split()[0]) > 10_000, done.stderr


# --- exit statuses -----------------------------------------------------------------------------

def test_usage_errors_exit_2(no_zygote, tmp_path, capsys):
    """A missing submission, a bad rubric, an unknown option: status 2 and a one-line message."""
    assert cli.main(["grade", str(tmp_path / "missing.py")]) == errors.EXIT_USAGE
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "rubric.toml"
    bad.write_text("this is = = not toml")
    assert cli.main(["checks", "--rubric", str(bad)]) == errors.EXIT_USAGE
    err = capsys.readouterr().err
    assert "not valid TOML" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as done:
        cli.main(["grade", "x.py", "--no-such-option"])
    assert done.value.code == errors.EXIT_USAGE


def test_device_cuda_without_cuda_is_a_usage_error(no_zygote, tmp_path, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda is no usage error here")
    (tmp_path / "mha.py").write_text("")
    assert cli.main(["grade", str(tmp_path / "mha.py"), "--device", "cuda"]) == errors.EXIT_USAGE
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize("bug", [ValueError("bad value inside the grader"),
                                 ImportError("cannot import name 'x'"),
                                 RuntimeError("boom"), KeyError("missing")])
def test_a_grader_bug_exits_1_with_its_traceback(bug, monkeypatch, capsys):
    """Whatever the type of a bug (a ValueError or ImportError included, which once read as a
    usage error): status 1, a short line, and the traceback for the bug report."""
    def broken(args):
        raise bug
    monkeypatch.setitem(commands.COMMANDS, "checks", broken)
    assert cli.main(["checks"]) == errors.EXIT_GRADER
    err = capsys.readouterr().err
    assert err.startswith("the grader failed (a bug in the autograder")
    assert type(bug).__name__ in err.splitlines()[0]
    assert "Traceback (most recent call last)" in err and "in broken" in err


def test_a_value_error_deep_in_batch_is_no_usage_error(no_zygote, monkeypatch, tmp_path, capsys):
    """The bug the issue found: a ValueError anywhere below `batch` exited 2. Now 1."""
    from autograder import batch
    (tmp_path / "in").mkdir()

    def broken(*args, **kwargs):
        raise ValueError("a bug, not the user's fault")
    monkeypatch.setattr(batch, "run", broken)
    assert cli.main(["batch", str(tmp_path / "in"), "--output", str(tmp_path / "out")]) == 1
    assert "a bug in the autograder" in capsys.readouterr().err


def test_usage_and_grader_failures_by_type(monkeypatch, capsys):
    """UsageError (also a ValueError, for old callers) -> 2; GraderFailure -> 1, no traceback."""
    assert issubclass(errors.UsageError, ValueError)
    assert commands.UsageError is errors.UsageError

    def usage(args):
        raise errors.UsageError("fix the option")

    def failure(args):
        raise errors.GraderFailure("the sandbox would not start")
    monkeypatch.setitem(commands.COMMANDS, "checks", usage)
    assert cli.main(["checks"]) == errors.EXIT_USAGE
    assert capsys.readouterr().err == "error: fix the option\n"
    monkeypatch.setitem(commands.COMMANDS, "checks", failure)
    assert cli.main(["checks"]) == errors.EXIT_GRADER
    assert capsys.readouterr().err == "the grader failed: the sandbox would not start\n"


def test_the_dask_executor_missing_is_a_usage_error(monkeypatch):
    """Without Dask distributed, --executor dask is a usage error that says what to install."""
    import builtins

    from autograder import executors
    real = builtins.__import__

    def no_distributed(name, *args, **kwargs):
        if name == "distributed":
            raise ImportError("No module named 'distributed'")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_distributed)
    with pytest.raises(errors.UsageError, match=r'pip install -e "\.\[distributed\]"'):
        executors.DaskExecutor({}, "tcp://localhost:1")


# --- the demo ----------------------------------------------------------------------------------

def test_demo_lines_are_wrapped_not_cut(tmp_path):
    """A long message is shown whole, wrapped at a word boundary, no line over 100 characters."""
    message = ("split_heads reshapes (batch, n, heads*p) straight to (batch, heads, n, p), so "
               "'head j' is a run of the flattened (position, feature) sequence, not column block "
               "j of every position. Reshape to (batch, n, heads, p) first, then transpose(1, 2).")
    report = SimpleNamespace(score=50.0, max_score=100.0, results=[], notes=[],
                             diagnoses=[SimpleNamespace(code="split.no-transpose", message=message)])
    grader = SimpleNamespace(seed=0, grade=lambda path: report)
    from io import StringIO
    out = StringIO()
    demo.run(grader, out=out)
    text = out.getvalue()
    told = text.split("(the first thing it says):\n")[1].split("\n\nGrade your own file")[0]
    lines = told.splitlines()
    assert all(len(line) <= demo.WIDTH for line in lines)
    assert len(lines) > len(demo.EXAMPLES)            # wrapped, not cut
    joined = " ".join(told.split())
    assert joined.count(" ".join(message.split())) == len(demo.EXAMPLES)


# --- messages ----------------------------------------------------------------------------------

def string_constants(path: Path):
    """Every string literal of a module (f-string parts included), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            yield node.value


STUDENT_FACING = ["checks/*.py", "diagnoses/*.py", "writers/*.py", "runner.py", "compare.py",
                  "scoring.py", "submission.py"]
JARGON = [r"\bSPEC\b", r"\bTAXONOMY\b", r"case '", r"\bon case\b"]


def test_messages_to_students_use_plain_words():
    """No feedback string names the SPEC, the TAXONOMY, or an input by its internal case
    name; and no check's purpose (what `checks` prints) cites the SPEC."""
    found = []
    for pattern in STUDENT_FACING:
        for path in sorted((ROOT / "autograder").glob(pattern)):
            for text in string_constants(path):
                found += [f"{path.relative_to(ROOT)}: {text!r}" for j in JARGON
                          if re.search(j, text)]
    for name, check in registry.load_all().items():
        found += [f"{name}: {check.doc!r}" for j in JARGON if re.search(j, check.doc)]
    assert not found, "\n".join(found)


def test_install_hints_work_from_a_clone():
    """No message tells someone to `pip install mha-autograder…`: it is not on PyPI."""
    hits = []
    for path in sorted((ROOT / "autograder").rglob("*.py")):
        for text in string_constants(path):
            if re.search(r"pip install\s+['\"]?mha-autograder", text):
                hits.append(f"{path.relative_to(ROOT)}: {text!r}")
    assert not hits, "\n".join(hits)


def test_no_broad_exception_becomes_a_usage_error():
    """In commands.py and cli.py, no handler of a broad type (ValueError, ImportError,
    OSError, Exception, ...) raises UsageError or returns EXIT_USAGE: only the grader's own
    error types (RubricError, LoadError, BatchError, ...) and UsageError itself lead to 2."""
    broad = {"ValueError", "ImportError", "ModuleNotFoundError", "OSError", "Exception",
             "BaseException", "LookupError", "TypeError", "RuntimeError"}
    found = []
    for name in ("commands.py", "cli.py"):
        tree = ast.parse((ROOT / "autograder" / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ExceptHandler) or node.type is None:
                continue
            types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            caught = {t.id for t in types if isinstance(t, ast.Name)} & broad
            names = {n.id for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
            if caught and names & {"UsageError", "EXIT_USAGE"}:
                found.append(f"{name}:{node.lineno} turns {sorted(caught)} into a usage error")
    assert not found, "\n".join(found)


def test_format_choices_come_from_the_writers_registry(monkeypatch):
    """Are `grade --format`'s choices and help the writers' registry (a new writer module
    listed in autograder.writers.MODULES appears without touching cli.py)?"""
    from autograder import writers
    parser = cli.build_parser()
    grade = next(a for a in parser._subparsers._group_actions[0].choices["grade"]._actions
                 if "--format" in a.option_strings)
    assert tuple(grade.choices) == tuple(writers.MODULES) == tuple(writers.WRITERS)
    assert all(f"{name}: {text}" in grade.help for name, text in writers.HELP.items())
    extra = SimpleNamespace(render=lambda report: "x\n", HELP="a test format")
    monkeypatch.setitem(writers.HELP, "tsv", extra.HELP)
    grade = next(a for a in cli.build_parser()._subparsers._group_actions[0].choices["grade"]._actions
                 if "--format" in a.option_strings)
    assert "tsv" in grade.choices and "tsv: a test format" in grade.help


def test_the_demos_syntax_error_line_quotes_the_line():
    """A syntax error's message puts the offending line under 'The line:' on a line of its
    own: does the demo's one-line summary keep it (it once ended at 'The line:')?"""
    message = ("syntax error in mha.py, line 84: expected ':'. The line:\n    def broken(:\n"
               "              ^\nPython cannot import the file, so no check could run.")
    report = SimpleNamespace(score=0.0, max_score=100.0, results=[], notes=[message],
                             diagnoses=[])
    line = demo._headline(report)
    assert "The line: def broken(: Python cannot import" in line and "^" not in line
