"""What encrypting traffic costs: the rate the host cores that encrypt it reach, and its latency.

A link that carries encrypted traffic moves min(link rate, `encrypted_gbps`) (the caller takes the
lesser). Rates per core come from the profile (`encryption_gbps_per_core`, measured by
`topowise calibrate --only encryption`); they scale with the cores that do the work: IPsec/WireGuard
and TLS spread flows over cores, and nothing else on the host is modelled as a limit here.

- "aes-gcm": AES-256-GCM (IPsec ESP, WireGuard-style tunnels with AES; the AEAD of TLS 1.3);
- "chacha20": ChaCha20-Poly1305 (WireGuard; hosts without AES instructions);
- "tls": AES-256-GCM inside TLS 1.3 records of 16 KiB plaintext, each carrying a 5-byte header,
  a 1-byte inner content type and a 16-byte tag (RFC 8446 section 5.2), so the wire moves 16406
  bytes per 16384 of payload.
"""

from __future__ import annotations

import math

from topowise.errors import UsageError

CIPHERS = ("none", "aes-gcm", "chacha20", "tls")

# TLS 1.3 (RFC 8446 5.1, 5.2): plaintext records up to 2^14 bytes; on the wire a 5-byte record header,
# the inner content-type byte and the AEAD's 16-byte tag are added to each.
TLS_RECORD_BYTES = 16384
TLS_RECORD_OVERHEAD_BYTES = 5 + 1 + 16
TLS_PAYLOAD_FRACTION = TLS_RECORD_BYTES / (TLS_RECORD_BYTES + TLS_RECORD_OVERHEAD_BYTES)
# the unit a sender seals before any of it can go out (and the receiver opens before using it): a
# TLS record; IPsec/WireGuard seal per packet, smaller, so one record bounds their latency from above
RECORD_BYTES = TLS_RECORD_BYTES

_AEAD = {"aes-gcm": "aes-gcm", "chacha20": "chacha20", "tls": "aes-gcm"}


def _check_cipher(cipher: str) -> str:
    if cipher not in CIPHERS:
        raise UsageError(f"unknown cipher {cipher!r}; known: {', '.join(CIPHERS)}")
    return cipher


def _per_core_gbps(cipher: str, profile) -> float:
    if profile is None:
        from topowise.costmodel.profile import default_profile
        profile = default_profile()
    aead = _AEAD[cipher]
    rate = profile.encryption_gbps_per_core.get(aead)
    if rate is None or not rate > 0:
        raise UsageError(f"the profile has no positive encryption rate for {aead!r} "
                         f"(encryption_gbps_per_core: {profile.encryption_gbps_per_core}); "
                         "run `topowise calibrate --only encryption`")
    return float(rate)


def encrypted_gbps(cipher: str, cores: int, profile=None) -> float:
    """Payload GB/s that `cores` host cores encrypt and authenticate with `cipher` (inf for "none")."""
    _check_cipher(cipher)
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise UsageError(f"encryption cores must be a whole number >= 1, got {cores!r}")
    if cipher == "none":
        return math.inf
    rate = _per_core_gbps(cipher, profile) * cores
    if cipher == "tls":
        rate *= TLS_PAYLOAD_FRACTION  # the cores seal the record framing too
    return rate


def encryption_latency_s(cipher: str, profile=None) -> float:
    """Seconds encryption adds to each message: the sender seals one record before it can go out and
    the receiver opens it before using it (two records on one core each; 0 for "none")."""
    _check_cipher(cipher)
    if cipher == "none":
        return 0.0
    return 2 * RECORD_BYTES / (_per_core_gbps(cipher, profile) * 1e9)
