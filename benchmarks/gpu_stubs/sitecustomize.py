"""Import-time stand-ins for SGLang's native packages on the benchmark GPU host (benchmarks/moe_engine_gpu.py).

The device machine has torch and Triton but not sgl_kernel (a CUDA build of several hundred MB), which SGLang's
modules import at module level on CUDA although the Triton MoE kernel the engine tunes never calls it. Each name in
LLMOPS_GPU_STUBS (comma-separated) that does not import for real becomes a package whose every attribute and
submodule is a stand-in raising NotImplementedError when called, so an import succeeds and a call says what is
missing. Only on PYTHONPATH in the benchmark's device command; never shipped to a host.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

_NAMES = {name.strip() for name in os.environ.get("LLMOPS_GPU_STUBS", "").split(",") if name.strip()}


class _Missing:
    """Any name of a stand-in package: its attributes are stand-ins too; calling one raises."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self._name} is a stand-in on this benchmark host (not installed)")

    def __getitem__(self, key):
        return _Missing(f"{self._name}[{key!r}]")

    def __mro_entries__(self, bases):  # `class X(stub.Base)` gets a plain base
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.__name__}.{attr}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in _NAMES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


_real = {name for name in _NAMES if importlib.util.find_spec(name) is not None}
_NAMES -= _real
if _NAMES:
    sys.meta_path.append(_StubFinder())
