"""The device mesh on a GPU list: kept here for the planner's imports; it lives in topowise.topology.mesh, where the
cost model (which may not import the planner) reads it too."""

from topowise.topology.mesh import (  # noqa: F401
    DIMS,
    FLATTENED,
    Mesh,
    build_mesh,
    groups_spanning,
    largest_contained_degree,
)
