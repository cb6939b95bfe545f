"""The one-node cluster's pure parts (kappa_operator/local_cluster): what `kappa cluster up`
writes for a user, and what each image's cache key covers. The cluster itself runs in
tests/node."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from kappa_operator.local_cluster.addresses import (
    PODS,
    SOCKET_PATH_MAX,
    NodeAddress,
    NodeError,
    routes_of,
    socket_path_too_long,
)
from kappa_operator.local_cluster.cluster import CREDENTIALS, LocalCluster
from kappa_operator.local_cluster.commands import ClusterCommandError, example_manifests, left_running, up
from kappa_operator.local_cluster.control_plane import ROOT
from kappa_operator.local_cluster.images import CONTEXT, SPARK_IMAGE
from kappa_operator.local_cluster.kubernetes import node_count_refused
from kappa_operator.local_cluster.storage import ACCESS_KEY, SECRET_KEY, CatalogDatabase, ObjectStore, database_home
from kappa_operator.local_cluster.sweep import container_ids, container_processes, in_containers
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob


def cluster(tmp_path: Path) -> LocalCluster:
    """A cluster's description, nothing started: what the manifests are made from."""
    none = cast(Any, None)
    store = ObjectStore("10.244.0.1", 9000, none, tmp_path / "s3-slow-down")
    database = CatalogDatabase("10.244.0.1", 5432, tmp_path / "db", none)
    return LocalCluster(tmp_path, none, none, store, database, none, tmp_path / "kubeconfig")


def test_the_examples_written_for_the_cluster_are_valid_objects_pointed_at_its_storage(tmp_path: Path) -> None:
    written = example_manifests(cluster(tmp_path), tmp_path / "examples")
    assert [p.name for p in written][:3] == ["rmi-streamingjob.yaml", "rmi-backfill.yaml", "rmi-rewind.yaml"]
    assert {p.name for p in written} >= {"enrich-streamingjob.yaml", "enrich-changes-backfill.yaml"}
    job_doc, backfill_doc, rewind_doc = (yaml.safe_load(p.read_text()) for p in written[:3])
    for path in written[3:]:  # the enrich examples: valid, pointed at the cluster as rmi's are
        doc = yaml.safe_load(path.read_text())
        if doc["kind"] == "StreamingJob":
            enrich = StreamingJob.model_validate(doc)
            assert enrich.spec.image == SPARK_IMAGE and enrich.metadata.namespace == "default"
            assert enrich.spec.checkpoints.location == f"s3a://lake/checkpoints/{enrich.metadata.name}"
        else:
            assert Backfill.model_validate(doc).spec.job_ref.name in {"enrich", "enrich-changes"}
    job = StreamingJob.model_validate(job_doc)
    assert job.spec.image == SPARK_IMAGE
    catalog = job.spec.catalogs["default"]
    assert catalog["uri"] == "postgresql+psycopg2://kappa:kappa@10.244.0.1:5432/iceberg"
    assert catalog["s3.endpoint"] == "http://10.244.0.1:9000"
    assert job.spec.checkpoints.location == "s3a://lake/checkpoints/rmi"
    assert job.spec.spark_conf["spark.hadoop.fs.s3a.endpoint"] == "http://10.244.0.1:9000"
    jvm = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
    assert job.spec.spark_conf["spark.driver.extraJavaOptions"] == jvm, "short runs on one small node"
    assert job.spec.spark_conf["spark.executor.extraJavaOptions"] == jvm
    assert [e.secret_ref.name for e in job.spec.env_from if e.secret_ref] == [CREDENTIALS]
    assert {s.live.starting_position for s in job.spec.sources.values()} == {"earliest"}, "the example data is history"
    assert Backfill.model_validate(backfill_doc).spec.job_ref.name == job.metadata.name
    rewind = Rewind.model_validate(rewind_doc)
    assert rewind.spec.job_ref.name == job.metadata.name
    assert rewind.spec.target.batch_id == 0, "a snapshot the job has minutes after it started"


def test_each_images_cache_key_covers_every_file_its_dockerfile_copies() -> None:
    """An image is rebuilt when what it copies changes, and only then (images.CONTEXT): a COPY
    from outside its key would serve a stale image."""
    for component, context in CONTEXT.items():
        dockerfile = ROOT / "images" / component / "Dockerfile"
        sources = [
            src
            for line in dockerfile.read_text().splitlines()
            if line.startswith("COPY") and "--from=" not in line
            for src in re.sub(r"--\S+", "", line).split()[1:-1]
        ]
        assert sources, component
        for src in sources:
            covered = src.startswith(f"images/{component}/") or any(
                src == c or src.startswith(c.rstrip("/") + "/") for c in context
            )
            assert covered, f"{component}: COPY {src} is not in its cache key {context}"


def test_the_s3_api_answers_slow_down_while_told_to_and_keeps_its_objects(tmp_path: Path) -> None:
    """The fault the node tests give the sink: S3's throttling answer (503 SlowDown) to every
    request for a while, then the same objects served again; what was refused is named."""
    import socket

    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = ObjectStore.start(tmp_path, "127.0.0.1", port)
    try:
        client = store.client()
        client.put_object(Bucket="lake", Key="a", Body=b"before")
        impatient = boto3.client(
            "s3",
            endpoint_url=store.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}),
        )
        with store.slowing_down() as refused, pytest.raises(ClientError) as answered:
            impatient.put_object(Bucket="lake", Key="b", Body=b"during")
        assert answered.value.response["Error"]["Code"] == "SlowDown"
        assert answered.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert refused and all(line.startswith("PUT /lake/b") for line in refused), refused
        client.put_object(Bucket="lake", Key="b", Body=b"after")
        assert client.get_object(Bucket="lake", Key="a")["Body"].read() == b"before"
        assert client.get_object(Bucket="lake", Key="b")["Body"].read() == b"after"
    finally:
        store.stop()


CONTAINER = "3f" * 32
"""A container id as containerd names one: 64 hex digits."""


def test_a_process_is_in_a_container_when_a_cgroup_of_it_is_named_by_the_containers_id() -> None:
    v1 = "\n".join(
        [
            f"12:pids:/kubepods/besteffort/pod0b1c/{CONTAINER}",
            f"4:memory:/kubepods/besteffort/pod0b1c/{CONTAINER}/",
            "1:name=systemd:/",
        ]
    )
    v2 = f"0::/kubepods/burstable/pod0b1c/{CONTAINER}\n"
    assert in_containers(v1, {CONTAINER}) and in_containers(v2, {CONTAINER})
    # the host's own processes, another node's containers, and the pod's cgroup itself are not
    assert not in_containers("0::/init.scope\n", {CONTAINER})
    assert not in_containers(f"0::/kubepods/besteffort/pod0b1c/{'a' * 64}\n", {CONTAINER})
    assert not in_containers("0::/kubepods/besteffort/pod0b1c\n", {CONTAINER})
    assert not in_containers(v1, set())


def test_the_nodes_containers_are_the_bundles_under_its_containerds_state(tmp_path: Path) -> None:
    tasks = tmp_path / "n1" / "containerd" / "state" / "io.containerd.runtime.v2.task"
    (tasks / "k8s.io" / CONTAINER).mkdir(parents=True)
    (tasks / "k8s.io" / "b").mkdir()
    (tasks / "k8s.io" / "stray-file").write_text("")
    other = tmp_path / "n2" / "containerd" / "state" / "io.containerd.runtime.v2.task" / "k8s.io" / "c"
    other.mkdir(parents=True)
    assert container_ids(tmp_path) == {CONTAINER, "b", "c"}, "every node's under the cluster's node directory"
    assert container_ids(tmp_path / "n1") == {CONTAINER, "b"}, "one node's"
    assert container_ids(tmp_path / "no-node-here") == set()
    # with no container, no process is one of them (and /proc is not read)
    assert container_processes(set()) == []


def writable_cgroup_root() -> Path | None:
    """Where this machine lets root make a cgroup: the pids hierarchy (cgroup v1) or the
    unified one (v2). None where it does not (not root, cgroups read-only)."""
    for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
            return root
    return None


def test_a_process_left_in_a_containers_cgroup_is_found_by_its_id_and_none_other() -> None:
    """A real process in a real cgroup named as the kubelet names a container's: what the node's
    stop kills after the shims, and the only one it finds."""
    root = writable_cgroup_root()
    if root is None:
        pytest.skip("making a cgroup needs root and a writable cgroup hierarchy")
    leaf = root / f"kappa-test-{os.getpid()}" / f"pod{os.getpid()}" / CONTAINER
    leaf.mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (leaf / "cgroup.procs").write_text(str(proc.pid))
        assert container_processes({CONTAINER}) == [proc.pid]
        assert container_processes({"a" * 64}) == []
    finally:
        proc.kill()
        proc.wait()
        for cgroup in (leaf, leaf.parent, leaf.parent.parent):
            cgroup.rmdir()


SLEEP = "import time; time.sleep(60)"
"""A process whose command line names a path (its argument), as a cluster's parts name theirs."""


def test_what_a_dead_supervisor_left_running_is_found_by_its_directory_and_its_databases(tmp_path: Path) -> None:
    """`kappa cluster down` after the supervisor was killed ends these: processes naming the
    cluster's directory, or the catalog database's outside it. Others are not its own."""
    parts = tmp_path / "parts"
    assert left_running(parts) == []
    named = [
        subprocess.Popen([sys.executable, "-c", SLEEP, str(where)], start_new_session=True)
        for where in (parts / "kafka", database_home(parts / "storage") / "data")
    ]
    other = subprocess.Popen([sys.executable, "-c", SLEEP, str(tmp_path / "elsewhere")], start_new_session=True)
    try:
        assert left_running(parts) == sorted(p.pid for p in named)
    finally:
        for proc in (*named, other):
            proc.kill()
            proc.wait()
    assert left_running(parts) == []


def test_a_node_directory_too_long_for_its_sockets_is_refused_naming_the_socket_and_by_how_much() -> None:
    assert socket_path_too_long(Path("/tmp/kc/cluster/parts/node/n1")) is None
    fits = Path("/" + "d" * (SOCKET_PATH_MAX - len("/kubelet/root/device-plugins/kubelet.sock") - 1))
    assert socket_path_too_long(fits) is None
    said = socket_path_too_long(Path(f"{fits}xy"))
    assert said is not None
    assert f"{fits}xy/kubelet/root/device-plugins/kubelet.sock would be {SOCKET_PATH_MAX + 2} bytes" in said
    assert said.endswith("(shorten the directory by 2 characters)")
    # what docs/reference.md tells a user: a cluster's --dir of at most 49 characters (node n1;
    # `--nodes` up to 9 keeps one digit)
    assert socket_path_too_long(Path("/" + "d" * 48) / "parts" / "node" / "n9") is None
    assert socket_path_too_long(Path("/" + "d" * 49) / "parts" / "node" / "n9") is not None


def test_kappa_cluster_up_in_a_directory_too_long_says_so_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    workdir = tmp_path / ("long" * 20)
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # the root check comes first
    with pytest.raises(
        ClusterCommandError, match=r"--dir or \$KAPPA_CLUSTER_DIR.*too long for the node's unix sockets"
    ):
        up(workdir, Console())
    assert not workdir.exists(), "nothing started, nothing written"


def test_each_node_has_its_own_names_addresses_pod_range_and_zone() -> None:
    first, third = NodeAddress(1), NodeAddress(3)
    assert (first.name, first.veth, first.ip, first.pods, first.pods_gateway, first.zone) == (
        "kappa-node-1", "kappa-n1", "10.244.0.11", "10.244.1.0/24", "10.244.1.1", "zone-a",
    )  # fmt: skip
    assert (third.ip, third.pods, third.zone, NodeAddress(4).zone) == (
        "10.244.0.13",
        "10.244.3.0/24",
        "zone-c",
        "zone-a",
    )
    assert all(ipaddress.ip_network(NodeAddress(i).pods).subnet_of(ipaddress.ip_network(PODS)) for i in range(1, 10))
    assert all(len(NodeAddress(i).veth) <= 15 for i in range(1, 10)), "Linux's bound on an interface's name"
    with pytest.raises(NodeError, match="1 to 9 nodes"):
        NodeAddress(10)


def test_a_node_routes_every_other_nodes_pods_to_that_node_and_none_to_itself() -> None:
    assert routes_of(NodeAddress(2), 3) == [("10.244.1.0/24", "10.244.0.11"), ("10.244.3.0/24", "10.244.0.13")]
    assert routes_of(NodeAddress(1), 1) == []


def test_a_node_count_outside_what_the_addresses_allow_is_refused_by_its_flag() -> None:
    assert node_count_refused(1) is None and node_count_refused(9) is None
    assert node_count_refused(0) == "--nodes 0: the local cluster runs 1 to 9 nodes (its addresses: 10.244.0.11-19)"
    assert node_count_refused(10) is not None
