# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The emulated `python -m sglang.launch_server` process: startup, HTTP serving, failures, shutdown.

Exit codes: 0 after SIGTERM/SIGINT, 1 when a (emulated) scheduler rank fails — logged as SGLang
does: `Scheduler hit an exception: <traceback>` on the rank, then `Received sigquit from a child
process. It usually means the child failed.` in the main process.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import sys
import traceback

import aiohttp
from aiohttp import web

from sglang._emulator import gpu_state
from sglang._emulator.capacity import MemoryPlan
from sglang._emulator.engine import CUDA_ERROR_TEXT, Engine, create_engine
from sglang._emulator.http_app import HttpApi
from sglang._emulator.logs import UvicornAccessLogger, as_rank, configure_logging, uvicorn_logger
from sglang._emulator.profile import Profile, emulated_version, load_profile
from sglang._emulator.scheduler import Scheduler, SchedulerLimits
from sglang.srt.server_args import ServerArgs, parse_cli_args, set_global_server_args_for_scheduler

logger = logging.getLogger("sglang.srt.entrypoints.engine")
scheduler_logger = logging.getLogger("sglang.srt.managers.scheduler")

EMULATOR_MARKER = "EMULATOR: sglang emulator {version} (llmops.sglang test double; no GPU work is done)"
WARMUP_PROMPT = "The capital city of France is"
SHUTDOWN_GRACE_S = 2.0


def main(argv: list[str] | None = None) -> int:
    namespace = parse_cli_args(sys.argv[1:] if argv is None else argv)
    configure_logging(namespace.log_level, namespace.log_level_http)
    profile = load_profile()
    logger.info(EMULATOR_MARKER.format(version=emulated_version(profile)))
    server_args = ServerArgs.from_cli_args(namespace)
    set_global_server_args_for_scheduler(server_args)
    logger.info(server_args.dump())
    return asyncio.run(EmulatedServer(server_args, profile).run())


def scheduler_limits(args: ServerArgs, plan: MemoryPlan) -> SchedulerLimits:
    """The scheduler's limits and policies from the resolved server args and the memory plan."""
    return SchedulerLimits(
        plan.max_running_requests, plan.max_total_num_tokens, args.max_prefill_tokens, args.decode_log_interval,
        speculative=bool(args.speculative_algorithm), chunked_prefill_size=args.chunked_prefill_size,
        mixed_chunk=args.enable_mixed_chunk, radix_cache=not args.disable_radix_cache,
        schedule_policy=args.schedule_policy, page_size=args.page_size,
    )


class EmulatedServer:
    def __init__(self, args: ServerArgs, profile: Profile) -> None:
        self.args, self.profile = args, profile
        self.state_dir = gpu_state.state_dir(profile.state_dir)
        self.runner: web.AppRunner | None = None
        self.api: HttpApi | None = None
        self.scheduler: Scheduler | None = None
        self.stop_requested = False

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        main_task = asyncio.current_task()

        def stop() -> None:
            # A second signal (e.g. from a supervisor repeating SIGTERM) must not cut the shutdown short.
            if not self.stop_requested:
                self.stop_requested = True
                main_task.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        try:
            return await self._serve()
        except asyncio.CancelledError:
            main_task.uncancel()
            await self._shutdown()
            return 0
        finally:
            gpu_state.remove_usage(self.state_dir)

    async def _serve(self) -> int:
        engine = create_engine(self.args, self.profile)
        try:
            await engine.start()
        except Exception as exc:
            return self._rank_failed(engine, exc)
        self._publish_gpu_usage(engine)
        rng = random.Random(self.profile.seed)
        self.scheduler = Scheduler(
            engine.perf,
            scheduler_limits(self.args, engine.plan),
            self.profile.time_scale, self.profile.noise_cv, self.profile.instance_cv,
            self.profile.speculative.request_cv, rng, engine.scheduler_prefix,
        )
        tasks = {asyncio.create_task(self.scheduler.run())}
        if not await self._start_http(engine):
            return 1
        try:
            self._first_forward_if_needed(engine)
        except Exception as exc:
            return self._rank_failed(engine, exc)
        if not await self._warmup():
            return 1
        self.api.ready = True
        logger.info("The server is fired up and ready to roll!")
        if self.profile.failures.crash_after_ready_s is not None:
            tasks.add(asyncio.create_task(self._crash_later(engine, self.profile.failures.crash_after_ready_s)))
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        return self._rank_failed(engine, next(iter(done)).exception())

    async def _start_http(self, engine: Engine) -> bool:
        memory_usage = {
            "weight": round(engine.plan.weights_gib + engine.plan.draft_weights_gib, 2),
            "kvcache": round(engine.plan.pool_gib, 2),
            "token_capacity": engine.plan.max_total_num_tokens,
            "cuda_graph": round(engine.plan.cuda_graph_gib + engine.plan.piecewise_cuda_graph_gib, 2),
        }
        self.api = HttpApi(self.args, engine.shape, engine.plan, self.scheduler, memory_usage)
        self.runner = web.AppRunner(self.api.build_app(), access_log_class=UvicornAccessLogger,
                                    shutdown_timeout=SHUTDOWN_GRACE_S)
        await self.runner.setup()
        uvicorn_logger.info(f"Started server process [{os.getpid()}]")
        uvicorn_logger.info("Waiting for application startup.")
        uvicorn_logger.info("Application startup complete.")
        try:
            await web.TCPSite(self.runner, self.args.host, self.args.port, shutdown_timeout=SHUTDOWN_GRACE_S).start()
        except OSError as exc:
            # uvicorn's Server.startup: `logger.error(exc)`, the lifespan shutdown, sys.exit(1). The event
            # loop (asyncio and uvloop alike) already raised "[Errno 98] error while attempting to bind on
            # address ('127.0.0.1', 30000): address already in use".
            text = str(exc)
            if "error while attempting to bind" not in text:
                text = (f"[Errno {exc.errno}] error while attempting to bind on address "
                        f"{(self.args.host, self.args.port)!r}: {(exc.strerror or text).lower()}")
            uvicorn_logger.error(text)
            uvicorn_logger.info("Waiting for application shutdown.")
            uvicorn_logger.info("Application shutdown complete.")
            return False
        uvicorn_logger.info(f"Uvicorn running on http://{self.args.host}:{self.args.port} (Press CTRL+C to quit)")
        return True

    def _first_forward_if_needed(self, engine: Engine) -> None:
        """Without CUDA graphs the first forward (and the MoE config lookup) happens at warmup."""
        if not engine.forward_done:
            engine.first_forward()
            self.scheduler.perf = engine.perf

    async def _warmup(self) -> bool:
        startup = self.profile.startup
        await asyncio.sleep(self.profile.startup_scaled(startup.warmup_s + self.profile.failures.slow_start_s))
        if self.args.skip_server_warmup:
            return True
        host = "127.0.0.1" if self.args.host in ("0.0.0.0", "::", "") else self.args.host
        base = f"http://{host}:{self.args.port}"
        key = self.args.api_key or self.args.admin_api_key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {"text": WARMUP_PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
        try:
            async with aiohttp.ClientSession(base, headers=headers) as session:
                async with session.get("/model_info") as response:
                    response.raise_for_status()
                async with session.post("/generate", json=body) as response:
                    response.raise_for_status()
                    await response.read()
        except aiohttp.ClientError:
            logger.error(f"Initialization failed. warmup error: {traceback.format_exc()}")
            return False
        return True

    async def _crash_later(self, engine: Engine, emulated_seconds: float) -> None:
        with as_rank(engine.scheduler_prefix):
            await asyncio.sleep(self.profile.scaled(emulated_seconds))
            raise RuntimeError(CUDA_ERROR_TEXT)

    def _rank_failed(self, engine: Engine, exc: BaseException) -> int:
        details = "".join(traceback.format_exception(exc))
        with as_rank(engine.scheduler_prefix):
            scheduler_logger.error(f"Scheduler hit an exception: {details}")
        logger.error("Received sigquit from a child process. It usually means the child failed.")
        return 1

    def _publish_gpu_usage(self, engine: Engine) -> None:
        used_mib = int((engine.plan.total_gib - engine.plan.avail_after_graphs_gib) * 1024)
        gpu_state.write_usage(self.state_dir, sys.executable, {index: used_mib for index in engine.gpu_indices})

    async def _shutdown(self) -> None:
        if self.runner is None:
            return
        self.api.shutting_down = True
        uvicorn_logger.info("Shutting down")
        for request in [*self.scheduler.waiting, *self.scheduler.running]:
            request.abort("The server is shutting down.")
        uvicorn_logger.info("Waiting for application shutdown.")
        await asyncio.sleep(self.profile.startup_scaled(self.profile.startup.shutdown_s))
        uvicorn_logger.info("Application shutdown complete.")
        await self.runner.cleanup()
        uvicorn_logger.info(f"Finished server process [{os.getpid()}]")
