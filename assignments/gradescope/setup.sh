#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image; the zip is
# unpacked in /autograder/source. It installs Python and the pinned dependencies of
# requirements.txt into a virtual environment, /autograder/venv. torch comes from
# PyTorch's CPU wheel index: Gradescope has no GPU, and the CPU wheel is a small
# fraction of the default CUDA one.
#
# The autograder itself is deliberately not pip-installed: run_autograder imports it from
# /autograder/source, the folder the grader hides from student code. A second copy in
# site-packages would let a submission import the reference solution.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
CPU_INDEX="https://download.pytorch.org/whl/cpu"

if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends python3 python3-venv python3-pip
fi
python3 -m venv "$ROOT/venv"
PY="$ROOT/venv/bin/python"
"$PY" -m pip install -q --upgrade pip
# -r, not the line itself: a pin may carry a python_version marker (see requirements.txt).
"$PY" -m pip install -q --index-url "$CPU_INDEX" -r <(grep -E '^torch==' "$SOURCE/requirements.txt")
"$PY" -m pip install -q -r "$SOURCE/requirements.txt"
# Fail the image build here rather than the first student's submission.
cd "$SOURCE" && PYTHONPATH="$SOURCE" "$PY" -m autograder checks >/dev/null
echo "setup.sh: the autograder is ready ($("$PY" --version), torch $("$PY" -c 'import torch; print(torch.__version__)'))"
