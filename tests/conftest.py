"""Fixtures shared by every test directory: a real S3 API (moto's server on loopback),
started once per session only when a test asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3 import MotoS3


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3]:
    server = MotoS3.threaded()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server: MotoS3) -> str:
    """A fresh, empty bucket for one test."""
    return s3_server.create_bucket()
