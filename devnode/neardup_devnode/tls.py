"""TLS material for a secured node: a throw-away CA and a server certificate for localhost, made by ``trustme``."""

from __future__ import annotations

from pathlib import Path

from .errors import missing_package


def write_tls_material(cert_dir: Path) -> tuple[Path, Path, Path]:
    """Write ``ca.crt``, ``node.crt`` and ``node.key`` (RSA, PKCS#8) for localhost/127.0.0.1/::1 into *cert_dir*.

    The same certificate serves HTTP and transport TLS, so it is valid for client and server use (trustme's
    leaf certificates carry both extended key usages). Returns ``(ca, cert, key)``.
    """
    try:
        import trustme
    except ImportError:
        raise missing_package("trustme", "a secured local node (--secure)") from None

    ca = trustme.CA(organization_name="scrapy-neardup test CA", key_type=trustme.KeyType.RSA)
    leaf = ca.issue_cert("localhost", "127.0.0.1", "::1", key_type=trustme.KeyType.RSA)
    cert_dir.mkdir(parents=True, exist_ok=True)
    ca_path, cert_path, key_path = cert_dir / "ca.crt", cert_dir / "node.crt", cert_dir / "node.key"
    ca.cert_pem.write_to_path(str(ca_path))
    leaf.cert_chain_pems[0].write_to_path(str(cert_path))
    leaf.private_key_pem.write_to_path(str(key_path))
    key_path.chmod(0o600)
    ca_path.chmod(0o644)
    cert_path.chmod(0o644)
    return ca_path, cert_path, key_path
