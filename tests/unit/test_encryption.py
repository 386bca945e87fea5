"""Encryption: the host's AES-GCM / ChaCha20-Poly1305 rate per core, measured on this CPU with the
`cryptography` package, carried by the profile into what an encrypted link can move."""

import dataclasses
import json
import math

import pytest

from topowise.calibrate.crypto import apply_encryption, encryption_fit, measure_encryption
from topowise.calibrate.launch import RECORD_FILES, read_records_dir
from topowise.cli.main import main
from topowise.costmodel.encryption import (
    CIPHERS,
    TLS_PAYLOAD_FRACTION,
    encrypted_gbps,
    encryption_latency_s,
)
from topowise.costmodel.profile import Profile, default_profile
from topowise.errors import UsageError
from topowise.units import KIB


@pytest.fixture(scope="module")
def measured():
    """This CPU's rates: short bursts of 64 KiB seals (a fraction of a second in all)."""
    return measure_encryption(buffer_bytes=64 * KIB, bursts=2, burst_s=0.02)


def test_the_rate_is_measured_on_this_cpu_and_enters_the_prediction(measured):
    assert {r["cipher"] for r in measured} == {"aes-gcm", "chacha20"}
    assert all(r["gbps"] > 0 and r["threads"] == 1 and r["kind"] == "encryption" for r in measured)
    here = apply_encryption(default_profile(), measured, "this CPU")
    rate = {r["cipher"]: r["gbps"] for r in measured}
    assert here.encryption_gbps_per_core == pytest.approx(rate, rel=1e-3)
    assert here.sources["encryption_gbps_per_core.aes-gcm"].startswith("calibrated (this CPU)")
    halved = dataclasses.replace(here, encryption_gbps_per_core={k: v / 2 for k, v in
                                                                 here.encryption_gbps_per_core.items()})
    for cipher in ("aes-gcm", "chacha20", "tls"):
        assert encrypted_gbps(cipher, 4, here) == pytest.approx(2 * encrypted_gbps(cipher, 4, halved))
        assert encryption_latency_s(cipher, halved) == pytest.approx(2 * encryption_latency_s(cipher, here))
    assert encrypted_gbps("aes-gcm", 1, here) == pytest.approx(rate["aes-gcm"], rel=1e-3)


def test_rate_scales_with_cores_and_nothing_else_caps_it():
    p = default_profile()
    one = encrypted_gbps("chacha20", 1, p)
    assert [encrypted_gbps("chacha20", c, p) for c in (1, 2, 16, 256)] == pytest.approx([one * c for c in (1, 2, 16,
                                                                                                         256)])
    assert encrypted_gbps("tls", 8, p) == pytest.approx(encrypted_gbps("aes-gcm", 8, p) * TLS_PAYLOAD_FRACTION)
    assert TLS_PAYLOAD_FRACTION == 16384 / (16384 + 22)  # RFC 8446: 5-byte header, content type, 16-byte tag


def test_no_encryption_costs_nothing_and_the_others_a_little_latency():
    assert CIPHERS == ("none", "aes-gcm", "chacha20", "tls")
    assert encrypted_gbps("none", 1) == math.inf and encryption_latency_s("none") == 0.0
    for cipher in CIPHERS[1:]:
        assert 0 < encryption_latency_s(cipher) < 1e-3


@pytest.mark.parametrize("cipher,cores,match", [
    ("rot13", 1, "unknown cipher 'rot13'; known: none, aes-gcm, chacha20, tls"),
    ("aes-gcm", 0, "whole number >= 1"),
    ("aes-gcm", 1.5, "whole number >= 1"),
])
def test_bad_cipher_or_core_count_is_a_usage_error(cipher, cores, match):
    with pytest.raises(UsageError, match=match):
        encrypted_gbps(cipher, cores, default_profile())


def test_profile_round_trips_and_old_files_without_the_field_still_load():
    p = dataclasses.replace(default_profile(), encryption_gbps_per_core={"aes-gcm": 1.5, "chacha20": 0.5})
    assert Profile.from_dict(json.loads(p.to_json())) == p
    old = default_profile().to_dict()
    del old["encryption_gbps_per_core"]
    assert Profile.from_dict(old).encryption_gbps_per_core == default_profile().encryption_gbps_per_core
    assert all(f"encryption_gbps_per_core.{c}" in default_profile().sources for c in ("aes-gcm", "chacha20"))


def test_pooled_records_take_the_median_and_unknown_ones_are_ignored():
    recs = [{"kind": "encryption", "cipher": "aes-gcm", "gbps": g} for g in (1.0, 3.0, 2.0)]
    recs += [{"kind": "encryption", "cipher": "des", "gbps": 9.0}, {"kind": "collective", "gbps": 5.0}]
    assert encryption_fit(recs) == {"aes-gcm": 2.0}


def test_calibrate_only_encryption_writes_a_profile_without_gpus(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out, recs = tmp_path / "p.json", tmp_path / "recs"
    assert main(["calibrate", "--only", "encryption", "--out", str(out), "--records", str(recs), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    written = json.loads(out.read_text())
    assert written["encryption_gbps_per_core"] == report["encryption_gbps_per_core"]
    assert report["base"] == "the default profile"
    (recs / "meta.json").write_text("{}")
    records, _ = read_records_dir(recs)
    assert RECORD_FILES["encryption"] == "encryption.jsonl" and len(records) == 2


def test_calibrate_only_encryption_refuses_gpu_flags(capsys):
    assert main(["calibrate", "--only", "encryption", "--fit", "compute_efficiency"]) == 2
    assert "drop --fit" in capsys.readouterr().err


def test_calibrate_fits_the_encryption_records_of_a_run_and_keeps_the_unmeasured_cipher():
    from topowise.calibrate.fit import fit_profile
    from topowise.topology.presets import load_preset

    rec = {"kind": "encryption", "cipher": "aes-gcm", "algorithm": "AES-256-GCM", "buffer_bytes": 2**20,
           "bursts": 5, "gbps": 1.25, "gbps_min": 1.2, "gbps_max": 1.3}
    profile, report = fit_profile([rec], load_preset("h200-x2"), "device=cuda; name=NVIDIA H200", where="t")
    assert report["encryption_gbps_per_core"] == {"aes-gcm": 1.25}
    assert profile.encryption_gbps_per_core == {"aes-gcm": 1.25,
                                                "chacha20": default_profile().encryption_gbps_per_core["chacha20"]}
    assert profile.sources["encryption_gbps_per_core.aes-gcm"].startswith("calibrated (t)")
