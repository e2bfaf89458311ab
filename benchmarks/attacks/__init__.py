"""Every attack, at full size, against a live agent on loopback; prints a table.

    python benchmarks/attacks                      # this checkout's agent
    python benchmarks/attacks --agent-path DIR     # another checkout's agent/ (e.g. a clone of main)
    python benchmarks/attacks --only idle,slowloris --json out.json
    python benchmarks/attacks --only hostile       # the hostile rows (hostile_*.py), in memory cgroups

For each attack a fresh agent (`dir:` of an empty folder, 60 s period) is started, attacked for a
bounded time while a normal client scrapes `/metrics` every 0.5 s (5 s time-out), sampled every
0.25 s (RSS of the agent and PSS of its process tree from /proc/PID/smaps_rollup, threads, fds),
then stopped with SIGTERM. A row
gives the normal client's scrape latency under attack (median / worst, and how many failed), the
agent's peak RSS, PSS, threads and fds, its exit code and how long SIGTERM took, and what the
attack is about. Loopback only; every loop is bounded in count and time; the attacker raises its
own fd limit. An agent above `--rss-cap` (8 GiB) is killed and reported so (the machine is shared).
"""

import sys
from pathlib import Path

# tests/support holds the repository's process helpers (memory cgroups, PSS, trace builders)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
