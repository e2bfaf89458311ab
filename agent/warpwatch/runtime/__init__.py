"""What the agent's process runs with (a foundation: every room may import it, it imports no room).

- `membudget`: the memory one trace read may take, from the cgroup limit;
- `gcpause`: no cyclic garbage collection while many acyclic objects are built;
- `native`: the compiled hot paths (built by setup.py), or their Python twins.
"""
