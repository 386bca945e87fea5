"""topowise's encryption rate per core beside `openssl speed` on the same host, one thread.

    python research/2026-12-01-cpu-encryption/encryption_vs_openssl.py [--seconds 3] [--repeat 3] [--out FILE.jsonl]

For AES-256-GCM and ChaCha20-Poly1305: topowise.calibrate.crypto.measure_encryption (the `cryptography`
package, the OpenSSL its wheel bundles) with 1 MiB buffers (what calibrate uses) and 16 KiB buffers,
and `openssl speed -evp <cipher> -bytes 16384 -seconds S` (the `openssl` on PATH, a single process).
Prints a markdown table of the medians over --repeat runs; --out appends every run as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess

from topowise.calibrate.crypto import ALGORITHMS, measure_encryption
from topowise.measure.records import append_record

OPENSSL_EVP = {"aes-gcm": "aes-256-gcm", "chacha20": "chacha20-poly1305"}
BLOCK = 16384


def openssl_speed(cipher: str, seconds: int) -> tuple[float, str]:
    """GB/s of `openssl speed -evp` at 16384-byte blocks, and its last line as printed."""
    evp = OPENSSL_EVP[cipher]
    cmd = ["openssl", "speed", "-evp", evp, "-bytes", str(BLOCK), "-seconds", str(seconds)]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    # the result row: "<name>  <N>k" with N in 1000s of bytes per second
    row = [line for line in text.splitlines() if line.lower().startswith(evp) and line.rstrip().endswith("k")]
    if not row:
        raise SystemExit(f"no result row for {evp} in openssl speed's output:\n{text}")
    kbytes = float(re.findall(r"([\d.]+)k\s*$", row[-1])[0])
    return kbytes * 1e3 / 1e9, row[-1].strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3, help="openssl speed's time per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if shutil.which("openssl") is None:
        raise SystemExit("no `openssl` on PATH")
    version = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
    rows = {c: {"1mib": [], "16kib": [], "openssl": []} for c in ALGORITHMS}
    for i in range(args.repeat):
        for buffer_bytes, key in ((2**20, "1mib"), (BLOCK, "16kib")):
            for rec in measure_encryption(buffer_bytes=buffer_bytes):
                rows[rec["cipher"]][key].append(rec["gbps"])
                if args.out:
                    append_record(args.out, dict(rec, source="topowise", run=i))
        for cipher in ALGORITHMS:
            gbps, line = openssl_speed(cipher, args.seconds)
            rows[cipher]["openssl"].append(gbps)
            if args.out:
                append_record(args.out, {"kind": "openssl_speed", "cipher": cipher, "evp": OPENSSL_EVP[cipher],
                                         "bytes": BLOCK, "seconds": args.seconds, "gbps": gbps, "line": line,
                                         "openssl": version, "run": i})
    rec = measure_encryption(buffer_bytes=BLOCK, bursts=1, burst_s=0.01)[0]
    print(f"topowise: cryptography {rec['cryptography']}, {rec['openssl']}; openssl speed: {version}")
    print(f"medians of {args.repeat} runs, GB/s (1e9 B/s), one thread\n")
    print("| cipher | topowise, 1 MiB buffers | topowise, 16 KiB buffers | openssl speed -evp, 16384-byte blocks "
          "| topowise 16 KiB / openssl |")
    print("|---|---|---|---|---|")
    for cipher, r in rows.items():
        m = {k: statistics.median(v) for k, v in r.items()}
        print(f"| {ALGORITHMS[cipher]} | {m['1mib']:.2f} ({min(r['1mib']):.2f}..{max(r['1mib']):.2f}) "
              f"| {m['16kib']:.2f} ({min(r['16kib']):.2f}..{max(r['16kib']):.2f}) "
              f"| {m['openssl']:.2f} ({min(r['openssl']):.2f}..{max(r['openssl']):.2f}) "
              f"| {m['16kib'] / m['openssl']:.2f} |")
    if args.out:
        print(f"\nevery run: {args.out}")
    print(json.dumps({c: {k: statistics.median(v) for k, v in r.items()} for c, r in rows.items()}))


if __name__ == "__main__":
    main()
