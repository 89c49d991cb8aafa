# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Version of the stand-in checkout, as real ones tell it since sglang 0.5.10: this file only imports the
setuptools-scm-written ``_version.py`` (absent in a plain clone, whose version is its git tag; the emulator
build tags its copy ``v<emulator version>``)."""
try:
    from sglang._version import __version__
except ImportError:
    __version__ = "0.0.0.dev0"
