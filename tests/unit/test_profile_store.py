"""The profile store: the machine's fingerprint, the cache of calibrated profiles, and the checks that
refuse a profile of another machine or GPU unless forced. predict and plan use it without importing
torch or any measuring code."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from topowise.calibrate.machine import cpu_topology
from topowise.costmodel import profile_store
from topowise.costmodel.profile import default_profile
from topowise.costmodel.profile_store import (
    cache_dir,
    cache_path,
    check_profile_for_gpu,
    check_profile_for_machine,
    find_cached_profile,
    fingerprint_hash,
    fingerprint_text,
    machine_fingerprint,
    parse_fingerprint,
)
from topowise.errors import UsageError

H200 = "NVIDIA H200"


class FakeNvml:
    """Just what the fingerprint asks NVML."""

    class NVMLError(Exception):
        pass

    def __init__(self, name=H200, count=2, driver="580.95.05", fail=False):
        self.name, self.count, self.driver, self.fail = name, count, driver, fail

    def nvmlInit(self):
        if self.fail:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.name.encode()

    def nvmlSystemGetDriverVersion(self):
        return self.driver


def test_fingerprint_text_parses_back_and_hashes_stably():
    fp = machine_fingerprint("cuda", FakeNvml())
    text = fingerprint_text(fp)
    assert parse_fingerprint(text) == {k: str(v) for k, v in fp.items()}
    assert fingerprint_hash(text) == fingerprint_hash(text) and len(fingerprint_hash(text)) == 16
    assert machine_fingerprint("cuda", FakeNvml(fail=True)) is None
    assert machine_fingerprint("cpu")["device"] == "cpu"


def test_profile_of_another_machine_is_refused_unless_forced():
    here = machine_fingerprint("cuda", FakeNvml())
    other = fingerprint_text(dict(here, driver="550.54.15", count=8))
    profile = replace(default_profile(), fingerprint=other)
    with pytest.raises(UsageError) as err:
        check_profile_for_machine(profile, here, "h200.json")
    msg = str(err.value)
    assert "driver: 580.95.05 here, 550.54.15 in the profile" in msg and "count: 2 here, 8" in msg
    assert "--force-profile" in msg
    check_profile_for_machine(profile, here, "h200.json", force=True)  # forced: accepted
    check_profile_for_machine(replace(profile, fingerprint=fingerprint_text(here)), here, "x")
    check_profile_for_machine(default_profile(), here, "defaults")  # the defaults are valid anywhere
    with pytest.raises(UsageError, match="--force-profile"):
        check_profile_for_machine(profile, None, "h200.json")


def test_profile_of_another_gpu_is_refused_for_a_topology_unless_forced():
    profile = replace(default_profile(), fingerprint=fingerprint_text(machine_fingerprint("cuda", FakeNvml())))
    check_profile_for_gpu(profile, H200, "p.json")
    with pytest.raises(UsageError, match="NVIDIA H100 80GB HBM3.*--force-profile"):
        check_profile_for_gpu(profile, "NVIDIA H100 80GB HBM3", "p.json")
    check_profile_for_gpu(profile, "NVIDIA H100 80GB HBM3", "p.json", force=True)
    cpu = replace(default_profile(), fingerprint=fingerprint_text(machine_fingerprint("cpu")))
    with pytest.raises(UsageError, match="calibrated on CPU "):
        check_profile_for_gpu(cpu, H200, "cpu.json")
    check_profile_for_gpu(cpu, cpu_topology(2).gpus[0].name, "cpu.json")  # the CPU it was made on


def test_cached_profile_is_found_only_for_this_machine(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert find_cached_profile(environ=env, nvml=FakeNvml()) is None  # empty cache
    fp = fingerprint_text(machine_fingerprint("cuda", FakeNvml()))
    path = cache_path(fp, env)
    assert path.parent == tmp_path / "topowise" / "profiles"
    path.parent.mkdir(parents=True)
    path.write_text(replace(default_profile(), compute_efficiency=0.44, fingerprint=fp).to_json())
    found = find_cached_profile(environ=env, nvml=FakeNvml())
    assert found and found[0].compute_efficiency == 0.44 and found[1] == path
    assert find_cached_profile(H200, environ=env, nvml=FakeNvml()) is not None
    assert find_cached_profile("NVIDIA H100", environ=env, nvml=FakeNvml()) is None  # another GPU's topology
    assert find_cached_profile(environ=env, nvml=FakeNvml(driver="999")) is None  # another driver
    assert find_cached_profile(environ=env, nvml=FakeNvml(fail=True)) is None  # no NVML


def test_cache_lookup_is_quick_and_never_imports_torch(tmp_path):
    code = ("import sys, time; t = time.time(); from topowise.costmodel.profile_store import find_cached_profile; "
            "r = find_cached_profile(); print(r is None, 'torch' in sys.modules, round(time.time() - t, 2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    none, torch_loaded, _seconds = out.stdout.split()
    assert none == "True" and torch_loaded == "False", out.stderr


def test_cache_dir_defaults_to_home_cache(monkeypatch):
    assert cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/topowise/profiles")
    assert str(cache_dir({})).endswith(".cache/topowise/profiles")


def test_predict_and_plan_pick_the_cached_profile_of_this_machine(tmp_path, monkeypatch, capsys):
    from topowise.cli.main import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(profile_store, "gpu_inventory", lambda nvml=None: (H200, 2, "580.95.05"))
    fp = fingerprint_text(machine_fingerprint("cuda"))
    path = cache_path(fp)
    path.parent.mkdir(parents=True)
    path.write_text(replace(default_profile(), compute_efficiency=0.25, fingerprint=fp).to_json())
    args = ["predict", "--model", "llama3.2-1b", "--num-gpus", "2", "--strategy", "ddp", "--json"]
    assert main(args + ["--topology", "hgx-h200-8"]) == 0
    cached = json.loads(capsys.readouterr().out)
    assert cached["profile_fingerprint"] == fp
    assert main(args + ["--topology", "hgx-h100-8"]) == 0  # another GPU model: the defaults
    assert json.loads(capsys.readouterr().out)["profile_fingerprint"] == ""
    assert main(["plan", "--model", "llama3.2-1b", "--topology", "hgx-h200-8", "--num-gpus", "2", "--json"]) == 0
    capsys.readouterr()
    # an explicit profile of another GPU is refused for a topology, unless forced
    assert main(args + ["--topology", "hgx-h100-8", "--profile", str(path)]) == 2
    assert "--force-profile" in capsys.readouterr().err
    assert main(args + ["--topology", "hgx-h100-8", "--profile", str(path), "--force-profile"]) == 0


def test_plan_imports_no_calibration_measuring_or_torch_module():
    code = ("import sys; from topowise.cli.main import main; "
            "status = main(['plan', '--model', 'llama3.1-8b', '--topology', 'h100-nvl-8', '--num-gpus', '2', "
            "'--json']); "
            "print(status, sorted(m for m in sys.modules if m.split('.')[0] == 'torch' "
            "or m.startswith(('topowise.calibrate', 'topowise.measure'))), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stderr.strip().splitlines()[-1] == "0 []", out.stderr[-2000:]
