"""For a fixed cluster, model and strategy the predicted step never gets faster when the network gets
worse: a lower rate, a higher latency, racks farther apart, a slower WAN or a longer round trip."""

from hypothesis import given, settings
from hypothesis import strategies as st

from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology.cluster import make_cluster
from topowise.topology.fabric import Layout, WanSpec, network_spec
from topowise.topology.presets import load_preset

PROFILE = default_profile()
MODEL = load_model("llama3.2-1b")
NODE = load_preset("hgx-h100-8")


def _cluster(rate_gbit, latency_us, rdma, apart_m, wan_gbit, rtt_ms, cipher):
    """2 regions of 2 nodes (one node per rack) on a custom link, joined by a WAN."""
    net = network_spec(f"custom-{rate_gbit:.3f}gbit-{latency_us:.3f}us" + ("-rdma" if rdma else ""))
    return make_cluster(NODE, 4, net, layout=Layout(1, apart_m, 3), regions=(2, 2),
                        wan=WanSpec(wan_gbit / 8, rtt_ms, cipher))


def _step_s(cluster, strategy):
    run = Run(MODEL, cluster.indices, strategy, shard_group_size=16 if strategy == "hsdp" else None)
    return predict(run, cluster, PROFILE).step_time_s


pair = lambda lo, hi: st.tuples(st.floats(lo, hi), st.floats(lo, hi)).map(sorted)  # (better, worse) order by value


@settings(max_examples=30, deadline=None)
@given(rate=pair(1, 800), latency=pair(0, 50), apart=pair(0, 5000), wan=pair(1, 400), rtt=pair(0, 200),
       rdma=st.booleans(), cipher=st.sampled_from(["none", "aes-gcm", "chacha20", "tls"]),
       strategy=st.sampled_from(["ddp", "zero1", "zero2", "zero3", "hsdp"]),
       worse=st.sets(st.sampled_from(["rate", "latency", "apart", "wan", "rtt"]), min_size=1))
def test_a_worse_network_never_makes_a_step_faster(rate, latency, apart, wan, rtt, rdma, cipher, strategy, worse):
    # round to what the name form says exactly (3 decimals)
    rate, latency, apart, wan, rtt = ([round(v, 3) for v in p] for p in (rate, latency, apart, wan, rtt))
    good = {"rate_gbit": rate[1], "latency_us": latency[0], "apart_m": apart[0], "wan_gbit": wan[1],
            "rtt_ms": rtt[0]}
    bad = dict(good)
    if "rate" in worse:
        bad["rate_gbit"] = rate[0]
    if "latency" in worse:
        bad["latency_us"] = latency[1]
    if "apart" in worse:
        bad["apart_m"] = apart[1]
    if "wan" in worse:
        bad["wan_gbit"] = wan[0]
    if "rtt" in worse:
        bad["rtt_ms"] = rtt[1]
    fast = _step_s(_cluster(rdma=rdma, cipher=cipher, **good), strategy)
    slow = _step_s(_cluster(rdma=rdma, cipher=cipher, **bad), strategy)
    assert slow >= fast * (1 - 1e-12)
