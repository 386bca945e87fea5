"""A stand-in for the `pynvml` module: just the calls topology/nvml.py and envinfo.py make.

Build one with `FakeNVML(gpus, nvlinks=..., ancestors=...)`; each GPU is (name, bus id), each NVLink
is (gpu, remote bus id, remote type). Behaves like NVML: unsupported calls raise NVMLError.
"""

from types import SimpleNamespace


class NVMLError(Exception):
    pass


class FakeNVML:
    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1
    NVML_P2P_CAPS_INDEX_READ = 0,  # a tuple, as some nvidia-ml-py releases define it
    NVML_P2P_STATUS_OK = 0

    def __init__(self, gpus, nvlinks=None, ancestors=None, p2p_bad=(), numa=None, pcie=(5, 16),
                 remote_type=True, init_error=None, memory=150_754_820_096):
        self.gpus = gpus  # [(name, bus id)]
        self.nvlinks = nvlinks or {}  # gpu -> [(remote bus id, remote type 0 GPU / 2 switch)]
        self.ancestors = ancestors or {}  # (a, b) -> NVML topology level (10..50)
        self.p2p_bad = {frozenset(p) for p in p2p_bad}
        self.numa = numa
        self.pcie = pcie
        self.init_error = init_error
        self.memory = memory
        self.calls = []
        if not remote_type:
            self.nvmlDeviceGetNvLinkRemoteDeviceType = None
        if numa is None:
            self.nvmlDeviceGetNumaNodeId = None

    # --- lifetime ---
    def nvmlInit(self):
        if self.init_error:
            raise NVMLError(self.init_error)
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    # --- system ---
    def nvmlSystemGetDriverVersion(self):
        return b"580.95.05"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    # --- devices ---
    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.gpus[h][0]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self.gpus[h][1].encode())

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self.memory)

    def nvmlDeviceGetNumaNodeId(self, h):
        return self.numa[h]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self.pcie[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self.pcie[1]

    # --- NVLink ---
    def nvmlDeviceGetNvLinkState(self, h, link):
        links = self.nvlinks.get(h, [])
        if not links:
            raise NVMLError("Not Supported")
        return 1 if link < len(links) else 0

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self.nvlinks[h][link][1]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=self.nvlinks[h][link][0].encode())

    # --- pairs ---
    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.ancestors.get((min(a, b), max(a, b)), 50)

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert isinstance(index, int), "pass the index as an int, not pynvml's tuple"
        return 4 if frozenset((a, b)) in self.p2p_bad else 0  # 4: NVML_P2P_STATUS_NOT_SUPPORTED


SWITCH, GPU = 2, 0


def h200_nvswitch_slice() -> FakeNVML:
    """2x H200 given a slice of an NVSwitch board: every GPU's 18 links end on switches."""
    gpus = [("NVIDIA H200", "00000000:18:00.0"), ("NVIDIA H200", "00000000:2A:00.0")]
    switches = ["00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0"]
    nvlinks = {g: [(switches[k % 4], SWITCH) for k in range(18)] for g in range(2)}
    return FakeNVML(gpus, nvlinks, ancestors={(0, 1): 40}, numa=[0, 0])


def bridged_pairs_4(**kw) -> FakeNVML:
    """4x A100 PCIe: GPU0-GPU1 and GPU2-GPU3 on NV12 bridges, SYS across, one NUMA node per pair."""
    gpus = [("NVIDIA A100 80GB PCIe", f"00000000:{b}:00.0") for b in ("17", "31", "B1", "CA")]
    bus = [g[1] for g in gpus]
    nvlinks = {0: [(bus[1], GPU)] * 12, 1: [(bus[0], GPU)] * 12, 2: [(bus[3], GPU)] * 12, 3: [(bus[2], GPU)] * 12}
    ancestors = {(0, 1): 30, (2, 3): 30, (0, 2): 50, (0, 3): 50, (1, 2): 50, (1, 3): 50}
    return FakeNVML(gpus, nvlinks, ancestors=ancestors, pcie=(4, 16), **kw)
