# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The emulator's stand-in tokenizer: deterministic token counts and generated text.

Prompt text counts as ceil(len(text) / 4) tokens (at least 1), i.e. ~4 characters per token;
token-id prompts count len(input_ids). Chat messages are rendered with a ChatML-style template
first. Generated token i of a request is a common English word (token id 1000 + word index),
so outputs are readable and exactly as long as requested with ignore_eos. Without ignore_eos a
request "hits EOS" after a deterministic, prompt-dependent number of tokens.
"""
from __future__ import annotations

import zlib
from typing import Any

CHARS_PER_TOKEN = 4
FIRST_WORD_ID = 1000
_WORDS = (
    " the", " model", " serves", " tokens", " quickly", " and", " every", " request", " gets", " a", " fair",
    " share", " of", " the", " GPU", " while", " experts", " route", " each", " token", " to", " eight", " of",
    " many", " kernels", " that", " were", " tuned", " for", " this", " shape", ".", " Throughput", " grows",
    " with", " batch", " size", " until", " memory", " bandwidth", " runs", " out", ",", " then", " latency",
    " rises", " instead", ".",
)
# Natural answer lengths without ignore_eos: between these bounds, chosen from the prompt.
MIN_NATURAL_TOKENS, MAX_NATURAL_TOKENS = 24, 512


def count_text_tokens(text: str) -> int:
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def token_units(prompt: str | list[int], generated: int = 0) -> list[str] | list[int]:
    """The prompt and its first `generated` output tokens as the stand-in tokenizer's tokens (what the prefix
    cache compares): token ids as they are, text as 4-character pieces of the prompt followed by the output."""
    if isinstance(prompt, str):
        text = prompt + output_text(0, generated)
        return [text[start:start + CHARS_PER_TOKEN] for start in range(0, len(text), CHARS_PER_TOKEN)]
    return list(prompt) + output_ids(0, generated)


def render_chat(messages: list[dict[str, Any]]) -> str:
    """ChatML-style prompt the token count is taken from (with the assistant turn opened)."""
    parts = [f"<|im_start|>{m.get('role', 'user')}\n{_content_text(m.get('content'))}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def natural_length(prompt_key: str) -> int:
    """Tokens after which the emulated model would emit EOS for this prompt."""
    span = MAX_NATURAL_TOKENS - MIN_NATURAL_TOKENS
    return MIN_NATURAL_TOKENS + zlib.crc32(prompt_key.encode("utf-8", "replace")) % span


def output_ids(start: int, stop: int) -> list[int]:
    return [FIRST_WORD_ID + i % len(_WORDS) for i in range(start, stop)]


def output_text(start: int, stop: int) -> str:
    return "".join(_WORDS[i % len(_WORDS)] for i in range(start, stop))
