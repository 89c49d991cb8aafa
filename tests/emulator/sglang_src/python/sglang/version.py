# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Release of the SGLang source checkout this stand-in imitates (real checkouts carry this file)."""
__version__ = "0.5.11"
