"""Issue 30 item 6, a newcomer's first hour, each step as typed from the repository root: the
examples' data made by one command, errors in a line or two with the fix (``-v`` for the
trace), a driver-only plan that says "unknown" instead of a wrong look-back, and a demo that
never deletes a directory it did not make."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from kappa_operator.cli.commands import main
from kappa_operator.cli.errors import explain
from kappa_operator.demo.story import MARKER, out_refusal, prepare_out
from spark_app.contract.errors import ConfigError

ROOT = Path(__file__).resolve().parents[4]
BACKFILL = str(ROOT / "examples" / "rmi-backfill.yaml")
JOB = str(ROOT / "examples" / "rmi-streamingjob.yaml")


@pytest.mark.parametrize("flags", [["--no-spark"], []], ids=["no-spark", "with-spark"])
def test_plan_of_the_example_without_local_catalogs_is_two_lines_naming_the_fix(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """With Spark too (the obvious first try): the catalog is found unreachable before Spark
    starts, not blamed on the pipeline half a minute later."""
    assert main(["plan", BACKFILL, *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("error: cannot reach http://iceberg-rest.data.svc:8181")
    assert "--local DIR" in err[1] and "kappa example-data DIR" in err[1]
    assert "Traceback" not in "\n".join(err)


def test_dash_v_prints_the_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", BACKFILL, "--no-spark", "-v"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_example_data_then_a_driver_only_plan_with_an_unknown_look_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local = tmp_path / "local"
    assert main(["example-data", str(local), "--job", JOB, "--hours", "7"]) == 0
    out = capsys.readouterr().out
    assert "ingest.impressions" in out and "kappa plan examples/rmi-backfill.yaml --local" in out
    assert main(["plan", BACKFILL, "--local", str(local), "--no-spark", "--json"]) == 0
    report = capsys.readouterr().out
    assert '"recommended_warmup_s": null' in report, "rmi looks back 30m: never 0 without the query plan"
    assert '"horizon": "unknown: the pipeline declares no state_horizon()' in report
    # written once: a second run would double every row
    assert main(["example-data", str(local), "--job", JOB, "--hours", "7"]) == 1
    err = capsys.readouterr().err
    assert "ingest.impressions already exists" in err and "Use another DIR" in err


def test_the_demo_never_deletes_a_directory_it_did_not_make(tmp_path: Path) -> None:
    mine = tmp_path / "precious"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    refusal = out_refusal(mine)
    assert refusal is not None and "not a previous demo's output" in refusal
    assert main(["demo", "--out", str(mine)]) == 2
    assert (mine / "thesis.tex").read_text() == "years of work" and len(list(mine.iterdir())) == 1
    assert out_refusal(tmp_path / "new") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert out_refusal(empty) is None
    prepare_out(empty)
    (empty / "catalog.db").write_text("a previous demo's")
    assert out_refusal(empty) is None, "a previous demo's output is recreated"
    prepare_out(empty)
    assert [p.name for p in empty.iterdir()] == [MARKER]
    file = tmp_path / "file"
    file.write_text("x")
    assert "is a file" in (out_refusal(file) or "")


class _Model(BaseModel):
    max_drift: int


def test_explain_names_what_to_change() -> None:
    with pytest.raises(ValidationError) as caught:
        _Model.model_validate({"max_drift": "five"})
    assert explain(caught.value).lines()[0].startswith("error: max_drift: Input should be a valid integer")
    assert explain(FileNotFoundError(2, "No such file", "x.yaml")).lines() == ["error: no such file: x.yaml"]
    assert explain(ConfigError("window.start: after window.end; swap them")).lines() == [
        "error: window.start: after window.end; swap them"
    ]
    missing = explain(ModuleNotFoundError("No module named 'pyspark'", name="pyspark")).lines()
    assert "pyspark is not installed" in missing[0] and "pip install -e '.[spark]'" in missing[1]
    other = explain(RuntimeError("boom\nsecond line")).lines()
    assert other == ["error: RuntimeError: boom", "run again with -v for the trace"]
    # pyarrow's S3 client, unable to reach the bucket of a manifest's checkpoints
    s3 = OSError(
        "When listing objects under key 'kappa-snapshots/rmi/' in bucket 'lake': AWS Error NETWORK_CONNECTION "
        "during ListObjectsV2 operation: curlCode: 6, Could not resolve hostname; Details: Could not resolve "
        "host: lake.s3.us-east-1.amazonaws.com"
    )
    cause, fix = explain(s3).lines()
    assert cause == "error: cannot reach bucket 'lake' at lake.s3.us-east-1.amazonaws.com"
    assert "AWS_ENDPOINT_URL" in fix and "--local DIR" in fix
    assert explain(OSError("disk full")).lines()[0] == "error: OSError: disk full"


@pytest.mark.parametrize(
    "argv",
    [["run", JOB], ["run", BACKFILL], ["rewind", str(ROOT / "examples" / "rmi-rewind.yaml"), "--job", JOB]],
    ids=["run-job", "run-backfill", "rewind"],
)
def test_the_examples_without_local_say_what_they_cannot_reach_before_spark_starts(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cluster's catalog and bucket, unreachable here: two lines with the fix, at once (a
    run opens the tables it reads before it starts Spark or records anything: a second try
    with --local is not refused as a failed Backfill)."""
    state = ["--state", str(tmp_path / "state")] if argv[0] == "run" else []
    assert main([*argv, *state]) in (1, 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("error: cannot reach "), err
    assert "--local DIR" in err[1]
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.json"))


def test_a_bad_duration_says_what_a_duration_looks_like(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "examples" / "rmi-backfill.yaml").read_text().replace("maxDrift: 10m", "maxDrift: 5 minutes")
    (tmp_path / "bf.yaml").write_text(text)
    (tmp_path / "job.yaml").write_text(Path(JOB).read_text())
    assert main(["plan", str(tmp_path / "bf.yaml"), "--no-spark"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "spec.alignment.maxDrift: expected a duration such as 90s, 10m, 1h30m (units ms, s, m, h)" in out
    assert "[0-9]" not in out, "never the regular expression"


def test_a_piped_command_prints_tables_wider_than_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44, item 6: `kappa plan ... | less` cut the plan's table at 80 columns."""
    from kappa_operator.cli.commands import PIPED_WIDTH, out_console

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert out_console().width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "100")
    assert out_console().width == 100
