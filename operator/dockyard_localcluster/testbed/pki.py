"""The test bed's PKI: one CA, the serving and client certificates of every component, the
service-account key. Pure: built in memory with ``cryptography``; :func:`ensure_pki` only writes the
files that are missing, so a test bed keeps its certificates across restarts.

ECDSA P-256 keys throughout: Kubernetes accepts them everywhere (serving, client, service-account
tokens as ES256) and they are generated in milliseconds on a busy machine.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
CA_NAME = "dockyard-testbed-ca"


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError("expected an EC private key")
        return key


@dataclass(frozen=True)
class CertSpec:
    """What one issued certificate says: its subject, SANs and usages."""

    common_name: str
    organizations: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    server: bool = False
    client: bool = False


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _now(now: datetime.datetime | None) -> datetime.datetime:
    return now or datetime.datetime.now(datetime.UTC)


def new_ca(common_name: str = CA_NAME, now: datetime.datetime | None = None) -> KeyPair:
    """A self-signed CA certificate and key."""
    key = _new_key()
    start = _now(now) - datetime.timedelta(minutes=5)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + VALIDITY * 10)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(ca: KeyPair, spec: CertSpec, now: datetime.datetime | None = None) -> KeyPair:
    """A certificate for ``spec`` signed by ``ca``, with a fresh key."""
    key = _new_key()
    start = _now(now) - datetime.timedelta(minutes=5)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if spec.server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if spec.client else []
    )
    if not usages:
        raise ValueError(f"{spec.common_name}: a certificate must be for a server, a client or both")
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(spec.common_name, spec.organizations))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in spec.dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in spec.ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_account_key() -> tuple[bytes, bytes]:
    """The service-account token signing key: (private PEM, public PEM)."""
    key = _new_key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), public


def testbed_specs(node_name: str, node_ip: str, kubernetes_service_ip: str) -> dict[str, CertSpec]:
    """Every certificate of the test bed by file stem (``<stem>.crt`` / ``<stem>.key``)."""
    return {
        "apiserver": CertSpec(
            "kube-apiserver",
            dns_names=(
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "localhost",
            ),
            ip_addresses=(node_ip, kubernetes_service_ip, "127.0.0.1"),
            server=True,
        ),
        # apiserver -> kubelet (logs, exec); the kubelet authorizes it with a SubjectAccessReview.
        "apiserver-kubelet-client": CertSpec(
            "kube-apiserver-kubelet-client", organizations=("system:masters",), client=True
        ),
        "admin": CertSpec("dockyard-testbed-admin", organizations=("system:masters",), client=True),
        "kubelet": CertSpec(f"system:node:{node_name}", organizations=("system:nodes",), client=True),
        "kubelet-serving": CertSpec(
            f"system:node:{node_name}",
            organizations=("system:nodes",),
            dns_names=(node_name, "localhost"),
            ip_addresses=(node_ip, "127.0.0.1"),
            server=True,
        ),
        "kube-proxy": CertSpec("system:kube-proxy", client=True),
        "controller-manager": CertSpec("system:kube-controller-manager", client=True),
        "scheduler": CertSpec("system:kube-scheduler", client=True),
        # kwok writes the status of the fake nodes and their pods: admin rights, as kwokctl gives it.
        "kwok": CertSpec("kwok-controller", organizations=("system:masters",), client=True),
    }


def build_pki(
    specs: Mapping[str, CertSpec], ca: KeyPair | None = None, now: datetime.datetime | None = None
) -> dict[str, bytes]:
    """All files of the PKI by name: ``ca.crt``/``ca.key``, one pair per spec, ``sa.key``/``sa.pub``."""
    ca = ca or new_ca(now=now)
    files = {"ca.crt": ca.cert_pem, "ca.key": ca.key_pem}
    for stem, spec in specs.items():
        pair = issue(ca, spec, now=now)
        files[f"{stem}.crt"] = pair.cert_pem
        files[f"{stem}.key"] = pair.key_pem
    files["sa.key"], files["sa.pub"] = service_account_key()
    return files


def ensure_pki(directory: Path, specs: Mapping[str, CertSpec]) -> None:
    """Write the PKI into ``directory`` unless it is complete (a test bed keeps its certificates).

    A partial directory (an interrupted first run) is rebuilt from scratch: every certificate must
    come from the one CA."""
    wanted = {"ca.crt", "ca.key", "sa.key", "sa.pub"} | {f"{s}.{e}" for s in specs for e in ("crt", "key")}
    if all((directory / name).is_file() for name in wanted):
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in build_pki(specs).items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600 if name.endswith(".key") else 0o644)
