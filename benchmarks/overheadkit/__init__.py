"""The parts of `benchmarks/overhead.py` (issue 32): what the agent costs the server it watches.

- `load`: the steady load (N streaming completions, closed loop) and what each stream received;
- `proxy`: a pass-through proxy in front of vLLM that times the agent's profiler calls;
- `split`: the figures of one arm (tokens/s, TTFT, inter-token gaps, inside / outside windows);
- `watch`: the agent's process tree (CPU, peak PSS), the trace files a window leaves, the machine;
- `vllmarms`: the arms on the real vLLM; `daemonarms`: the kineto-daemon path on a torch loop;
- `report`: the side-by-side tables and the JSON document.
"""
