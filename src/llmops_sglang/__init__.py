"""Python API and CLI over ansible-runner for the llmops.sglang Ansible collection (a package of its own).

The collection is installed apart (ansible-galaxy collection install); this package finds it on the collections path
(llmops_sglang.collection). Its version is the distribution's, declared once in pyproject.toml.
"""
from __future__ import annotations

import importlib.metadata

__version__ = importlib.metadata.version("llmops-sglang")
