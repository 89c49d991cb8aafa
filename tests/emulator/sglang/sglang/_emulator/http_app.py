# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang's HTTP API (python/sglang/srt/entrypoints/http_server.py) on aiohttp, backed by the emulated scheduler.

Native /generate streams cumulative text (SGLang's default) with incremental output_ids; the
OpenAI endpoints stream deltas and, with stream_options.include_usage, a final usage chunk with
empty choices. Token counts follow sglang._emulator.tokens and are reported in usage/meta_info.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from sglang._emulator import tokens
from sglang._emulator.capacity import MemoryPlan
from sglang._emulator.model_shape import ModelShape
from sglang._emulator.profile import emulated_version
from sglang._emulator.scheduler import GenRequest, Scheduler
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger("sglang.srt.entrypoints.http_server")

HEALTH_CHECK_TIMEOUT_S = 20.0
FLUSH_CACHE_BODY = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, "
    "the operation will not be performed.)\n"
)
ADMIN_PATHS = frozenset({"/flush_cache"})
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
OPENAI_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class RequestError(ValueError):
    """A client error that becomes HTTP 400 in the endpoint's error format."""


@dataclasses.dataclass(frozen=True)
class Progress:
    """What changed since the last update of a request: tokens [start, stop) are new."""

    start: int
    stop: int
    request: GenRequest

    @property
    def finished(self) -> bool:
        return self.request.done


class HttpApi:
    def __init__(
        self, args: ServerArgs, shape: ModelShape, plan: MemoryPlan, scheduler: Scheduler, memory_usage: dict
    ) -> None:
        self.args, self.shape, self.plan, self.scheduler = args, shape, plan, scheduler
        self.memory_usage = memory_usage
        self.ready = False
        self.shutting_down = False
        self.created = int(time.time())

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth], client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/model_info", self.model_info)
        app.router.add_get("/get_server_info", self.get_server_info)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/generate", self.generate)
        app.router.add_put("/generate", self.generate)
        app.router.add_route("GET", "/flush_cache", self.flush_cache)
        app.router.add_route("POST", "/flush_cache", self.flush_cache)
        if self.args.enable_metrics:
            app.router.add_get("/metrics", self.metrics)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        if request.method == "OPTIONS" or request.path.startswith(("/health", "/metrics")):
            return await handler(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if request.path in ADMIN_PATHS and self.args.admin_api_key:
            allowed = {self.args.admin_api_key}
        else:
            allowed = {key for key in (self.args.api_key, self.args.admin_api_key) if key}
        if allowed and token not in allowed:
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    # --- health and info -------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if not self.ready or self.shutting_down:
            return web.Response(status=503)
        probe = self._new_request(f"HEALTH_CHECK_{time.time()}", 1, 1, True, "")
        progressed = self.scheduler.wait_for_progress()
        self.scheduler.submit(probe)
        try:
            await _wait_with_timeout(progressed, HEALTH_CHECK_TIMEOUT_S)
        except TimeoutError:
            probe.abort("health check timed out")
            logger.error(
                f"Health check failed. Server couldn't get a response from detokenizer for last "
                f"{HEALTH_CHECK_TIMEOUT_S:g} seconds."
            )
            return web.Response(status=503)
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": self.args.model_path,
            "tokenizer_path": self.args.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": self.args.preferred_sampling_params,
            "weight_version": self.args.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.shape.model_type,
            "architectures": [self.shape.architecture],
        })

    async def get_server_info(self, request: web.Request) -> web.Response:
        logger.warning(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
        return await self.server_info(request)

    async def server_info(self, request: web.Request) -> web.Response:
        server_args = self.args.release_dict()
        stats = self.scheduler.stats
        internal_state = {
            **server_args,
            "last_gen_throughput": stats.last_gen_throughput,
            "memory_usage": self.memory_usage,
            "effective_max_running_requests_per_dp": self.plan.max_running_requests,
            "num_running_reqs": len(self.scheduler.running),
            "num_queue_reqs": len(self.scheduler.waiting),
        }
        if self.args.speculative_algorithm:
            steps = stats.accept_length_steps
            internal_state["avg_spec_accept_length"] = stats.accept_length_sum / steps if steps else None
        return web.json_response({
            **server_args,
            "status": "ready",
            "max_total_num_tokens": self.plan.max_total_num_tokens,
            "max_req_input_len": self.plan.max_req_input_len,
            "internal_states": [internal_state],
            "version": emulated_version(),
            "emulator": True,
            "emulator_behind_s": stats.behind_s,
        })

    async def models(self, request: web.Request) -> web.Response:
        name = self.args.served_model_name
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": self.created, "owned_by": "sglang", "root": name,
            "parent": None, "max_model_len": self.plan.context_len,
        }]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        flushed = self.scheduler.try_flush_cache()
        return web.Response(text=FLUSH_CACHE_BODY, status=200 if flushed else 400)

    async def metrics(self, request: web.Request) -> web.Response:
        stats, scheduler = self.scheduler.stats, self.scheduler
        labels = f'{{model_name="{self.args.served_model_name}"}}'
        samples = [
            ("num_running_reqs", "gauge", "The number of running requests.", len(scheduler.running)),
            ("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", len(scheduler.waiting)),
            ("num_used_tokens", "gauge", "The number of used tokens.", scheduler.used_tokens),
            ("gen_throughput", "gauge", "The generation throughput (token/s).", stats.last_gen_throughput),
            ("prompt_tokens_total", "counter", "Number of prefill tokens processed.", stats.prompt_tokens),
            ("generation_tokens_total", "counter", "Number of generation tokens processed.", stats.generation_tokens),
            ("num_requests_total", "counter", "Number of requests processed.", stats.finished_requests),
        ]
        lines = []
        for name, kind, help_text, value in samples:
            lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} {kind}",
                      f"sglang:{name}{labels} {float(value)}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    # --- generation ------------------------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            sampling = body.get("sampling_params") or {}
            prompts = self._native_prompts(body)
            if body.get("stream") and len(prompts) > 1:
                raise RequestError("Streaming batched /generate requests is not supported by the SGLang emulator.")
            requests = [
                self._new_request(body.get("rid") or uuid.uuid4().hex, input_len,
                                  int(sampling.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)),
                                  bool(sampling.get("ignore_eos", False)), key, prompt)
                for input_len, key, prompt in prompts
            ]
        except RequestError as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        if body.get("stream"):
            return await self._stream(request, requests[0], self._native_chunks)
        results = [await self._run_to_end(r) for r in requests]
        payloads = [self._native_payload(p, full=True) for p in results]
        return web.json_response(payloads if isinstance(body.get("text"), list) or _is_batch_ids(body) else payloads[0])

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            input_len, key, prompt = self._openai_prompt(body.get("prompt"))
            max_tokens = body.get("max_tokens")
            gen = self._new_request(f"cmpl-{uuid.uuid4().hex}", input_len,
                                    OPENAI_COMPLETION_MAX_TOKENS if max_tokens is None else int(max_tokens),
                                    bool(body.get("ignore_eos", False)), key, prompt)
        except RequestError as exc:
            return _openai_error(str(exc))
        model = body.get("model") or self.args.served_model_name
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, gen, self._completion_chunks(model, include_usage))
        progress = await self._run_to_end(gen)
        return web.json_response({
            "id": gen.rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": tokens.output_text(0, gen.generated), "logprobs": None,
                         "finish_reason": _openai_finish(gen), "matched_stop": _matched_stop(gen)}],
            "usage": _usage(progress.request),
        })

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RequestError("messages must be a non-empty list")
            prompt = tokens.render_chat(messages)
            max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
            input_len = tokens.count_text_tokens(prompt)
            limit = self.plan.context_len - input_len if max_tokens is None else int(max_tokens)
            gen = self._new_request(uuid.uuid4().hex, input_len, limit, bool(body.get("ignore_eos", False)), prompt,
                                    prompt)
        except RequestError as exc:
            return _openai_error(str(exc))
        model = body.get("model") or self.args.served_model_name
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, gen, self._chat_chunks(model, include_usage))
        await self._run_to_end(gen)
        return web.json_response({
            "id": gen.rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": tokens.output_text(0, gen.generated),
                                                 "reasoning_content": None, "tool_calls": None},
                         "logprobs": None, "finish_reason": _openai_finish(gen), "matched_stop": _matched_stop(gen)}],
            "usage": _usage(gen),
        })

    # --- request plumbing ------------------------------------------------------------------------

    def _new_request(self, rid: str, input_len: int, max_new_tokens: int, ignore_eos: bool, key: str,
                     prompt: str | list[int] | None = None) -> GenRequest:
        """`key` picks the natural answer length; `prompt` (text or token ids) is what the prefix cache matches."""
        if input_len >= self.plan.context_len:
            raise RequestError(
                f"The input ({input_len} tokens) is longer than the model's context length "
                f"({self.plan.context_len} tokens)."
            )
        if input_len > self.plan.max_req_input_len:
            raise RequestError(
                f"The input ({input_len} tokens) is longer than the maximum request input length "
                f"({self.plan.max_req_input_len} tokens)."
            )
        if max_new_tokens < 0:
            raise RequestError("max_new_tokens must be at least 0")
        return GenRequest(
            rid=rid, input_len=input_len, max_new_tokens=max(max_new_tokens, 1),
            stop_after=None if ignore_eos else tokens.natural_length(key), eos_token_id=self.shape.vocab_size - 1,
            prompt=prompt,
        )

    def _native_prompts(self, body: dict[str, Any]) -> list[tuple[int, str, str | list[int]]]:
        """(token count, natural-length key, prompt) of each prompt of a native request."""
        text, input_ids = body.get("text"), body.get("input_ids")
        if input_ids is not None:
            batch = input_ids if _is_batch_ids(body) else [input_ids]
            return [(len(ids), json.dumps(ids[:64]), ids) for ids in batch]
        if isinstance(text, str):
            return [(tokens.count_text_tokens(text), text, text)]
        if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            return [(tokens.count_text_tokens(t), t, t) for t in text]
        raise RequestError("Either text or input_ids should be provided.")

    def _openai_prompt(self, prompt: Any) -> tuple[int, str, str | list[int]]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return tokens.count_text_tokens(prompt), prompt, prompt
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return len(prompt), json.dumps(prompt[:64]), prompt
        raise RequestError("prompt must be a string, a list of token ids, or a list with one of those")

    async def _updates(self, gen: GenRequest) -> AsyncIterator[Progress]:
        """Submit the request and yield its progress until it finishes; aborts it if the consumer stops."""
        if self.args.log_requests:
            logger.info(f"Receive: obj=GenerateReqInput(rid={gen.rid!r}, input_len={gen.input_len}, "
                        f"sampling_params={{'max_new_tokens': {gen.max_new_tokens}}})")
        self.scheduler.submit(gen)
        sent = 0
        try:
            while True:
                await gen.updated.wait()
                gen.updated.clear()
                if gen.done and self.args.log_requests:
                    logger.info(f"Finish: obj=GenerateReqInput(rid={gen.rid!r}), out={{'meta_info': {{"
                                f"'prompt_tokens': {gen.input_len}, 'completion_tokens': {gen.generated}, "
                                f"'finish_reason': {gen.finish_reason!r}}}}}")
                if gen.generated > sent or gen.done:
                    yield Progress(sent, gen.generated, gen)
                    sent = gen.generated
                if gen.done:
                    return
        finally:
            gen.abort("client disconnected")

    async def _run_to_end(self, gen: GenRequest) -> Progress:
        async with contextlib.aclosing(self._updates(gen)) as updates:
            async for progress in updates:
                if progress.finished:
                    return Progress(0, gen.generated, gen)
        raise RuntimeError("request ended without finishing")

    async def _stream(
        self, request: web.Request, gen: GenRequest,
        chunks: Callable[[Progress], list[dict[str, Any]]],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        async with contextlib.aclosing(self._updates(gen)) as updates:
            async for progress in updates:
                if progress.finished and gen.finish_reason["type"] == "abort":
                    error = {"error": {"message": gen.finish_reason["message"]}}
                    await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
                    break
                await response.write(b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in chunks(progress)))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _native_chunks(self, progress: Progress) -> list[dict[str, Any]]:
        return [self._native_payload(progress, full=False)]

    def _native_payload(self, progress: Progress, full: bool) -> dict[str, Any]:
        gen = progress.request
        incremental = self.args.incremental_streaming_output and not full
        meta: dict[str, Any] = {
            "id": gen.rid, "finish_reason": gen.finish_reason, "prompt_tokens": gen.input_len,
            "weight_version": self.args.weight_version, "completion_tokens": gen.generated, "cached_tokens": gen.cached_tokens,
        }
        if self.args.speculative_algorithm:
            meta["spec_verify_ct"] = gen.verify_steps
        if gen.done:
            meta["e2e_latency"] = gen.finished_at - gen.arrival
        return {
            "text": tokens.output_text(progress.start if incremental else 0, progress.stop),
            "output_ids": tokens.output_ids(0 if full else progress.start, progress.stop),
            "meta_info": meta,
        }

    def _completion_chunks(self, model: str, include_usage: bool) -> Callable[[Progress], list[dict[str, Any]]]:
        created = int(time.time())

        def chunks(progress: Progress) -> list[dict[str, Any]]:
            gen = progress.request
            base = {"id": gen.rid, "object": "text_completion", "created": created, "model": model}
            out = [{**base, "choices": [{
                "index": 0, "text": tokens.output_text(progress.start, progress.stop), "logprobs": None,
                "finish_reason": _openai_finish(gen), "matched_stop": _matched_stop(gen)}], "usage": None}]
            if progress.finished and include_usage:
                out.append({**base, "choices": [], "usage": _usage(gen)})
            return out

        return chunks

    def _chat_chunks(self, model: str, include_usage: bool) -> Callable[[Progress], list[dict[str, Any]]]:
        created = int(time.time())

        def chunks(progress: Progress) -> list[dict[str, Any]]:
            gen = progress.request
            base = {"id": gen.rid, "object": "chat.completion.chunk", "created": created, "model": model}
            out = []
            if progress.start == 0:
                out.append({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                 "logprobs": None, "finish_reason": None}], "usage": None})
            out.append({**base, "choices": [{
                "index": 0, "delta": {"content": tokens.output_text(progress.start, progress.stop)}, "logprobs": None,
                "finish_reason": _openai_finish(gen), "matched_stop": _matched_stop(gen)}], "usage": None})
            if progress.finished and include_usage:
                out.append({**base, "choices": [], "usage": _usage(gen)})
            return out

        return chunks


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"Invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    return body


def _is_batch_ids(body: dict[str, Any]) -> bool:
    ids = body.get("input_ids")
    return isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)


async def _wait_with_timeout(awaitable: Awaitable[None], timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        await awaitable


def _openai_finish(gen: GenRequest) -> str | None:
    if not gen.done:
        return None
    return {"length": "length", "stop": "stop", "abort": "abort"}[gen.finish_reason["type"]]


def _matched_stop(gen: GenRequest) -> int | None:
    return gen.finish_reason.get("matched") if gen.done else None


def _usage(gen: GenRequest) -> dict[str, int]:
    return {"prompt_tokens": gen.input_len, "completion_tokens": gen.generated,
            "total_tokens": gen.input_len + gen.generated}


def _openai_error(message: str) -> web.Response:
    return web.json_response(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}, status=400
    )
