"""A private CA, leaf certificates made with the real openssl, and TLS/basic-auth clients."""

from __future__ import annotations

import base64
import email.message
import http.client
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

OPENSSL = shutil.which("openssl")


CURL = shutil.which("curl")


USER = "prom"


PASSWORD = "s3cret-Pa55word"


HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    server_crt: Path
    server_key: Path
    client_crt: Path
    client_key: Path
    foreign_crt: Path
    foreign_key: Path
    encrypted_key: Path

    def private_keys(self) -> list[str]:
        """The base64 body lines of every private key: none may appear in a log or an error."""
        out = []
        for p in (self.server_key, self.client_key, self.foreign_key):
            out += [line for line in p.read_text().splitlines() if line and not line.startswith("-----")]
        return out


def openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    proc = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"openssl {' '.join(args)} failed:\n{proc.stderr}"


def make_ca(d: Path, name: str) -> None:
    openssl(
        "req",
        "-x509",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        "-days",
        "2",
        "-subj",
        f"/CN=warpwatch test {name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )


def make_leaf(d: Path, name: str, ca: str, usage: str, san: str, serial: int) -> None:
    (d / f"{name}.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        f"extendedKeyUsage={usage}\nsubjectAltName={san}\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    openssl(
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN={name}",
        cwd=d,
    )
    openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{ca}.crt",
        "-CAkey",
        f"{ca}.key",
        "-set_serial",
        str(serial),
        "-days",
        "2",
        "-out",
        f"{name}.crt",
        "-extfile",
        f"{name}.ext",
        cwd=d,
    )


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if OPENSSL is None:
        pytest.skip("the openssl command line tool is not installed (apt-get install openssl)")
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "foreignca")
    make_leaf(d, "server", "ca", "serverAuth", "DNS:localhost,IP:127.0.0.1", 2)
    make_leaf(d, "client", "ca", "clientAuth", "DNS:prometheus.test,URI:spiffe://test/prometheus", 3)
    make_leaf(d, "foreign", "foreignca", "clientAuth", "DNS:prometheus.test", 4)
    openssl("pkey", "-in", "server.key", "-aes256", "-passout", "pass:hunter2", "-out", "encrypted.key", cwd=d)
    return Pki(
        d,
        d / "ca.crt",
        d / "server.crt",
        d / "server.key",
        d / "client.crt",
        d / "client.key",
        d / "foreign.crt",
        d / "foreign.key",
        d / "encrypted.key",
    )


def client_context(
    pki: Pki, cert: tuple[Path, Path] | None = None, max_version: ssl.TLSVersion | None = None
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    if max_version is not None:
        ctx.maximum_version = max_version
    return ctx


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class Reply:
    status: int
    headers: email.message.Message
    body: bytes


def get(url: str, ctx: ssl.SSLContext | None = None, auth: str | None = None) -> Reply:
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return Reply(resp.status, resp.headers, resp.read())
    except urllib.error.HTTPError as err:
        return Reply(err.code, err.headers, err.read())


def refused(url: str, ctx: ssl.SSLContext, auth: str | None = None) -> BaseException:
    """The error a client gets when the server refuses its TLS connection (no response at all)."""
    with pytest.raises((OSError, http.client.HTTPException)) as info:
        reply = get(url, ctx, auth)
        pytest.fail(f"the server answered {reply.status} instead of refusing the connection")
    return info.value
