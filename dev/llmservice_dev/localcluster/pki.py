"""Self-signed PKI for the local control plane, generated with the ``openssl`` CLI."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_DAYS = "3650"
FRONT_PROXY_CLIENT = "front-proxy-client"


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
    def front_proxy_ca_crt(self) -> Path:
        return self.directory / "front-proxy-ca.crt"

    @property
    def front_proxy_client_crt(self) -> Path:
        return self.directory / "front-proxy-client.crt"

    @property
    def front_proxy_client_key(self) -> Path:
        return self.directory / "front-proxy-client.key"

    @property
    def kubelet_client_crt(self) -> Path:
        """The API server's client certificate towards kubelets (logs, exec)."""
        return self.directory / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        return self.directory / "apiserver-kubelet-client.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    def complete(self) -> bool:
        files = (
            self.ca_crt,
            self.ca_key,
            self.apiserver_crt,
            self.apiserver_key,
            self.front_proxy_ca_crt,
            self.front_proxy_client_crt,
            self.front_proxy_client_key,
            self.kubelet_client_crt,
            self.kubelet_client_key,
            self.sa_key,
            self.sa_pub,
        )
        return all(p.is_file() for p in files)


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise PKIError("the openssl CLI is required to create the local cluster's certificates")
    result = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PKIError(f"openssl {' '.join(args[:2])} failed: {result.stderr.strip()}")


def _make_ca(d: Path, name: str, cn: str) -> None:
    _openssl(
        "req", "-x509", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.crt",
        "-days", _DAYS, "-subj", f"/CN={cn}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=d,
    )  # fmt: skip


def _make_cert(
    d: Path, name: str, ca: str | Path, cn: str, extensions: str, organization: str = ""
) -> None:
    """``name``.crt/.key in ``d``, signed by ``ca``.crt/.key (a name in ``d`` or a path)."""
    (d / f"{name}.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        + extensions
    )
    subject = (f"/O={organization}" if organization else "") + f"/CN={cn}"
    _openssl(
        "req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
        cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", _DAYS, "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip
    (d / f"{name}.key").chmod(0o600)


def make_client_cert(pki: PKI, directory: Path, name: str, cn: str, organization: str) -> None:
    """A client certificate from the cluster CA (the user ``cn`` in group ``organization``)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = pki.directory / "ca"
    _make_cert(directory, name, ca, cn, "extendedKeyUsage=clientAuth\n", organization)


def make_serving_cert(pki: PKI, directory: Path, name: str, cn: str, sans: list[str]) -> None:
    """A serving certificate from the cluster CA for ``sans`` (``IP:...``/``DNS:...``)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = pki.directory / "ca"
    _make_cert(
        directory,
        name,
        ca,
        cn,
        f"extendedKeyUsage=serverAuth\nsubjectAltName={','.join(sans)}\n",
    )


def create_pki(directory: Path, *, service_ip: str = "10.96.0.1") -> PKI:
    """Create the cluster CA, the API server's serving certificate, the front-proxy CA and
    client certificate (for aggregated APIs such as metrics adapters) and the service-account
    signing key pair."""
    pki = PKI(directory)
    if pki.complete():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    _make_ca(d, "ca", "llmservice-local-ca")
    sans = [
        "IP:127.0.0.1",
        f"IP:{service_ip}",
        "DNS:localhost",
        "DNS:kubernetes",
        "DNS:kubernetes.default",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
    ]
    _make_cert(
        d,
        "apiserver",
        "ca",
        "kube-apiserver",
        f"extendedKeyUsage=serverAuth\nsubjectAltName={','.join(sans)}\n",
    )
    _make_ca(d, "front-proxy-ca", "llmservice-local-front-proxy-ca")
    _make_cert(
        d,
        "front-proxy-client",
        "front-proxy-ca",
        FRONT_PROXY_CLIENT,
        "extendedKeyUsage=clientAuth\n",
    )
    _make_cert(
        d,
        "apiserver-kubelet-client",
        "ca",
        "kube-apiserver-kubelet-client",
        "extendedKeyUsage=clientAuth\n",
        organization="system:masters",
    )
    _openssl(
        "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=d
    )
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    for key in d.glob("*.key"):
        key.chmod(0o600)
    return pki
