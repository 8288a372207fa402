"""A certificate for 127.0.0.1 and its authority's, as files (trustme), shared by the tests' session and the benches
that serve TLS locally (bench/client_stamp_lag.py)."""

from __future__ import annotations

from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization


def local_certificate(folder: Path, prefix: str = "") -> dict[str, Path]:
    """Files `ca`, `cert` and `key` (the key in PKCS#8, as Pulsar reads it) in `folder`, named `<prefix><name>.pem`."""
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    files = {name: folder / f"{prefix}{name}.pem" for name in ("ca", "cert", "key")}
    authority.cert_pem.write_to_path(str(files["ca"]))
    issued.cert_chain_pems[0].write_to_path(str(files["cert"]))
    key = serialization.load_pem_private_key(issued.private_key_pem.bytes(), None)
    files["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return files
