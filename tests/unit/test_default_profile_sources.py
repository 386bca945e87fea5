"""The default profile is data: every value it sets names where it came from (docs/calibration.md)."""

import json
from pathlib import Path

import topowise.costmodel as costmodel
from topowise.costmodel.profile import Profile

DEFAULT = Path(costmodel.__file__).parent / "default_profile.json"
# format and version describe the file; the fingerprint names the machine a calibrated profile was
# measured on and is empty for the default, which was measured on none
NOT_VALUES = {"format", "version", "sources", "fingerprint"}


def leaves(data: dict) -> set[str]:
    """"comm_efficiency": {"NV/all_reduce": ...} -> "comm_efficiency.NV/all_reduce", as sources names them."""
    out = set()
    for key, value in data.items():
        if key in NOT_VALUES:
            continue
        out |= {f"{key}.{sub}" for sub in value} if isinstance(value, dict) else {key}
    return out


def test_every_value_of_the_default_profile_has_a_source():
    data = json.loads(DEFAULT.read_text())
    sources = data["sources"]
    missing = sorted(v for v in leaves(data) if not str(sources.get(v, "")).strip())
    assert not missing, f"values without a source: {missing}"
    stray = sorted(set(sources) - leaves(data))
    assert not stray, f"sources of values the file does not set: {stray}"


def test_the_loaded_default_is_the_file():
    data = json.loads(DEFAULT.read_text())
    loaded = Profile()
    assert loaded.compute_efficiency == data["compute_efficiency"]
    assert dict(loaded.comm_efficiency) == data["comm_efficiency"]
