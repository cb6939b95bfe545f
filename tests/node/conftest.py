"""The one-node cluster (kappa_operator/local_cluster: the node, CoreDNS, the spark-operator and
kappa installed by their charts, S3 and the catalog's database), once per test process, for the
tests of this directory (all in one file, so pytest-xdist's loadfile keeps them on one worker:
the node's bridge, ports and the kubelet are the machine's). Marked ``node``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kappa_operator.local_cluster.cluster import LocalCluster
from kappa_operator.local_cluster.node import Node


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.node)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if os.geteuid() != 0:  # said at the end of the run in red (tests/conftest.py), with the fix
        pytest.skip("the node tests run a kubelet, containerd and network namespaces: run the tests as root")
    started = LocalCluster.up(tmp_path_factory.mktemp("cluster"))
    yield started
    started.stop(keep_data=False)


@pytest.fixture(scope="session")
def node(cluster: LocalCluster) -> Node:
    return cluster.node
