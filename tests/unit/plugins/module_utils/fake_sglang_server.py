# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A tiny SGLang-shaped streaming server for the bench client and module tests (not the full emulator).

It answers /v1/models, /v1/completions, /v1/chat/completions and /generate with SSE shaped like SGLang's
(python/sglang/srt/entrypoints/http_server.py and its OpenAI serving code: usage chunk with ``choices: []``
before ``data: [DONE]``, cumulative /generate text with
meta_info), with a known service time: ``--ttft-ms`` before the first token, then one token every
``--token-ms``. It counts requests in flight so tests can check the client's concurrency from the server side
(GET /stats), enforces ``--api-key`` like SGLang (401 ``{"error": "Unauthorized"}``), and can under-deliver
tokens (``--short-by``) to exercise the client's token-mismatch check, and fail every N-th generation request
with HTTP 503 (``--fail-every``) to exercise the failed-share limit.

Run: ``python fake_sglang_server.py --port 0 ...``; it prints ``PORT <n>`` once listening on 127.0.0.1.
Tests use ``running_server(...)``, which starts it as a subprocess and always kills it afterwards.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import selectors
import subprocess
import sys
import time
import typing as t
import urllib.request

from aiohttp import web

CHAT_TEMPLATE_TOKENS = 11  # what a chat template adds around the user message, as real templates do
MODEL_ID = "/models/Qwen3.5-122B-A10B"


class Counters:
    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self.completed = 0  # streams that reached [DONE] (not cut by the client)
        self.max_tokens: dict[str, int] = {}  # /v1/completions requests per max_tokens asked for

    def enter(self) -> None:
        self.in_flight += 1
        self.requests += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1


def sse(document: t.Any) -> bytes:
    return b"data: " + json.dumps(document).encode() + b"\n\n"


def chat_prompt_tokens(body: dict) -> int:
    return sum(len(str(message.get("content", "")).split()) for message in body["messages"]) + CHAT_TEMPLATE_TOKENS


def completions_chunk(rid: str, created: int, text: str, finish: str | None) -> dict:
    return {"id": rid, "object": "text_completion", "created": created, "model": MODEL_ID,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": None}],
            "usage": None}


def chat_chunk(rid: str, created: int, delta: dict, finish: str | None) -> dict:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": MODEL_ID,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                         "matched_stop": None}], "usage": None}


def usage_chunk(rid: str, created: int, kind: str, prompt_tokens: int, completion_tokens: int) -> dict:
    return {"id": rid, "object": kind, "created": created, "model": MODEL_ID, "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class FakeSGLang:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.counters = Counters()
        self.next_id = 0

    def output_tokens(self, requested: int) -> int:
        return max(1, requested - self.options.short_by)

    async def generate_tokens(self) -> t.AsyncIterator[int]:
        await asyncio.sleep(self.options.ttft_ms / 1000.0)
        for index in range(10**9):
            yield index
            await asyncio.sleep(self.options.token_ms / 1000.0)

    @web.middleware
    async def auth(self, request: web.Request, handler: t.Callable) -> web.StreamResponse:
        key = self.options.api_key
        if key and not request.path.startswith("/health") and request.path != "/stats":
            if request.headers.get("Authorization") != f"Bearer {key}":
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": MODEL_ID, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": MODEL_ID,
             "max_model_len": 262144}]})

    async def stats(self, _request: web.Request) -> web.Response:
        counters = self.counters
        return web.json_response({"in_flight": counters.in_flight, "max_in_flight": counters.max_in_flight,
                                  "requests": counters.requests, "completed": counters.completed,
                                  "max_tokens": counters.max_tokens})

    async def stream(self, request: web.Request, chunks: t.AsyncIterator[bytes]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        self.counters.enter()
        try:
            async for chunk in chunks:
                await response.write(chunk)
            await response.write(b"data: [DONE]\n\n")
            self.counters.completed += 1
        finally:
            self.counters.leave()
        await response.write_eof()
        return response

    def new_id(self) -> str:
        self.next_id += 1
        return f"{self.next_id:032x}"

    @web.middleware
    async def faults(self, request: web.Request, handler: t.Callable) -> web.StreamResponse:
        every = self.options.fail_every
        if every and request.method == "POST":
            self.generation_requests = getattr(self, "generation_requests", 0) + 1
            if self.generation_requests % every == 0:
                return web.json_response({"error": {"message": "emulated overload"}}, status=503)
        return await handler(request)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        asked = str(body["max_tokens"])
        self.counters.max_tokens[asked] = self.counters.max_tokens.get(asked, 0) + 1
        prompt = body["prompt"]
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        return await self.stream(request, self.openai_chunks(body, "text_completion", prompt_tokens))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt_tokens = chat_prompt_tokens(body)
        if not body.get("stream"):
            completion = self.output_tokens(body["max_tokens"])
            return web.json_response({
                "id": self.new_id(), "object": "chat.completion", "created": int(time.time()), "model": MODEL_ID,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": " the" * completion},
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                          "total_tokens": prompt_tokens + completion}})
        return await self.stream(request, self.openai_chunks(body, "chat.completion.chunk", prompt_tokens))

    async def openai_chunks(self, body: dict, kind: str, prompt_tokens: int) -> t.AsyncIterator[bytes]:
        rid, created = self.new_id(), int(time.time())
        total = self.output_tokens(body["max_tokens"])
        chat = kind == "chat.completion.chunk"
        if chat:
            yield sse(chat_chunk(rid, created, {"role": "assistant", "content": ""}, None))
        async for index in self.generate_tokens():
            text = f" tok{index}"
            yield sse(chat_chunk(rid, created, {"content": text}, None) if chat
                      else completions_chunk(rid, created, text, None))
            if index + 1 == total:
                break
        yield sse(chat_chunk(rid, created, {}, "length") if chat else completions_chunk(rid, created, "", "length"))
        if (body.get("stream_options") or {}).get("include_usage"):
            yield sse(usage_chunk(rid, created, kind, prompt_tokens, total))

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        return await self.stream(request, self.generate_chunks(body))

    async def generate_chunks(self, body: dict) -> t.AsyncIterator[bytes]:
        rid, started = self.new_id(), time.perf_counter()
        total = self.output_tokens(body["sampling_params"]["max_new_tokens"])
        text, output_ids = "", []
        async for index in self.generate_tokens():
            text += f" tok{index}"
            output_ids.append(1000 + index)
            finished = index + 1 == total
            meta = {"id": rid, "finish_reason": {"type": "length", "length": total} if finished else None,
                    "prompt_tokens": len(body["input_ids"]), "completion_tokens": index + 1, "cached_tokens": 0}
            if finished:
                meta["e2e_latency"] = time.perf_counter() - started
            yield sse({"text": text, "output_ids": output_ids, "meta_info": meta})
            if finished:
                break

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth, self.faults])
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/stats", self.stats)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/generate", self.generate)
        return app


async def serve(options: argparse.Namespace) -> None:
    runner = web.AppRunner(FakeSGLang(options).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", options.port, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # the only way to learn the port aiohttp bound for port 0
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


def _read_port(process: subprocess.Popen, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(timeout=0.1):
                line = process.stdout.readline()
                if line.startswith("PORT "):
                    return int(line.split()[1])
                if not line:
                    break
    raise RuntimeError(f"fake SGLang server did not start (exit code {process.poll()})")


@contextlib.contextmanager
def running_server(*args: str, startup_timeout_s: float = 20.0) -> t.Iterator[tuple[str, subprocess.Popen]]:
    """Start the server on a random 127.0.0.1 port; yield (base_url, process); kill it on exit whatever happened."""
    process = subprocess.Popen([sys.executable, __file__, "--port", "0", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        yield f"http://127.0.0.1:{_read_port(process, startup_timeout_s)}", process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        process.stdout.close()


def server_stats(base_url: str) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(base_url + "/stats", timeout=10) as response:
        return json.load(response)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--token-ms", type=float, default=2.0)
    parser.add_argument("--api-key")
    parser.add_argument("--short-by", type=int, default=0)
    parser.add_argument("--fail-every", type=int, default=0)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
