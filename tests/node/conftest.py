"""The one-node cluster (tests/node/node.py), once per test process, for the tests of this
directory (all in one file, so pytest-xdist's loadfile keeps them on one worker: the node's
bridge and the kubelet's port are the machine's). Marked ``node``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.control_plane import binaries
from tests.node.node import Node


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.node)


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    if os.geteuid() != 0:  # said at the end of the run in red (tests/conftest.py), with the fix
        pytest.skip("the node tests run a kubelet, containerd and network namespaces: run the tests as root")
    started = Node.start(tmp_path_factory.mktemp("node"), binaries().current)
    yield started
    started.stop()
