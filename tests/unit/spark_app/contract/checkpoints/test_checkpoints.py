"""Checkpoint catalog, externalized snapshots, retention and restore, without Spark.

Checkpoints here are synthetic but written in the format Spark 4.3 writes (checked against a
real run of the ``sessions`` example): ``metadata``, ``offsets/N`` ("v1", batch metadata, one
line per source, "-" for none), ``commits/N``, HDFS state store deltas and snapshots per
partition, operator ``_metadata``, and Hadoop's hidden ``.crc`` side files. Storage-facing tests
run on a local directory and on a real S3 API (moto's server) alike.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.s3 import MotoS3
from spark_app.contract.checkpoints import (
    DestinationNotEmptyError,
    IncompleteCheckpointError,
    Location,
    Manifest,
    NoRestorablePointError,
    TimelineConflictError,
    apply_retention,
    choose,
    collect_garbage,
    discard_after,
    externalize,
    layout,
    list_batches,
    list_snapshots,
    open_location,
    query_id,
    restore,
    snapshots,
)
from spark_app.contract.checkpoints.catalog import BatchInfo, decode_offset
from spark_app.contract.checkpoints.errors import CheckpointError, SnapshotDamagedError
from spark_app.contract.checkpoints.restore import copies_left, restore_order
from spark_app.contract.errors import KappaError
from spark_app.contract.offsets import BackfillOffset, LiveOffset
from spark_app.contract.storage import FileStat, S3Options

QUERY = "f2e84b7f-38d4-44b5-b3a9-2b63dbb34ac8"
CONF = {
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state."
    "HDFSBackedStateStoreProvider",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
}
T0_MS = 1_795_300_000_000
WM0_MS = 1_793_527_199_866


# --- a synthetic checkpoint, in Spark's format ------------------------------------------------


def live_offset(n: int) -> str:
    return json.dumps(LiveOffset(snapshot_id=7_000_000_000_000_000_000 + n, position=1, complete=True).to_dict())


def backfill_offset(n: int) -> str:
    return json.dumps(BackfillOffset(snapshot_id=42, position=n, plan="p1").to_dict())


def watermark(n: int) -> int:
    return 0 if n == 0 else WM0_MS + n * 60_000


class FakeQuery:
    """A stateful query's checkpoint, written as Spark writes it, batch by batch: offsets/N
    before the batch, state version N+1 per partition, commits/N after it."""

    def __init__(
        self,
        loc: Location,
        partitions: int = 2,
        crc: bool = True,
        fresh: bool = True,
        next_batch: int = 0,
        clock_ms: int = T0_MS,
    ) -> None:
        self.loc, self.partitions, self.crc = loc, partitions, crc
        self.next_batch, self.clock_ms = next_batch, clock_ms
        if fresh:
            self.write("metadata", json.dumps({"id": QUERY}, separators=(",", ":")).encode())
            self.write("state/0/_metadata/metadata", b'v1\n{"operatorInfo":{"operatorId":0}}')
            self.write("state/0/0/_metadata/schema", b"v2\n" + b"s" * 800)

    def write(self, rel: str, data: bytes) -> None:
        self.loc.write_bytes(rel, data)
        if self.crc:  # Hadoop's local FS: a hidden checksum file next to each file
            parent, _, name = rel.rpartition("/")
            self.loc.write_bytes(f"{parent}/.{name}.crc".lstrip("/"), b"crc" + len(data).to_bytes(4, "big"))

    def delta(self, partition: int, version: int) -> bytes:
        return f"LZ4Block p{partition} v{version};".encode() * (5 + version)

    def start(self) -> int:
        """Offsets and state of the next batch, not committed yet (the query is mid-batch)."""
        n = self.next_batch
        meta = {"batchWatermarkMs": watermark(n), "batchTimestampMs": self.clock_ms + n * 1000, "conf": CONF}
        kafka = json.dumps({"events": {"0": 10 * n}}, separators=(",", ":"))
        sources = [live_offset(n), backfill_offset(n), kafka, "-"]
        self.write(f"offsets/{n}", "\n".join(["v1", json.dumps(meta, separators=(",", ":")), *sources]).encode())
        for p in range(self.partitions):
            self.write(f"state/0/{p}/{n + 1}.delta", self.delta(p, n + 1))
        self.next_batch += 1
        return n

    def commit(self, n: int) -> None:
        self.write(f"commits/{n}", f'v1\n{{"nextBatchWatermarkMs":{watermark(n + 1)}}}'.encode())

    def run(self, batches: int) -> int:
        """Run whole batches; the last batch id."""
        n = -1
        for _ in range(batches):
            n = self.start()
            self.commit(n)
        return n

    def snapshot_state(self, version: int) -> None:
        for p in range(self.partitions):
            self.write(f"state/0/{p}/{version}.snapshot", b"SNAP" * (20 + version))

    def purge_logs_below(self, batch: int) -> None:
        """What Spark does beyond minBatchesToRetain: drop old offsets and commits entries."""
        for rel in list(self.loc.list_files(hidden=True)):
            top, _, name = rel.partition("/")
            number = name.lstrip(".").removesuffix(".crc")
            if top in ("offsets", "commits") and number.isdigit() and int(number) < batch:
                self.loc.delete(rel)

    def purge_state_below(self, version: int) -> None:
        """What maintenance does after a snapshot: delete older versions' files."""
        for rel in list(self.loc.list_files(hidden=True)):
            sf = layout.state_file(rel.replace("/.", "/").removesuffix(".crc"))
            if rel.startswith("state/") and sf is not None and sf.version < version:
                self.loc.delete(rel)


def manifest(batch: int, committed_at: datetime, files: dict[str, int] | None = None) -> Manifest:
    """A manifest for the pure rules (no storage)."""
    files = files if files is not None else {f"commits/{batch}": 41}
    info = BatchInfo(batch_id=batch, committed_at=committed_at, watermark_ms=None, sources=[])
    return Manifest(
        batch_id=batch,
        query_id=QUERY,
        source="/live",
        taken_at=committed_at,
        committed_at=committed_at,
        watermark_ms=None,
        files=files,
        objects={r: f"files/{r}@{s}-0" for r, s in files.items()},
        total_bytes=sum(files.values()),
        copied_files=len(files),
        copied_bytes=sum(files.values()),
        batch=info,
    )


def content(loc: Location, rels: list[str] | None = None) -> dict[str, bytes]:
    """Every visible file's bytes (or those of ``rels``)."""
    return {rel: loc.read_bytes(rel) for rel in (rels if rels is not None else sorted(loc.list_files()))}


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Location]:
    """Locations by name, on a local directory or in a fresh bucket of a real S3 API."""
    if request.param == "local":
        return lambda name: open_location(str(tmp_path / name))
    server: MotoS3 = request.getfixturevalue("s3_server")
    bucket: str = request.getfixturevalue("s3_bucket")
    return lambda name: open_location(f"s3://{bucket}/{name}", server.options())


@pytest.fixture
def local(tmp_path: Path) -> Callable[[str], Location]:
    return lambda name: open_location(str(tmp_path / name))


# --- catalog -------------------------------------------------------------------------------------


def test_catalog_lists_committed_batches_with_decoded_offsets(store: Callable[[str], Location]) -> None:
    q = FakeQuery(store("live"))
    q.run(4)
    in_flight = q.start()  # batch 4: offsets and state written, not committed
    batches = list_batches(q.loc)
    assert [b.batch_id for b in batches] == [0, 1, 2, 3], f"batch {in_flight} is not committed"
    b = batches[3]
    assert b.watermark_ms == watermark(3) and b.next_watermark_ms == watermark(4)
    assert b.batch_timestamp_ms == T0_MS + 3000
    assert b.committed_at.tzinfo is not None and abs(b.committed_at - datetime.now(UTC)) < timedelta(minutes=5)
    live, backfill, kafka, void = b.sources
    assert (live.source, live.kind, live.snapshot_id, live.position, live.complete) == (
        "0",
        "live",
        7_000_000_000_000_000_003,
        1,
        True,
    )
    assert json.loads(live.raw or "") == LiveOffset(7_000_000_000_000_000_003, 1, True).to_dict()
    assert (backfill.kind, backfill.snapshot_id, backfill.position) == ("backfill", 42, 3)
    assert (kafka.kind, kafka.raw) == (None, '{"events":{"0":30}}')
    assert (void.raw, void.kind) == (None, None)
    # state after batch 3 is version 4; version 5 (batch 4, running) exists but is not the batch's
    assert b.state_versions == {"0": [1, 2, 3, 4]} and b.state_restorable()
    assert query_id(q.loc) == QUERY


def test_offsets_v2_names_sources_and_unknown_iceberg_versions_stay_raw() -> None:
    text = 'v2\n{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{}}\nclicks:{"a":1}\nplays:-'
    entry = layout.parse_offsets(text)
    assert entry.version == 2 and entry.sources == (("clicks", '{"a":1}'), ("plays", None))
    newer = json.dumps({"v": 99, "kind": "live", "snapshot_id": "1", "position": 0, "complete": False})
    assert decode_offset("0", newer).kind is None, "another offset version: kept raw, not misread"
    assert decode_offset("0", "not json").raw == "not json"
    with pytest.raises(ValueError, match="not an offset log"):
        layout.parse_offsets("{}")


def test_state_versions_follow_snapshots_and_purges(local: Callable[[str], Location]) -> None:
    q = FakeQuery(local("live"), crc=False)
    q.run(12)
    q.snapshot_state(10)
    q.purge_state_below(10)
    versions = layout.operator_versions(q.loc.list_files())
    assert versions == {"0": [10, 11, 12]}, "versions below the snapshot are gone"
    batches = {b.batch_id: b for b in list_batches(q.loc)}
    assert batches[10].state_restorable() and not batches[5].state_restorable()


# --- which files make batch N ----------------------------------------------------------------


def test_batch_n_excludes_what_later_batches_wrote(local: Callable[[str], Location]) -> None:
    q = FakeQuery(local("live"))
    q.run(5)
    q.start()  # batch 5 running: offsets/5, state version 6
    q.loc.write_bytes("state/0/0/.7.delta.0f3a.tmp", b"in flight")
    q.loc.write_bytes("sources/0/0", b"v1\nstart")
    q.loc.write_bytes("sources/0/9.compact", b"v1\nlater")
    q.loc.write_bytes("state/0/_metadata/v2/3", b"op metadata of batch 3")
    q.loc.write_bytes("state/0/_metadata/v2/6", b"op metadata of batch 6")
    for k in range(6):  # a Kafka sink's record of what each batch produced
        q.loc.write_bytes(f"{layout.PRODUCED}/{k}", b"{}")
    sel = layout.select_files(q.loc.list_files(), 3)
    assert sorted(sel.files) == sorted(
        ["metadata", "sources/0/0", "state/0/_metadata/metadata", "state/0/0/_metadata/schema"]
        + ["state/0/_metadata/v2/3"]
        + [f"{log}/{k}" for log in ("offsets", "commits", layout.PRODUCED) for k in range(4)]
        + [f"state/0/{p}/{v}.delta" for p in range(2) for v in range(1, 5)]
    ), "no .crc, no temp file, nothing of batches 4 and 5"
    assert {"metadata", "offsets/3", "offsets/2", "commits/3"} <= sel.required
    assert {f"state/0/{p}/{v}.delta" for p in range(2) for v in range(1, 5)} <= sel.required
    assert "offsets/0" not in sel.required, "old log entries are optional"


def test_state_chain_starts_at_the_newest_snapshot_and_a_gap_is_refused(local: Callable[[str], Location]) -> None:
    q = FakeQuery(local("live"), crc=False)
    q.run(12)
    q.snapshot_state(8)
    sel = layout.select_files(q.loc.list_files(), 11)
    chain = {r for r in sel.required if r.startswith("state/0/0/")}
    assert chain == {"state/0/0/8.snapshot"} | {f"state/0/0/{v}.delta" for v in (9, 10, 11, 12)}
    q.loc.delete("state/0/1/10.delta")
    with pytest.raises(IncompleteCheckpointError, match=r"state/0/1: state version 12 \(after batch 11\)"):
        layout.select_files(q.loc.list_files(), 11)
    with pytest.raises(IncompleteCheckpointError, match="not a committed batch"):
        layout.select_files(q.loc.list_files(), 12)


def test_loadable_versions_and_chains_are_pure() -> None:
    files: layout.StoreFiles = {
        1: {"delta": ["1.delta"]},
        2: {"delta": ["2.delta"]},
        4: {"delta": ["4.delta"]},
        5: {"snapshot": ["5.snapshot"], "delta": ["5.delta"]},
        6: {"changelog": ["6.changelog"]},
    }
    assert layout.loadable_versions(files) == {1, 2, 5, 6}
    assert layout.state_chain(files, 6) == ["5.snapshot", "6.changelog"]
    assert layout.state_chain(files, 4) is None
    assert layout.state_chain(files, 0) == []
    assert layout.state_file("state/1/3/left-keyToNumValues/7_ab-12.zip") == layout.StateFile(
        "state/1/3/left-keyToNumValues", 7, "zip"
    )


# --- externalize: incremental and consistent ------------------------------------------------


def test_second_snapshot_copies_only_new_files(store: Callable[[str], Location]) -> None:
    q, ext = FakeQuery(store("live")), store("external")
    q.run(6)
    first = externalize(q.loc, ext, now=datetime(2026, 11, 21, tzinfo=UTC))
    assert first is not None and first.batch_id == 5
    assert first.copied_files == len(first.files) and first.copied_bytes == first.total_bytes
    assert externalize(q.loc, ext) is None, "the newest batch is externalized already"

    q.run(3)
    q.start()  # a batch in flight while the second snapshot is taken
    second = externalize(q.loc, ext)
    assert second is not None and second.batch_id == 8
    new = set(second.files) - set(first.files)
    assert new == {f"{log}/{k}" for log in ("offsets", "commits") for k in (6, 7, 8)} | {
        f"state/0/{p}/{v}.delta" for p in range(2) for v in (7, 8, 9)
    }
    assert second.copied_files == len(new)
    assert second.copied_bytes == sum(second.files[r] for r in new)
    assert [m.batch_id for m in list_snapshots(ext)] == [5, 8]
    # the pool holds each file once
    assert len(ext.list_files(snapshots.POOL)) == len(set(first.objects.values()) | set(second.objects.values()))


def test_a_rewritten_file_gets_its_own_object_and_old_snapshots_keep_theirs(
    store: Callable[[str], Location], local: Callable[[str], Location]
) -> None:
    q, ext = FakeQuery(store("live"), crc=False), store("external")
    q.run(3)
    first = externalize(q.loc, ext)
    assert first is not None
    old = q.loc.read_bytes("state/0/_metadata/metadata")
    time.sleep(1.1)  # S3 modification times have whole seconds
    q.loc.write_bytes("state/0/_metadata/metadata", old.replace(b"0}", b"0,x}"))  # a query restart rewrites it
    q.run(1)
    second = externalize(q.loc, ext)
    assert second is not None
    assert first.objects["state/0/_metadata/metadata"] != second.objects["state/0/_metadata/metadata"]
    target = local("restored")
    restore(ext, first, target)
    assert target.read_bytes("state/0/_metadata/metadata") == old


def test_crash_mid_copy_leaves_previous_snapshots_restorable(
    store: Callable[[str], Location], local: Callable[[str], Location], monkeypatch: pytest.MonkeyPatch
) -> None:
    q, ext = FakeQuery(store("live")), store("external")
    q.run(4)
    first = externalize(q.loc, ext)
    assert first is not None
    expected = content(q.loc, sorted(first.files))
    q.run(4)

    copies, lock = [0], threading.Lock()
    real = Location.copy_to

    def crashing(self: Location, rel: str, dest: Location, dest_rel: str, size: int) -> int:
        with lock:
            copies[0] += 1
            if copies[0] > 5:
                raise OSError("injected: the operator pod was killed mid-copy")
        return real(self, rel, dest, dest_rel, size)

    monkeypatch.setattr(Location, "copy_to", crashing)
    with pytest.raises(OSError, match="injected"):
        externalize(q.loc, ext, parallelism=1)
    monkeypatch.undo()

    assert [m.batch_id for m in list_snapshots(ext)] == [3], "no manifest for the interrupted copy"
    target = local("restored-after-crash")
    restore(ext, list_snapshots(ext)[0], target)
    assert content(target) == expected

    second = externalize(q.loc, ext)
    assert second is not None and second.batch_id == 7
    new = set(second.files) - set(first.files)
    assert second.copied_files == len(new) - 5, "the 5 files copied before the crash are reused"
    assert [m.batch_id for m in list_snapshots(ext)] == [3, 7]


def test_a_purged_optional_file_is_dropped_a_required_one_fails(
    local: Callable[[str], Location], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's maintenance deletes old files while a copy runs: an old delta below a snapshot
    is not needed; a delta of the chain to version N+1 is."""
    q, ext = FakeQuery(local("live"), crc=False), local("external")
    q.run(6)
    q.snapshot_state(4)
    real = Location.copy_to

    def purging(victim: str) -> Callable[..., int]:
        def copy(self: Location, rel: str, dest: Location, dest_rel: str, size: int) -> int:
            if rel == victim:
                self.delete(rel)  # deleted between the listing and the copy
            return real(self, rel, dest, dest_rel, size)

        return copy

    monkeypatch.setattr(Location, "copy_to", purging("state/0/0/2.delta"))
    m = externalize(q.loc, ext)
    assert m is not None and "state/0/0/2.delta" not in m.files and "state/0/0/4.snapshot" in m.files

    q.run(1)
    monkeypatch.setattr(Location, "copy_to", purging("state/0/1/7.delta"))
    with pytest.raises(IncompleteCheckpointError, match=r"state/0/1/7\.delta changed during the copy"):
        externalize(q.loc, ext)
    assert [s.batch_id for s in list_snapshots(ext)] == [5]


def test_a_snapshot_from_another_timeline_is_refused_until_discarded(local: Callable[[str], Location]) -> None:
    ext = local("external")
    old = FakeQuery(local("live"), crc=False)
    old.run(6)
    at_3 = externalize(old.loc, ext, batch_id=3)
    assert at_3 is not None and externalize(old.loc, ext) is not None
    # rewind to batch 3: the restored query runs batches 4 and 5 again, on other data
    restored = local("restored")
    restore(ext, at_3, restored)
    assert externalize(restored, ext) is None, "batch 3 of the restored copy is the snapshot itself"
    new = FakeQuery(restored, crc=False, fresh=False, next_batch=4, clock_ms=T0_MS + 3_600_000)
    new.run(2)
    with pytest.raises(TimelineConflictError, match="batch 5 with other offsets"):
        externalize(new.loc, ext)
    assert discard_after(ext, 3) == [5]
    m = externalize(new.loc, ext)
    assert m is not None and m.batch_id == 5
    assert [s.batch_id for s in list_snapshots(ext)] == [3, 5]


# --- retention and garbage collection -----------------------------------------------------------

NOW = datetime(2026, 11, 21, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ages_h", "keep_last", "max_age_h", "removed"),
    [
        ([50, 40, 30, 20, 10], 3, None, [0, 1]),  # count
        ([50, 40, 30, 20, 10], 10, 25, [0, 1, 2]),  # age
        ([50, 40, 30, 20, 10], 4, 35, [0, 1]),  # both: either limit removes
        ([50, 40], 1, 1, [0]),  # all too old: the newest stays
        ([50], 1, 1, []),  # the only snapshot always stays
        ([50, 40, 30], 0, None, [0, 1]),  # keep_last < 1 still keeps one
        ([], 3, 1, []),
    ],
)
def test_retention_plan(ages_h: list[int], keep_last: int, max_age_h: int | None, removed: list[int]) -> None:
    snaps = [manifest(i, NOW - timedelta(hours=h)) for i, h in enumerate(ages_h)]
    max_age = None if max_age_h is None else timedelta(hours=max_age_h)
    assert snapshots.retention_plan(list(reversed(snaps)), keep_last, max_age, NOW) == removed


def test_retention_removes_manifests_then_unreferenced_files(
    store: Callable[[str], Location], local: Callable[[str], Location]
) -> None:
    q, ext = FakeQuery(store("live")), store("external")
    taken = []
    for _ in range(4):
        q.run(3)
        m = externalize(q.loc, ext)
        assert m is not None
        taken.append(m)
    q.snapshot_state(12)
    q.purge_state_below(12)  # Spark's maintenance: the oldest deltas are gone from the live checkpoint
    q.run(1)
    last = externalize(q.loc, ext)
    assert last is not None
    removed = apply_retention(ext, keep_last=2, now=datetime.now(UTC))
    assert removed == [m.batch_id for m in taken[:3]]
    assert [m.batch_id for m in list_snapshots(ext)] == [taken[3].batch_id, last.batch_id]
    referenced = set(taken[3].objects.values()) | set(last.objects.values())
    assert set(ext.list_files(snapshots.POOL)) == referenced, "garbage collected, nothing referenced lost"
    for m in list_snapshots(ext):
        restore(ext, m, local(f"r{m.batch_id}"))
    # an age limit that every snapshot exceeds still keeps the newest
    assert apply_retention(ext, keep_last=10, max_age=timedelta(seconds=1), now=datetime.now(UTC) + timedelta(hours=1))
    assert [m.batch_id for m in list_snapshots(ext)] == [last.batch_id]
    assert apply_retention(ext, keep_last=1, max_age=timedelta(0), now=datetime.now(UTC) + timedelta(days=9)) == []


def test_crash_mid_gc_leaves_only_unreferenced_files(
    local: Callable[[str], Location], monkeypatch: pytest.MonkeyPatch
) -> None:
    q, ext = FakeQuery(local("live")), local("external")
    for _ in range(3):
        q.run(2)
        externalize(q.loc, ext)
    q.snapshot_state(6)
    q.purge_state_below(6)
    q.purge_logs_below(4)
    q.run(1)
    externalize(q.loc, ext)  # the first snapshots' old files are theirs alone now
    real = Location.delete
    deletes = [0]

    def crashing(self: Location, rel: str) -> bool:
        if rel.startswith(snapshots.POOL + "/"):
            deletes[0] += 1
            if deletes[0] > 2:
                raise OSError("injected: killed during garbage collection")
        return real(self, rel)

    monkeypatch.setattr(Location, "delete", crashing)
    with pytest.raises(OSError, match="injected"):
        apply_retention(ext, keep_last=1)
    monkeypatch.undo()
    (kept,) = list_snapshots(ext)
    restore(ext, kept, local("restored"))
    assert collect_garbage(ext), "the rest of the garbage goes on the next run"
    assert set(ext.list_files(snapshots.POOL, hidden=True)) == set(kept.objects.values())


def test_gc_refuses_to_guess_around_an_unreadable_manifest(local: Callable[[str], Location]) -> None:
    q, ext = FakeQuery(local("live")), local("external")
    q.run(2)
    externalize(q.loc, ext)
    ext.write_bytes(snapshots.manifest_path(99), b"{not json")
    with pytest.raises(CheckpointError, match="cannot be read"):
        collect_garbage(ext)
    with pytest.raises(CheckpointError, match="unreadable manifest"):
        apply_retention(ext, keep_last=1)
    assert [m.batch_id for m in list_snapshots(ext)] == [1]


# --- choose and restore ----------------------------------------------------------------------


def test_choose_by_time_batch_or_newest() -> None:
    t = [NOW - timedelta(minutes=m) for m in (30, 20, 10)]
    snaps = [manifest(b, at) for b, at in zip((4, 9, 14), t, strict=True)]
    assert choose(snaps).batch_id == 14
    assert choose(snaps, time=t[1]).batch_id == 4, "strictly before the time"
    assert choose(snaps, time=t[1] + timedelta(microseconds=1)).batch_id == 9
    assert choose(snaps, batch_id=9).batch_id == 9, "at or before the batch"
    assert choose(snaps, batch_id=13).batch_id == 9
    with pytest.raises(
        NoRestorablePointError, match=r"earliest restorable point is batch 4 committed at 2026-11-21T11:30"
    ) as e:
        choose(snaps, time=t[0])
    assert isinstance(e.value, KappaError)
    with pytest.raises(NoRestorablePointError, match=r"at or before batch 3.*earliest restorable point is batch 4"):
        choose(snaps, batch_id=3)
    with pytest.raises(NoRestorablePointError, match="no restorable snapshot"):
        choose([], batch_id=3)
    with pytest.raises(ValueError, match="timezone"):
        choose(snaps, time=datetime(2026, 11, 21))


def test_restore_writes_exactly_the_snapshot_commit_last(
    store: Callable[[str], Location], local: Callable[[str], Location]
) -> None:
    q, ext = FakeQuery(store("live")), store("external")
    q.run(5)
    m = externalize(q.loc, ext)
    assert m is not None
    q.run(2)  # the query goes on
    before = content(q.loc)
    target = local("restored")
    restore(ext, m, target)
    assert content(target) == content(q.loc, sorted(m.files))
    assert content(q.loc) == before, "the live checkpoint is only read"
    assert layout.committed_batches(target.list_files()) == [0, 1, 2, 3, 4]
    assert max(layout.log_batches(target.list_files(), "offsets")) == 4, "Spark resumes at batch 5"
    assert restore_order(m)[-1] == ["commits/4"] and restore_order(m)[-2] == [
        "commits/0",
        "commits/1",
        "commits/2",
        "commits/3",
    ]


def test_restore_refuses_a_non_empty_target_and_the_live_checkpoint(local: Callable[[str], Location]) -> None:
    q, ext = FakeQuery(local("live")), local("external")
    q.run(3)
    m = externalize(q.loc, ext)
    assert m is not None
    target = local("busy")
    target.write_bytes("offsets/7", b"v1\n{}")
    with pytest.raises(
        DestinationNotEmptyError, match=r"1 file\(s\) that are not part of the snapshot of batch 2 \(e.g. offsets/7\)"
    ):
        restore(ext, m, target)
    assert target.list_files() == {"offsets/7": target.stat("offsets/7")}, "nothing written"
    with pytest.raises(CheckpointError, match="is the live checkpoint"):
        restore(ext, m, q.loc)
    with pytest.raises(DestinationNotEmptyError):
        restore(ext, m, open_location("file://" + q.loc.uri))  # the same place spelled differently: its files refuse it


def test_an_interrupted_restore_is_completed_by_running_it_again(local: Callable[[str], Location]) -> None:
    q, ext = FakeQuery(local("live"), crc=False), local("external")
    q.run(3)
    m = externalize(q.loc, ext)
    assert m is not None
    target = local("restored")
    partial = {r: FileStat(m.files[r], 0) for r in ("offsets/0", "state/0/0/1.delta")}
    assert copies_left(m, partial)[-1] == ["commits/2"]
    assert "offsets/0" not in copies_left(m, partial)[0]
    for r in partial:
        target.write_bytes(r, q.loc.read_bytes(r))
    restore(ext, m, target)
    assert content(target) == content(q.loc, sorted(m.files))


def test_restore_of_a_damaged_snapshot_fails_before_writing(local: Callable[[str], Location]) -> None:
    q, ext = FakeQuery(local("live")), local("external")
    q.run(3)
    m = externalize(q.loc, ext)
    assert m is not None
    ext.delete(m.objects["offsets/1"])
    assert list_snapshots(ext) == [], "not restorable any more"
    target = local("restored")
    with pytest.raises(SnapshotDamagedError, match="misses 1 file"):
        restore(ext, m, target)
    assert target.list_files() == {}


def test_restore_can_fork_a_new_query_id(local: Callable[[str], Location]) -> None:
    q, ext = FakeQuery(local("live")), local("external")
    q.run(2)
    m = externalize(q.loc, ext)
    assert m is not None
    target = local("fork")
    restore(ext, m, target, query_id="11111111-2222-3333-4444-555555555555")
    assert query_id(target) == "11111111-2222-3333-4444-555555555555"
    restore(ext, m, target, query_id="11111111-2222-3333-4444-555555555555")  # idempotent


# --- storage ------------------------------------------------------------------------------------


def test_s3_options_fall_back_to_the_standard_aws_environment(
    monkeypatch: pytest.MonkeyPatch, s3_server: MotoS3
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    bucket = s3_server.create_bucket()
    loc = open_location(f"s3a://{bucket}/ckpt")  # Spark's scheme for the same store
    loc.write_bytes("a/b", b"x")
    assert loc.uri == f"s3://{bucket}/ckpt" and loc.list_files() == {"a/b": loc.stat("a/b")}
    assert S3Options(endpoint="http://h:1").filesystem().type_name == "s3"
    with pytest.raises(CheckpointError, match="needs a bucket"):
        open_location("s3://")


def test_local_writes_are_atomic_and_leave_no_temp_files(local: Callable[[str], Location]) -> None:
    loc = local("x")
    loc.write_bytes("d/f", b"1")
    loc.write_bytes("d/f", b"22")
    assert loc.read_bytes("d/f") == b"22" and loc.list_files(hidden=True) == {"d/f": loc.stat("d/f")}
    assert open_location("file://" + loc.uri).read_bytes("d/f") == b"22"


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    before = {t.name for t in threading.enumerate()}
    yield
    leaked = {t.name for t in threading.enumerate()} - before
    assert not {n for n in leaked if n.startswith("kappa-copy")}, leaked
