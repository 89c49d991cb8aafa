# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Internals of the SGLang emulator (llmops.sglang test double); not part of SGLang's API."""
