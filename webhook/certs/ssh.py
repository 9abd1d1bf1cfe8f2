"""SSH key pairs: one per MPI job, so its launcher can log in to its workers."""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@dataclass(frozen=True)
class KeyPair:
    private: str  # OpenSSH private key format
    public: str  # one authorized_keys line


def new_key_pair(comment: str) -> KeyPair:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return KeyPair(private, f"{public.decode()} {comment}\n")
