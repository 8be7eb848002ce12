"""Clusters: the model (devices, links, groups of nodes) and the named machines.

:mod:`pase.cluster.model` holds the classes and :func:`compose`;
:mod:`pase.cluster.presets` the presets of real machines and :func:`get_cluster`,
the spec parser, built on the model. Both are imported here in that order, so
``from pase.cluster import get_cluster`` works and no import can cycle.
"""
from pase.cluster.model import (
    LINK_CLASSES,
    MAX_DEVICES,
    PRECISIONS,
    SCHEMA,
    SCHEMA_VERSION,
    Cluster,
    Device,
    Group,
    Link,
    compose,
    node_of,
)
from pase.cluster.presets import PRESETS, get_cluster, preset_names

__all__ = ["LINK_CLASSES", "MAX_DEVICES", "PRECISIONS", "SCHEMA", "SCHEMA_VERSION", "Cluster", "Device", "Group",
           "Link", "PRESETS", "compose", "get_cluster", "node_of", "preset_names"]
