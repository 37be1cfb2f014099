"""Self-signed PKI for the local control plane, generated with the ``openssl`` CLI."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_DAYS = "3650"


class PKIError(RuntimeError):
    """openssl is missing or failed."""


@dataclass(frozen=True)
class PKI:
    """Paths of the generated key material."""

    directory: Path

    @property
    def ca_crt(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def apiserver_crt(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    def complete(self) -> bool:
        files = (self.ca_crt, self.ca_key, self.apiserver_crt, self.apiserver_key)
        return all(p.is_file() for p in (*files, self.sa_key, self.sa_pub))


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise PKIError("the openssl CLI is required to create the local cluster's certificates")
    result = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PKIError(f"openssl {' '.join(args[:2])} failed: {result.stderr.strip()}")


def create_pki(directory: Path, *, service_ip: str = "10.96.0.1") -> PKI:
    """Create a CA, the API server's serving certificate and the service-account key pair."""
    pki = PKI(directory)
    if pki.complete():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    _openssl(
        "req",
        "-x509",
        *_EC,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        _DAYS,
        "-subj",
        "/CN=llmservice-local-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=d,
    )
    sans = [
        "IP:127.0.0.1",
        f"IP:{service_ip}",
        "DNS:localhost",
        "DNS:kubernetes",
        "DNS:kubernetes.default",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
    ]
    (d / "apiserver.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={','.join(sans)}\n"
    )
    _openssl(
        "req",
        *_EC,
        "-keyout",
        "apiserver.key",
        "-out",
        "apiserver.csr",
        "-subj",
        "/CN=kube-apiserver",
        cwd=d,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "apiserver.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "apiserver.crt",
        "-days",
        _DAYS,
        "-extfile",
        "apiserver.ext",
        cwd=d,
    )
    _openssl(
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        "sa.key",
        cwd=d,
    )
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    for key in d.glob("*.key"):
        key.chmod(0o600)
    return pki
