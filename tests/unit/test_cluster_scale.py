"""A cluster's shortcuts for large groups give what the GPU-by-GPU definitions give."""

import itertools

import pytest

from topowise.costmodel.collectives import alike_by_shift, distinct_groups
from topowise.errors import UsageError
from topowise.topology.cluster import load_cluster
from topowise.topology.mesh import DIMS, FLATTENED, Mesh


def cluster(name="6x hgx-h100-8+ib-ndr"):
    found = load_cluster(name)
    assert found is not None
    return found


def split_by_gpu(gpus, per):
    out: dict[int, list[int]] = {}
    for g in gpus:
        out.setdefault(g // per, []).append(g % per)
    return {n: tuple(sorted(v)) for n, v in sorted(out.items())}


@pytest.mark.parametrize("gpus", [tuple(range(3, 29)), tuple(range(8, 24)), tuple(range(0, 48, 8)),
                                  tuple(range(5, 48, 16)), tuple(range(2, 6)), (1, 9, 17, 26), (7, 3, 9)])
def test_per_node_of_ranges_and_strides_matches_the_gpu_by_gpu_split(gpus):
    c = cluster()
    assert c.per_node(gpus) == split_by_gpu(gpus, 8)
    assert list(c.per_node(gpus)) == sorted(split_by_gpu(gpus, 8))  # nodes in order


def test_check_gpus_refuses_what_gpu_refuses():
    c = cluster()
    c.check_gpus(range(48))
    for bad in ((0, 48), (-1, 3), (5, 99, 100)):
        with pytest.raises(UsageError) as by_check:
            c.check_gpus(bad)
        with pytest.raises(UsageError) as by_gpu:
            for g in bad:
                c.gpu(g)
        assert str(by_check.value) == str(by_gpu.value)


def test_alike_by_shift_keeps_one_of_copies_a_node_apart_and_everything_where_place_matters():
    groups = [tuple(range(n * 8, n * 8 + 4)) for n in range(6)] + [(0, 8), (8, 16), (3, 12)]
    assert alike_by_shift(groups, cluster()) == [(0, 1, 2, 3), (0, 8), (3, 12)]
    assert alike_by_shift(groups, cluster("6x hgx-h100-8+ib-ndr/rack=2,apart=100m")) == groups
    singles = [(g,) for g in range(48)]
    assert alike_by_shift(singles, cluster()) == singles[:8]


def test_distinct_groups_of_a_tuple_is_the_same_on_every_call():
    c = cluster()
    groups = tuple(tuple(range(n * 8, n * 8 + 8)) for n in range(6))
    first = distinct_groups(groups, c)
    first.append("changed by a caller")
    assert distinct_groups(groups, c) == [groups[0]]


def by_coords(mesh, dim):
    members = FLATTENED.get(dim, (dim,))
    found: dict = {}
    for rank, gpu in enumerate(mesh.gpus):
        c = mesh.coords(rank)
        found.setdefault(tuple(c[d] for d in DIMS if d not in members), []).append(gpu)
    return tuple(tuple(g) for g in found.values())


def test_mesh_groups_are_the_ranks_that_differ_only_in_that_dimension():
    for shape in itertools.product((1, 2), (1, 3), (1, 2), (1, 2), (1, 4)):
        size = 1
        for x in shape:
            size *= x
        mesh = Mesh(tuple(f"gpu{i}" for i in range(size)), *shape)
        for dim in DIMS + tuple(FLATTENED):
            assert mesh.groups(dim) == by_coords(mesh, dim), (shape, dim)
