"""Image sizes as the nodes report containerd's (bench/node.py, issue 58)."""

from __future__ import annotations

from typing import Any

from bench.node import image_sizes


def node(*images: tuple[list[str], int]) -> dict[str, Any]:
    return {"status": {"images": [{"names": names, "sizeBytes": size} for names, size in images]}}


def test_each_image_by_its_tag_at_the_largest_size_a_node_reports() -> None:
    spark = ["kappa.dev/kappa-spark@sha256:5263", "kappa.dev/kappa-spark:0.1.0"]
    nodes = [
        node((spark, 515_600_000), (["kappa.dev/pause:1"], 750_000)),
        node((spark, 515_000_000)),
        node((["kappa.dev/spark-operator@sha256:cced"], 235_500_000)),
        {"status": {}},
    ]
    assert image_sizes(nodes) == {
        "kappa.dev/kappa-spark:0.1.0": 515.6,
        "kappa.dev/pause:1": 0.8,
        "kappa.dev/spark-operator@sha256:cced": 235.5,
    }
