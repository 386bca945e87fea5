"""The host's encryption rate per core: AES-256-GCM and ChaCha20-Poly1305 through the `cryptography`
package (OpenSSL underneath), one thread, large buffers.

What a WAN link that must be encrypted and authenticated can carry is bounded by the cores that seal
its traffic (costmodel/encryption.py). One AEAD seal (encrypt + tag) of a 1 MiB buffer is timed over
and over for a fraction of a second; the median of a few such bursts is the rate. No torch, no GPU:
`topowise calibrate --only encryption` runs it anywhere, and `topowise calibrate` runs it after its
GPU measurements (~0.7 s).

    measure_encryption()      -> records (kind "encryption", one per cipher)
    encryption_fit(records)   -> {cipher: GB/s per core}
    apply_encryption(profile, records, where) -> the profile with those rates and their sources
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace

from topowise.costmodel.profile import Profile
from topowise.errors import UsageError
from topowise.units import MIB

RECORD_KIND = "encryption"
# profile key -> the algorithm measured
ALGORITHMS = {"aes-gcm": "AES-256-GCM", "chacha20": "ChaCha20-Poly1305"}
BUFFER_BYTES = MIB  # large enough that the per-call overhead (~1 us) is under 1% of a seal
BURSTS = 5
BURST_S = 0.06  # 5 bursts x 0.06 s per cipher, ~0.35 s with the warm-up: calibrate adds ~0.7 s


def _aead(cipher: str):
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
    except ImportError:
        raise UsageError("measuring the host's encryption rate needs the cryptography package "
                         "(a dependency of topowise: pip install cryptography)") from None

    return AESGCM(os.urandom(32)) if cipher == "aes-gcm" else ChaCha20Poly1305(os.urandom(32))


def openssl_version() -> str:
    """The OpenSSL the `cryptography` package links (its wheels bundle their own)."""
    try:
        from cryptography.hazmat.backends.openssl.backend import backend

        return backend.openssl_version_text()
    except Exception:  # an unusual build: the version is only a label here
        return "unknown"


def measure_encryption(buffer_bytes: int = BUFFER_BYTES, bursts: int = BURSTS, burst_s: float = BURST_S,
                       ciphers: tuple[str, ...] = tuple(ALGORITHMS)) -> list[dict]:
    """One record per cipher: GB/s one thread seals (encrypts and authenticates) `buffer_bytes` buffers,
    the median of `bursts` bursts of about `burst_s` seconds each."""
    from topowise.costmodel.profile_store import cpu_model, package_version

    data = os.urandom(buffer_bytes)
    nonce = os.urandom(12)  # reusing a nonce is unsafe for real traffic; for timing the work is the same
    out = []
    for cipher in ciphers:
        aead = _aead(cipher)
        aead.encrypt(nonce, data, None)  # warm-up: tables, page faults of the output buffer
        rates, calls = [], 0
        for _ in range(bursts):
            n, start = 0, time.perf_counter()
            while True:
                aead.encrypt(nonce, data, None)
                n += 1
                elapsed = time.perf_counter() - start
                if elapsed >= burst_s:
                    break
            rates.append(n * buffer_bytes / elapsed / 1e9)
            calls += n
        out.append({"kind": RECORD_KIND, "cipher": cipher, "algorithm": ALGORITHMS[cipher],
                    "buffer_bytes": buffer_bytes, "threads": 1, "calls": calls, "bursts": bursts,
                    "gbps": round(statistics.median(rates), 4), "gbps_min": round(min(rates), 4),
                    "gbps_max": round(max(rates), 4), "cpu": cpu_model(), "openssl": openssl_version(),
                    "cryptography": package_version("cryptography")})
    return out


def encryption_fit(records: list[dict]) -> dict[str, float]:
    """GB/s per core per cipher: the median over the records of each (several runs may be pooled)."""
    by_cipher: dict[str, list[float]] = {}
    for r in records:
        if r.get("kind") == RECORD_KIND and r.get("cipher") in ALGORITHMS and (r.get("gbps") or 0) > 0:
            by_cipher.setdefault(r["cipher"], []).append(float(r["gbps"]))
    return {c: round(statistics.median(v), 3) for c, v in by_cipher.items()}


def apply_encryption(profile: Profile, records: list[dict], where: str) -> Profile:
    """The profile with the measured rates (ciphers not measured keep their defaults and sources)."""
    rates = encryption_fit(records)
    if not rates:
        return profile
    src = dict(profile.sources)
    for cipher, rate in rates.items():
        rec = next(r for r in records if r.get("kind") == RECORD_KIND and r.get("cipher") == cipher)
        src[f"encryption_gbps_per_core.{cipher}"] = (
            f"calibrated ({where}): {rec['algorithm']} seal of {rec['buffer_bytes'] // MIB} MiB buffers on one "
            f"thread, {rate:g} GB/s (median of {rec['bursts']} bursts, {rec['gbps_min']:g}..{rec['gbps_max']:g}); "
            f"cryptography {rec.get('cryptography', '?')}, {rec.get('openssl', '?')}")
    merged = dict(profile.encryption_gbps_per_core, **rates)
    return replace(profile, encryption_gbps_per_core=merged, sources=src)
