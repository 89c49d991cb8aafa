# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Print a real SGLang release's `launch_server --help` and option table, from the release's own code.

Run as a script in a fresh interpreter (it installs import hooks):
``python real_cli.py SRC_DIR DEPS_DIR`` with SRC_DIR the unpacked wheel (holding ``sglang/``) and
DEPS_DIR a directory of light pure dependencies the CLI code needs (msgspec for 0.5.20+). Prints one
JSON document: ``{"prog", "help", "options": [{option_strings, dest, nargs, choices, const, takes_value,
action, hidden, const_value, metavar, type, required, new_flag, help}], "fields": [[name, repr of default], ...]}`` (hidden:
``help=argparse.SUPPRESS``, accepted but not listed by --help; const_value: what SGLang's
``DeprecatedStoreConstAction`` stores; fields: the ServerArgs fields a ``server_args=`` dump lists, in order).

The release's ``ServerArgs.add_cli_args`` (sglang/srt/server_args.py) runs unchanged on an
``argparse.ArgumentParser(prog="sglang serve")`` as ``prepare_server_args`` builds it. Heavy
dependencies (torch, triton, transformers, ...) are not installed: any module that cannot be found
becomes a stub whose attributes are stubs, and an ``sglang`` module other than server_args and the
argument groups that fails while importing (because it computes with a stub) keeps what it defined and
answers stubs for the rest. Choices computed from stubbed modules therefore come out empty; the
options themselves, their nargs and their static choices are the release's.
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
import warnings

# Modules whose code must run for real: a failure there is a failure of this probe.
_MUST_RUN = ("sglang.srt.server_args", "sglang.srt.arg_groups")


class _Anything:
    """A stand-in for any object of a missing library: callable, subclassable, iterable (empty), falsy."""

    def __init__(self, name: str = "stub") -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self._name}.{name}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator
        return _Anything(f"{self._name}()")

    def __mro_entries__(self, bases):
        return (object,)

    def __getitem__(self, key):
        return _Anything(f"{self._name}[]")

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        return 0.0

    def __or__(self, other):
        return self

    __ror__ = __and__ = __rand__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __or__

    def __add__(self, other):
        return other if isinstance(other, (list, tuple, str)) else self  # stub_choices + ["all"]

    __radd__ = __add__

    def __eq__(self, other) -> bool:
        return other is self

    def __hash__(self) -> int:
        return id(self)

    def __lt__(self, other) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __contains__(self, item) -> bool:
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<stub {self._name}>"

    __str__ = __repr__


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _Anything(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


class _TolerantLoader(importlib.abc.Loader):
    """Runs an sglang module for real; if it fails, it keeps its definitions and stubs the rest."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        try:
            self.loader.exec_module(module)
        except Exception:  # pylint: disable=broad-except
            if module.__name__.startswith(_MUST_RUN):
                raise
            module.__class__ = _StubModule


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, src: str) -> None:
        self.src = src

    def find_spec(self, name, path=None, target=None):
        if name == "sglang" or name.startswith("sglang."):
            spec = importlib.machinery.PathFinder.find_spec(name, path if "." in name else [self.src])
            if spec is None:
                return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)
            if spec.loader is not None and not name.startswith(_MUST_RUN):
                spec.loader = _TolerantLoader(spec.loader)
            return spec
        return None


class _MissingFinder(importlib.abc.MetaPathFinder):
    """Last on the meta path: whatever no other finder has is a stub package."""

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)


def _scalar(value):
    return value if isinstance(value, (int, float, str)) else str(value)


def _value_of(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_value_of(item) for item in value]
        return sorted(items, key=str) if isinstance(value, (set, frozenset)) else items
    return repr(value)


def main() -> None:
    src, deps = sys.argv[1], sys.argv[2]
    sys.path[:0] = [deps]
    sys.meta_path.insert(0, _Finder(src))
    sys.meta_path.append(_MissingFinder())
    warnings.simplefilter("ignore")
    os.environ["COLUMNS"] = "100"  # argparse wraps help at the terminal width: fixed for a stable text
    server_args = importlib.import_module("sglang.srt.server_args")
    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args.ServerArgs.add_cli_args(parser)
    options = []
    for action in parser._actions:  # pylint: disable=protected-access
        if not action.option_strings or isinstance(action, argparse._HelpAction):  # pylint: disable=protected-access
            continue
        options.append({
            "option_strings": list(action.option_strings), "dest": action.dest,
            "nargs": action.nargs if action.nargs is None or isinstance(action.nargs, (int, str)) else repr(action.nargs),
            "choices": None if action.choices is None else [_scalar(c) for c in _value_of(list(action.choices))],
            "const": _value_of(action.const), "takes_value": action.nargs != 0,
            "action": type(action).__name__, "hidden": action.help == argparse.SUPPRESS,
            "const_value": _value_of(getattr(action, "const_value", None)),
            "metavar": _value_of(action.metavar), "type": getattr(action.type, "__name__", None),
            "required": bool(action.required),
            "new_flag": getattr(action, "new_flag", None),
            "help": None if action.help in (None, argparse.SUPPRESS) else str(action.help),
        })
    json.dump({"prog": parser.prog, "help": parser.format_help(), "options": options,
               "fields": _fields(server_args)}, sys.stdout)


def _fields(module) -> list[list]:
    """The ServerArgs fields in declaration order with their defaults' repr: what the release's
    ``server_args=`` dump lists (a dataclass before 0.5.20, a msgspec record from 0.5.20)."""
    import dataclasses

    cls = module.ServerArgs
    if dataclasses.is_dataclass(cls):
        declared = [(f.name, f.default, f.default_factory, f.repr) for f in dataclasses.fields(cls)]
        missing = (dataclasses.MISSING,)
    else:
        import msgspec.structs

        declared = [(f.name, f.default, f.default_factory, True) for f in msgspec.structs.fields(cls)]
        missing = (msgspec.NODEFAULT,)
    fields = []
    for name, default, factory, shown in declared:
        if not shown:
            continue
        value = default
        if value in missing:
            try:
                value = factory() if factory not in missing else None
            except Exception:  # pylint: disable=broad-except
                value = None
        fields.append([name, repr(value)])
    return fields


if __name__ == "__main__":
    main()
