"""The test bed's PKI (dockyard_localcluster.testbed.pki): one CA, SANs, subjects, usages."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dockyard_localcluster.testbed import pki

SPECS = pki.testbed_specs("tb-node", "10.200.0.1", "10.96.0.1")


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return pki.build_pki(SPECS)


def _cert(files: dict[str, bytes], stem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(files[f"{stem}.crt"])


def _subject(cert: x509.Certificate) -> tuple[str, list[str]]:
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return str(cn), [str(o) for o in orgs]


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_every_certificate_is_signed_by_the_one_ca(files: dict[str, bytes]) -> None:
    ca = _cert(files, "ca")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for stem in SPECS:
        cert = _cert(files, stem)
        cert.verify_directly_issued_by(ca)
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_apiserver_serves_every_name_the_cluster_and_the_relay_use(files: dict[str, bytes]) -> None:
    cert = _cert(files, "apiserver")
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    assert ips == {"10.200.0.1", "10.96.0.1", "127.0.0.1"}
    names = set(san.get_values_for_type(x509.DNSName))
    assert {"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"} <= names
    assert _usages(cert) == {ExtendedKeyUsageOID.SERVER_AUTH}


@pytest.mark.parametrize(
    ("stem", "cn", "orgs"),
    [
        ("admin", "dockyard-testbed-admin", ["system:masters"]),
        ("kubelet", "system:node:tb-node", ["system:nodes"]),
        ("kube-proxy", "system:kube-proxy", []),
        ("controller-manager", "system:kube-controller-manager", []),
        ("scheduler", "system:kube-scheduler", []),
        ("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ["system:masters"]),
    ],
)
def test_client_identities(files: dict[str, bytes], stem: str, cn: str, orgs: list[str]) -> None:
    cert = _cert(files, stem)
    assert _subject(cert) == (cn, orgs)
    assert _usages(cert) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_the_kubelet_serves_its_node_ip(files: dict[str, bytes]) -> None:
    san = _cert(files, "kubelet-serving").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.200.0.1") in san.get_values_for_type(x509.IPAddress)
    assert "tb-node" in san.get_values_for_type(x509.DNSName)


def test_keys_match_their_certificates_and_the_service_account_pair_matches(files: dict[str, bytes]) -> None:
    for stem in SPECS:
        pair = pki.KeyPair(files[f"{stem}.crt"], files[f"{stem}.key"])
        assert pair.key.public_key().public_numbers() == pair.cert.public_key().public_numbers()  # type: ignore[union-attr]
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_pem_private_key(files["sa.key"], password=None)
    public = serialization.load_pem_public_key(files["sa.pub"])
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.public_key().public_numbers() == public.public_numbers()  # type: ignore[union-attr]


def test_a_certificate_needs_a_usage() -> None:
    with pytest.raises(ValueError, match="server, a client"):
        pki.issue(pki.new_ca(), pki.CertSpec("nobody"))


def test_ensure_pki_writes_once_and_keeps_the_files(tmp_path: Path) -> None:
    pki.ensure_pki(tmp_path, SPECS)
    first = (tmp_path / "ca.crt").read_bytes()
    assert (tmp_path / "admin.key").stat().st_mode & 0o777 == 0o600
    pki.ensure_pki(tmp_path, SPECS)
    assert (tmp_path / "ca.crt").read_bytes() == first
    (tmp_path / "scheduler.key").unlink()  # an interrupted first run: rebuilt from one new CA
    pki.ensure_pki(tmp_path, SPECS)
    assert (tmp_path / "ca.crt").read_bytes() != first
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    x509.load_pem_x509_certificate((tmp_path / "admin.crt").read_bytes()).verify_directly_issued_by(ca)
