# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
