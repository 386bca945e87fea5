"""The NCCL log parser on lines as NCCL prints them (NVIDIA/nccl issues 952, 1358, 1053; nccl-tests 213)."""

from topowise.measure.nccl_log import debug_env, debug_file_glob, parse_text, read_logs

NVLINK_2GPU = """\
h200:4242:4300 [0] NCCL INFO NCCL version 2.28.3+cuda13.0
h200:4242:4300 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.5<0>
h200:4242:4300 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.
h200:4242:4300 [0] NCCL INFO Using network Socket
h200:4242:4300 [0] NCCL INFO Channel 00/24 :    0   1
h200:4242:4300 [0] NCCL INFO Ring 00 : 1 -> 0 -> 1
h200:4242:4301 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h200:4242:4301 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h200:4243:4302 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
h200:4243:4302 [1] NCCL INFO Connected all rings, use ring PXN 0 GDR 1
"""

MIXED_NODES = """\
node1:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read
node1:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3
node1:926:1151 [7] NCCL INFO Channel 07/0 : 15[7] -> 6[6] [send] via NET/Socket/3
node1:921:1146 [2] NCCL INFO Channel 00/0 : 10[2] -> 9[1] via P2P/IPC/read
node1:920:1146 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
"""


def test_nvlink_run():
    log = parse_text(NVLINK_2GPU)
    assert log.version == "2.28.3+cuda13.0"
    assert log.network == "Socket"
    assert log.plugin.startswith("Could not find")
    assert len(log.connections) == 3
    assert log.transports == ("P2P/CUMEM/read",)
    assert log.kinds == ("P2P",)
    assert log.summary() == "P2P/CUMEM"
    c = log.connections[2]
    assert (c.channel, c.src, c.dst, c.direction) == (0, 1, 0, "")


def test_network_and_ipc_lines():
    log = parse_text(MIXED_NODES)
    assert set(log.kinds) == {"P2P", "NET/Socket", "NET/IB"}
    send = [c for c in log.connections if c.direction == "send"]
    assert len(send) == 2 and send[0].transport == "NET/Socket/3"
    assert [c for c in log.connections if c.direction == "receive"][0].kind == "NET/IB"
    assert log.summary() == "P2P/IPC+NET/Socket+NET/IB"


def test_shm_direct_pointer_and_bus_id_brackets():
    text = (
        "a:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
        "a:1:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer\n"
        "a:1:2 [0] NCCL INFO Channel 02/0 : 0[7000] -> 1[b000] via P2P/IPC/read\n"
    )
    log = parse_text(text)
    assert [c.transport for c in log.connections] == ["SHM/direct/direct", "P2P/direct pointer", "P2P/IPC/read"]
    assert log.summary() == "SHM+P2P/direct+P2P/IPC"
    assert log.version is None


def test_nothing_useful_is_unknown():
    assert parse_text("NCCL WARN something\nhello\n").summary() == "unknown"


def test_reads_every_rank_file(tmp_path):
    (tmp_path / "nccl.h200.4242.log").write_text(NVLINK_2GPU)
    (tmp_path / "nccl.h200.4243.log").write_text(
        "h200:4243:1 [1] NCCL INFO Channel 05/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n")
    pattern = str(tmp_path / "nccl.%h.%p.log")
    assert debug_file_glob(pattern).endswith("nccl.*.*.log")
    log = read_logs(pattern)
    assert len(log.connections) == 4 and log.version.startswith("2.28.3")


def test_debug_env_respects_the_users_settings(tmp_path):
    env = debug_env(str(tmp_path), {})
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,P2P,SHM,NET"
    assert env["NCCL_DEBUG_FILE"].endswith("nccl.%h.%p.log")
    assert debug_env(str(tmp_path), {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "x"}) == {
        "NCCL_DEBUG_SUBSYS": "INIT,P2P,SHM,NET"}
