# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The benchmark's requests: unique fixed-length prompts (token ids, or words for the chat endpoint) and the JSON body
of one request (temperature 0, ignore_eos, usage in the stream).

Private to the llmops.sglang collection; do not use it from other collections. Pure and stdlib-only.
"""
from __future__ import annotations

import random
import typing as t

# Token ids present in every modern vocabulary (>= 32k entries) and clear of the special tokens at the low end.
PROMPT_TOKEN_IDS = range(1000, 30000)
# Common English words: one BPE token each (with the leading space) in the usual tokenizers, so word count tracks
# token count closely and the calibration request only has to correct the chat template's overhead.
PROMPT_WORDS = (
    "time year people way day man thing woman life child world school state family student group country problem "
    "hand part place case week company system program question work government number night point home water room "
    "mother area money story fact month lot right study book eye job word business issue side kind head house "
    "service friend father power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war history party result "
    "change morning reason research girl guy moment air teacher force education"
).split()


def token_id_prompt(input_len: int, seed: int | str) -> list[int]:
    return random.Random(seed).choices(PROMPT_TOKEN_IDS, k=input_len)


def text_prompt(words: int, seed: int | str) -> str:
    return " ".join(random.Random(seed).choices(PROMPT_WORDS, k=words))


def request_body(endpoint: str, model: str | None, prompt: list[int] | str, output_len: int, *,
                 stream: bool = True) -> dict:
    """JSON body for one fixed-length request (temperature 0, ignore_eos, usage in the stream)."""
    if endpoint == "generate":
        return {"input_ids": prompt, "stream": stream,
                "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0.0}}
    body: dict[str, t.Any] = {"model": model, "max_tokens": output_len, "temperature": 0.0, "ignore_eos": True,
                              "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body
