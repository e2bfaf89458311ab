"""`warpwatch evidence pull URL [--since 1h] [-o DIR]`: copy an agent's kept traces (`/evidence`) into a
folder, as they are kept (`ID.trace.json.gz`, and the JSON beside it as `ID.meta.json`), ready for
`warpwatch analyze`, HTA or Perfetto. A port-forward to the agent is enough.

`warpwatch evidence diff SOURCE [--since 1d]`: what changed per kernel between the newest window kept
as degraded and the newest baseline kept before it, from an agent or a pulled folder
(`evidence_diff`), as `warpwatch diff` says it."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import math
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..analysis.kerneldiff import diff_traces
from ..config.table import DEFAULTS
from ..errors import WarpwatchError
from ..evidence.store import META_SUFFIX, TRACE_SUFFIX, is_id
from .diff import add_output_flags, read_side, write_diff
from .evidence_diff import heading, is_url, kept_in_folder, parse_since, pick_pair, summary

TIMEOUT_S = 60.0
AGENT_PORT: int = DEFAULTS["port"]
"""The agent's port when `--port` is not set, where a port-forward goes."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "evidence",
        help="fetch the traces an agent kept as evidence (--evidence-dir)",
        description="Fetch the traces of the windows an agent kept (its /evidence endpoint).",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    pull = verbs.add_parser(
        "pull",
        help="copy an agent's kept traces into a folder",
        description="Copy the traces an agent kept into a folder, with the JSON kept beside "
        "each; files already there are left alone. Credentials of basic auth go in the "
        "URL (https://user:password@host:9946).",
    )
    pull.add_argument("url", metavar="URL", help="the agent, e.g. http://localhost:9946 (a port-forward is enough)")
    pull.add_argument(
        "--since",
        default="1h",
        metavar="DURATION",
        help="only windows kept within this long before now, e.g. 30m, 2h, 1d (default 1h)",
    )
    pull.add_argument("-o", "--output", default=".", metavar="DIR", help="folder to write to (default: here)")
    pull.add_argument("--ca-file", metavar="FILE", help="CA certificate that signed the agent's TLS certificate")
    pull.set_defaults(func=run_pull)
    _register_diff(verbs)


def _register_diff(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    diff = verbs.add_parser(
        "diff",
        help="what changed per kernel between the newest degraded window and the baseline kept before it",
        description="Compare the newest window an agent kept as degraded with the newest baseline window "
        "kept before it (baseline = A, degraded = B), kernel by kernel, as `warpwatch diff` does.",
    )
    diff.add_argument(
        "source", metavar="SOURCE", help="the agent, e.g. http://localhost:9946, or a folder `evidence pull` wrote"
    )
    diff.add_argument(
        "--since",
        default="1d",
        metavar="DURATION",
        help="the degraded window kept within this long before now, e.g. 2h, 1d (default 1d); "
        "its baseline may be older",
    )
    diff.add_argument("--ca-file", metavar="FILE", help="CA certificate that signed the agent's TLS certificate")
    add_output_flags(diff)
    diff.set_defaults(func=run_evidence_diff)


def run_pull(args: argparse.Namespace) -> int:
    since = parse_since(args.since)
    agent = Agent(args.url, args.ca_file)
    listed = agent.get_json("/evidence")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    chosen = select(listed, time.time() - since)
    for meta in chosen:
        kid = meta["id"]
        trace = out / (kid + TRACE_SUFFIX)
        if not trace.exists():
            partial = trace.with_name(trace.name + ".partial")
            partial.write_bytes(agent.get(f"/evidence/{kid}"))
            partial.replace(trace)
        (out / (kid + META_SUFFIX)).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{trace}\t{meta.get('reason')}\tgpus={','.join(map(str, meta.get('gpus') or []))}")
    print(f"{len(chosen)} of {len(listed)} kept windows within {args.since} in {out}", file=sys.stderr)
    return 0


def run_evidence_diff(args: argparse.Namespace) -> int:
    after = time.time() - parse_since(args.since)
    if not is_url(args.source):
        folder = Path(args.source)
        baseline, degraded = pick_pair(kept_in_folder(folder), after, args.source)
        paths = [folder / (m["id"] + TRACE_SUFFIX) for m in (baseline, degraded)]
        _write_evidence_diff(args, args.source, (baseline, degraded), paths, [str(p) for p in paths])
        return 0
    agent = Agent(args.source, args.ca_file)
    baseline, degraded = pick_pair(select(agent.get_json("/evidence"), -math.inf), after, agent.base)
    with tempfile.TemporaryDirectory(prefix="warpwatch-evidence-") as tmp:
        paths = []
        for meta in (baseline, degraded):
            paths.append(Path(tmp) / (meta["id"] + TRACE_SUFFIX))
            paths[-1].write_bytes(agent.get(f"/evidence/{meta['id']}"))
        names = [f"{agent.base}/evidence/{m['id']}" for m in (baseline, degraded)]
        _write_evidence_diff(args, agent.base, (baseline, degraded), paths, names)
    return 0


def _write_evidence_diff(
    args: argparse.Namespace,
    source: str,
    pair: tuple[dict[str, Any], dict[str, Any]],
    paths: list[Path],
    names: list[str],
) -> None:
    """Read the (baseline, degraded) traces, diff them and print it, each side named by `names` (not a
    temporary file); `source`: the folder, or the agent without its credentials."""
    diff = diff_traces(read_side(str(paths[0])), read_side(str(paths[1])))
    diff = dataclasses.replace(
        diff, a=dataclasses.replace(diff.a, path=names[0]), b=dataclasses.replace(diff.b, path=names[1])
    )
    extra = {"source": source, "baseline": summary(pair[0]), "degraded": summary(pair[1])}
    write_diff(sys.stdout, diff, args, heading(*pair), extra)


def select(listed: Iterable[Any], after: float) -> list[dict[str, Any]]:
    """The listed windows kept at or after Unix time `after`, oldest first; entries that are not a kept
    window's JSON (no valid id or time) are passed over."""
    out = [
        m
        for m in listed
        if isinstance(m, dict)
        and isinstance(m.get("id"), str)
        and is_id(m["id"])
        and isinstance(m.get("time"), int | float)
        and m["time"] >= after
    ]
    return sorted(out, key=lambda m: m["id"])


class Agent:
    """GETs to one agent; basic-auth credentials from the URL's user part."""

    def __init__(self, url: str, ca_file: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WarpwatchError(f"URL {url!r}: expected http://HOST:PORT or https://HOST:PORT")
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.headers: Mapping[str, str] = {}
        if parts.username is not None:
            pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self.headers = {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
        self.context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def get(self, path: str) -> bytes:
        req = urllib.request.Request(self.base + path, headers=dict(self.headers))
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=self.context) as resp:
                body: bytes = resp.read()
                return body
        except urllib.error.HTTPError as exc:
            detail = exc.read(200).decode(errors="replace").strip()
            raise WarpwatchError(f"{self.base}{path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise WarpwatchError(self._unreachable(path, getattr(exc, "reason", exc))) from None

    def _unreachable(self, path: str, reason: object) -> str:
        """Why `path` could not be fetched, and, when nothing answered, what to try."""
        if not isinstance(reason, ConnectionRefusedError):
            return f"{self.base}{path}: {reason}"
        parts = urllib.parse.urlsplit(self.base)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        forward = str(AGENT_PORT) if port == AGENT_PORT else f"{port}:{AGENT_PORT}"
        return (
            f"cannot connect to {self.base}: connection refused; is the agent running? If it runs in Kubernetes, "
            f"start a port-forward: kubectl -n NAMESPACE port-forward pod/POD {forward}"
        )

    def get_json(self, path: str) -> list[Any]:
        try:
            doc = json.loads(self.get(path))
        except ValueError:
            raise WarpwatchError(f"{self.base}{path}: not JSON; is this a warpwatch agent?") from None
        if not isinstance(doc, list):
            raise WarpwatchError(f"{self.base}{path}: expected a JSON list of kept windows")
        return doc
