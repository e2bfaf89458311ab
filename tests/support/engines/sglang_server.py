"""A stand-in for SGLang's profiling routes, per version family (`--family`), which dies where
SGLang dies.

Replicates (read from github.com/sgl-project/sglang, not copied):

- `0.4.2` (0.4.0-0.4.3): `srt/managers/scheduler.py` creates its profiler only when
  `SGLANG_TORCH_PROFILER_DIR` is set (`--env-dir`); `start_profile`/`stop_profile` raise
  "Profiler is not enabled." otherwise, in the scheduler, which ends the server. The tokenizer
  manager only sends the request on, so the routes answer 200 first (the process exits just
  after) and `stop_profile` answers before the ranks have written
  `{time.time()}-TP-{rank}.trace.json.gz` (`--write-delay`, staggered per rank).
- `0.4.6` (0.4.4-0.4.6): `ProfileReqInput` body (output_dir, num_steps, activities, ...), the
  tokenizer manager waits for the scheduler: a start while profiling, or a stop while not, is
  refused ("Profiling is already in progress" / "not in progress"), raised by the tokenizer
  manager: 500 "Internal Server Error". Stop answers after `{profile_id}-TP-{rank}.trace.json.gz`.
- `0.5.0` (0.4.7+): `srt/managers/scheduler_profiler_mixin.py`: a plain start ignores the
  refusal of `init_profile` and starts anew, replacing a running profile (200, counted
  `replaced` here); `profile_by_stage` / `start_step` requests get the check (500). A by-stage
  request with `num_steps` arms a session that records when requests come (`--busy`, or
  `POST /_standin/traffic`) and writes `...-TP-{rank}-EXTEND` then `-DECODE` traces by itself.
- `--profile-v2` (0.5.x with `SGLANG_PROFILE_V2=1`, `srt/utils/profile_utils.py`):
  `ProfileManager.configure` asserts `profile_by_stage`, no `start_step`, no `merge_profiles`,
  and that no stage is recording; `/stop_profile` raises NotImplementedError: each of these ends
  the server. Files `...-TP-{rank}-prefill` / `-decode`.

`GET /get_server_info` (all; `/server_info` too from 0.5) reports `version` and the server
arguments (`tp_size`, `dp_size`, `pp_size`, `enable_dp_attention`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from common import INTERNAL_ERROR, Writer, base_args, die, serve, text

START_OK = "Start profiling.\n"
STOP_OK = "Stop profiling. This will take some time.\n"


def main() -> None:
    p = base_args(__doc__ or "")
    p.add_argument("--family", choices=("0.4.2", "0.4.6", "0.5.0"), required=True)
    p.add_argument("--version", help="the version reported (default: the family's)")
    p.add_argument("--profile-v2", action="store_true")
    p.add_argument("--env-dir", help="SGLANG_TORCH_PROFILER_DIR; unset: not in the environment")
    p.add_argument("--busy", action="store_true", help="requests keep coming: armed profiles record at once")
    p.add_argument("--step-s", type=float, default=0.02, help="seconds per forward step")
    args = p.parse_args()
    fam = args.family
    state: dict[str, Any] = {
        "family": fam,
        "in_progress": False,
        "armed": None,
        "recording_stage": None,
        "starts": 0,
        "replaced": 0,
        "refused": 0,
    }
    lock = threading.Lock()
    writer = Writer(args, state)
    ranks = len(writer.traces)
    info = {
        "version": args.version or fam,
        "tp_size": ranks,
        "dp_size": 1,
        "pp_size": 1,
        "enable_dp_attention": False,
        "model_path": "stand-in/model",
    }

    async def server_info(request: web.Request) -> web.Response:
        return web.json_response(info)

    def kill_soon(why: str) -> None:
        # The route has answered; the scheduler raises while handling the request just after.
        asyncio.get_running_loop().call_later(0.05, die, state, why)

    def rank_files(folder: Path, profile_id: str, suffix: str = "") -> dict[int, Path]:
        return {r: folder / f"{profile_id}-TP-{r}{suffix}.trace.json.gz" for r in range(ranks)}

    def record_stages() -> None:
        """An armed by-stage session meets requests: prefill steps, then decode steps."""
        with lock:
            armed = state["armed"]
            if armed is None or state["recording_stage"] is not None:
                return
        stages = ("prefill", "decode") if args.profile_v2 else ("EXTEND", "DECODE")
        for stage in stages:
            with lock:
                state["recording_stage"] = stage
                state["in_progress"] = True
            time.sleep(armed["num_steps"] * args.step_s)
            writer.write_all(rank_files(Path(armed["output_dir"]), armed["profile_id"], f"-{stage}"), wait=True)
        with lock:
            state["recording_stage"] = None
            state["in_progress"] = False
            state["armed"] = None

    def arm(req: dict[str, Any]) -> None:
        state["armed"] = {
            "num_steps": req.get("num_steps") or 1,
            "profile_id": str(time.time()),
            "output_dir": req.get("output_dir") or args.env_dir or "/tmp",
        }
        if args.busy:
            threading.Thread(target=record_stages, daemon=True).start()

    async def start(request: web.Request) -> web.Response:
        raw = await request.read()
        req: dict[str, Any] = json.loads(raw) if raw.strip() else {}
        state["starts"] += 1
        if fam == "0.4.2":
            if not args.env_dir:
                kill_soon("start_profile: Profiler is not enabled.")
                return text(START_OK)
            state["in_progress"] = True
            state["profile_id"] = str(time.time())
            return text(START_OK)
        if args.profile_v2:
            if not req.get("profile_by_stage") or req.get("start_step") is not None or req.get("merge_profiles"):
                die(state, "ProfileManager.configure: only support profile_by_stage=true now")
            if state["recording_stage"] is not None:
                die(state, "_StageBasedTrigger.configure: assert self.running_state is None")
            arm(req)
            return text(START_OK)
        checked = fam == "0.4.6" or req.get("profile_by_stage") or req.get("start_step")
        if state["in_progress"]:
            if checked:
                state["refused"] += 1
                return text(INTERNAL_ERROR, 500)  # "Profiling is already in progress."
            state["replaced"] += 1  # 0.4.7+: init_profile's refusal is dropped, the profile restarts
        if fam == "0.5.0" and req.get("profile_by_stage") and req.get("num_steps"):
            arm(req)
            return text(START_OK)
        state["in_progress"] = True
        state["profile_id"] = str(time.time())
        state["output_dir"] = req.get("output_dir") or args.env_dir or "/tmp"
        return text(START_OK)

    async def stop(request: web.Request) -> web.Response:
        if fam == "0.4.2":
            if not args.env_dir:
                kill_soon("stop_profile: Profiler is not enabled.")
                return text(STOP_OK)
            state["in_progress"] = False
            # Answered at once; the scheduler writes afterwards, rank by rank.
            # Each scheduler names its file with its own time.time() (no shared profile id yet).
            paths = {r: Path(args.env_dir) / f"{time.time() + r * 1e-3}-TP-{r}.trace.json.gz" for r in range(ranks)}
            writer.write_all(paths, wait=False, staggered=True)
            return text(STOP_OK)
        if args.profile_v2:
            die(state, "ProfileManager.manual_stop: NotImplementedError")
        if not state["in_progress"] or state["recording_stage"] is not None:
            return text(INTERNAL_ERROR, 500)  # "Profiling is not in progress."
        state["in_progress"] = False
        paths = rank_files(Path(state["output_dir"]), state["profile_id"])
        await asyncio.get_running_loop().run_in_executor(None, lambda: writer.write_all(paths, wait=True))
        return text(STOP_OK)

    async def traffic(request: web.Request) -> web.Response:
        threading.Thread(target=record_stages, daemon=True).start()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/get_server_info", server_info)
    if fam == "0.5.0":
        app.router.add_get("/server_info", server_info)
    for route, handler in (("/start_profile", start), ("/stop_profile", stop)):
        app.router.add_get(route, handler)
        app.router.add_post(route, handler)
    app.router.add_post("/_standin/traffic", traffic)
    serve(app, state)


if __name__ == "__main__":
    main()
