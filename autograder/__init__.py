"""The autograder. Its modules and the reference (``solutions``) are always loaded from their
sources, never from ``__pycache__``: bytecode planted there (a ``.pyc`` with a forged header)
cannot stand in for the grader. Compiling the whole grader costs about 0.2 s of one core;
nothing is written. Only this file is read as Python reads any package
(``autograder.integrity`` checks every ``.pyc`` of the grader, this one's included, before
grading)."""
import importlib.machinery as _machinery
import sys as _sys
from pathlib import Path as _Path

_ROOT = _Path(__file__).resolve().parent.parent
_PACKAGES = ("autograder", "solutions")


class _SourceOnly(_machinery.SourceFileLoader):
    """Compiles the module's source every time; reads and writes no bytecode."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


class _GraderFinder:
    """Finds the grader's modules as the path finder does, then loads them from source; a
    grader module that resolves to anything but a source file of this project is refused."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.split(".")[0] not in _PACKAGES:
            return None
        spec = _machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.origin in (None, "namespace"):
            return spec
        origin = _Path(spec.origin).resolve()
        if not origin.is_relative_to(_ROOT):
            return spec if fullname.split(".")[0] == "solutions" else None
        if type(spec.loader) is not _machinery.SourceFileLoader:
            raise ImportError(f"{spec.origin} is not a source file: the grader loads its "
                              "modules from source only (planted code? see "
                              "autograder/integrity.py)", name=fullname)
        spec.loader = _SourceOnly(fullname, spec.origin)
        spec.cached = None
        return spec

    @classmethod
    def invalidate_caches(cls):
        pass


if not any(getattr(f, "__name__", "") == "_GraderFinder" for f in _sys.meta_path):
    _sys.meta_path.insert(0, _GraderFinder)
