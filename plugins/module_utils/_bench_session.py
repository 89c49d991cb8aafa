# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The native client's HTTP side: aiohttp (imported behind a guard, so the collection's sanity import test, stdlib
only, passes; the GPU host's SGLang venv ships it), the sweep's one ClientSession, the server's model
(GET /v1/models, also the sweep's early auth and reachability probe) and the runner's common part: unique prompts,
one streamed request into its record, the chat prompt calibration. Server-side trouble that ends a sweep raises
:class:`BenchAborted`.

Private to the llmops.sglang collection; do not use it from other collections.
"""
from __future__ import annotations

import json
import secrets
import sys
import time
import typing as t
import urllib.error
import urllib.request

from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import ENDPOINT_PATHS, BenchConfig
from ansible_collections.llmops.sglang.plugins.module_utils._bench_requests import (
    request_body, text_prompt, token_id_prompt)
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sse import EVENT_HANDLERS, RequestRecord, SSEDecoder

try:
    import aiohttp
except ImportError as exc:
    aiohttp = None
    AIOHTTP_IMPORT_ERROR: ImportError | None = exc
else:
    AIOHTTP_IMPORT_ERROR = None

# aiohttp's 64 KB default read buffer collapses long streams; SGLang's own benchmark raises it to 10 MB
# (sglang 0.5.11 python/sglang/bench_serving.py, BENCH_AIOHTTP_READ_BUFSIZE_BYTES).
READ_BUFSIZE = 10 * 2**20
METADATA_TIMEOUT_S = 30.0


class BenchAborted(Exception):
    """The server cannot serve the sweep any more (auth rejected, unreachable, died or hung): stop and report."""

    def __init__(self, message: str, kind: str = "server", level: dict | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.level = level  # the measured level that is no measurement (too many failed requests)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _auth_message(base_url: str, api_key: str | None) -> str:
    problem = "wrong" if api_key else "missing"
    return (f"{base_url} answered HTTP 401 Unauthorized: the API key is {problem} "
            "(set api_key to the value of the server's --api-key)")


def fetch_model_id(base_url: str, api_key: str | None, timeout_s: float) -> str:
    """First model id from GET /v1/models (what bench_serving does when --model is not given)."""
    url = base_url.rstrip("/") + "/v1/models"
    request = urllib.request.Request(url, headers=auth_headers(api_key))
    # An empty ProxyHandler: benchmark traffic must go straight to the server, never through *_proxy settings.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            document = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise BenchAborted(_auth_message(base_url, api_key), "auth") from exc
        raise BenchAborted(f"GET {url} failed with HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise BenchAborted(f"cannot connect to {base_url} (GET /v1/models): {getattr(exc, 'reason', exc)}",
                           "unreachable") from exc
    except ValueError as exc:
        raise BenchAborted(f"GET {url} did not return JSON: {exc}") from exc
    models = document.get("data") if isinstance(document, dict) else None
    if not models or not isinstance(models[0], dict) or "id" not in models[0]:
        raise BenchAborted(f"GET {url} lists no model; set the model option")
    return str(models[0]["id"])


def resolve_model(config: BenchConfig) -> str:
    """The configured model, else the server's first model (also the sweep's early auth/reachability probe)."""
    return config.model or fetch_model_id(config.base_url, config.api_key,
                                          min(config.request_timeout_s, METADATA_TIMEOUT_S))


def client_versions() -> dict[str, str | None]:
    return {"python": sys.version.split()[0], "aiohttp": getattr(aiohttp, "__version__", None)}


def require_aiohttp() -> None:
    """RuntimeError naming the fix when the python running the module has no aiohttp."""
    if aiohttp is None:
        raise RuntimeError(f"the native bench engine needs aiohttp in the Python running it ({AIOHTTP_IMPORT_ERROR}); "
                           "run the task with ansible_python_interpreter set to the SGLang venv's python")


def client_session(config: BenchConfig) -> t.Any:
    """The sweep's one ClientSession (an async context manager): the API key's header, the request timeout, the large
    read buffer."""
    connector = aiohttp.TCPConnector(limit=0)  # concurrency is bounded by the worker count, not the pool
    timeout = aiohttp.ClientTimeout(total=config.request_timeout_s)
    headers = {"Content-Type": "application/json", **auth_headers(config.api_key)}
    return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers, read_bufsize=READ_BUFSIZE)


class LevelRunner:
    """Drives one ClientSession through the sweep; every prompt is unique across warm-ups, runs and levels, and
    across sweeps: a server's radix cache keeps the prompts of earlier sweeps (a rate search's earlier probes, an
    earlier stage's sweep on the same start), and a repeated prompt would be served from it with a prefill of one
    token - a TTFT and a capacity no new request gets. The prompts draw from the seed and a salt of the sweep's own
    (the arrivals and lengths stay the seed's: the same for every configuration)."""

    def __init__(self, session: t.Any, config: BenchConfig, model: str | None) -> None:
        self.session = session
        self.config = config
        self.model = model
        self.words: int | None = None  # chat only: prompt length in words, set by calibrate_words()
        self.url = config.base_url + ENDPOINT_PATHS[config.endpoint]
        self.handler = EVENT_HANDLERS[config.endpoint]
        self.prompt_counter = 0
        self.prompt_salt = secrets.randbits(64)

    def bodies(self, count: int, output_len: int) -> list[bytes]:
        config = self.config
        bodies = []
        for _request in range(count):
            seed = self.next_seed()
            prompt = text_prompt(self.words, seed) if self.words else token_id_prompt(config.input_len, seed)
            bodies.append(json.dumps(request_body(config.endpoint, self.model, prompt, output_len)).encode())
        return bodies

    def next_seed(self) -> str:
        self.prompt_counter += 1
        return f"{self.config.seed}:{self.prompt_salt}:{self.prompt_counter}"

    def piece(self, tokens: int) -> list[int] | str:
        """A fresh prompt piece of about ``tokens`` tokens: token ids, or calibrated words for chat."""
        if self.words:
            return text_prompt(max(1, round(tokens * self.words / self.config.input_len)), self.next_seed())
        return token_id_prompt(tokens, self.next_seed())

    async def send(self, body: bytes) -> RequestRecord:
        record = RequestRecord(time.perf_counter())
        try:
            async with self.session.post(self.url, data=body) as response:
                if response.status == 401:
                    raise BenchAborted(_auth_message(self.config.base_url, self.config.api_key), "auth")
                if response.status != 200:
                    record.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                else:
                    await self._read_stream(response, record)
        except aiohttp.ClientConnectorError as exc:
            raise BenchAborted(f"cannot connect to {self.config.base_url}: {exc}", "unreachable") from exc
        except TimeoutError:
            record.error = f"no complete response within request_timeout_s={self.config.request_timeout_s:g}"
        except (aiohttp.ClientError, ValueError) as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        record.end = time.perf_counter()
        return record

    async def _read_stream(self, response: t.Any, record: RequestRecord) -> None:
        decoder = SSEDecoder()
        handler = self.handler
        loads = json.loads
        async for chunk in response.content.iter_any():
            now = time.perf_counter()
            for payload in decoder.feed(chunk):
                if payload == b"[DONE]":
                    record.done = True
                else:
                    handler(record, loads(payload), now)
        if not record.done and record.error is None:
            record.error = "stream ended without data: [DONE]"

    async def calibrate_words(self) -> int:
        """Chat prompts are text: size the word count from one request's server-side prompt token count."""
        config = self.config
        body = request_body("chat", self.model, text_prompt(config.input_len, config.seed), 1, stream=False)
        try:
            async with self.session.post(self.url, json=body) as response:
                if response.status == 401:
                    raise BenchAborted(_auth_message(config.base_url, config.api_key), "auth")
                document = await response.json(content_type=None)
        except aiohttp.ClientConnectorError as exc:
            raise BenchAborted(f"cannot connect to {config.base_url}: {exc}", "unreachable") from exc
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise BenchAborted(f"chat prompt calibration request failed: {exc}") from exc
        measured = (document.get("usage") or {}).get("prompt_tokens") if isinstance(document, dict) else None
        if not measured:
            raise BenchAborted("chat prompt calibration: the server reported no usage.prompt_tokens "
                               f"({document!r:.200})")
        return max(1, round(config.input_len * config.input_len / measured))
