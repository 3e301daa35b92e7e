from __future__ import annotations

import json
from pathlib import Path

import pytest

from rps_harness.cli import main
from rps_harness.sim.run import cost_profile_records
from rps_serve.cost.runtime import OnnxCostModel, trained_profile_name
from rps_serve.profiles.records import ProfileRecord, read_records, write_records
from rps_serve.requests import Modality


def test_train_from_reference_writes_repository_and_report(tmp_path: Path) -> None:
    assert (
        main(
            ["train", "--reference", "llava-onevision-qwen2-7b", "--out", str(tmp_path), "--per-kind", "100"]
        )
        == 0
    )
    report = json.loads((tmp_path / "cost_model_report.json").read_text())
    assert set(report["estimator"]["mae_s"]) == {m.value for m in Modality}
    classes = report["classifier"]["classes"]
    assert [c["name"] for c in classes] == ["sand", "pebbles", "rocks"]
    assert sum(c["count"] for c in classes) == report["records"] == 400
    assert OnnxCostModel.from_repository(tmp_path).num_classes == 3


def test_train_from_profile_data(tmp_path: Path, reference_records: list[ProfileRecord]) -> None:
    profile = tmp_path / "profile.jsonl"
    write_records(profile, reference_records)
    assert list(read_records(profile)) == reference_records
    out = tmp_path / "repo"
    assert main(["train", "--profile-data", str(profile), "--out", str(out), "--classes", "4"]) == 0
    report = json.loads((out / "cost_model_report.json").read_text())
    assert report["records"] == len(reference_records)
    assert len(report["classifier"]["classes"]) == 4
    assert trained_profile_name(out) == "profile.jsonl"
    # The simulator of a measured stack classes as the server does: on the same records, same classes.
    assert cost_profile_records(str(profile), seed=0) == reference_records


def test_a_reference_trained_repository_names_no_profile(tmp_path: Path) -> None:
    assert (
        main(["train", "--reference", "llava-onevision-qwen2-7b", "--out", str(tmp_path), "--per-kind", "20"])
        == 0
    )
    assert trained_profile_name(tmp_path) is None


def test_broken_profile_data_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "profile.jsonl"
    profile.write_text('{"modality": "text"}\n')
    assert main(["train", "--profile-data", str(profile), "--out", str(tmp_path / "repo")]) == 2
    assert "profile.jsonl:1: not a profile record" in capsys.readouterr().err


def test_classify_prints_class_per_request(
    trained_repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["classify", "--repository", str(trained_repository), "text:50", "video:6300:6272"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert rows[0].split()[-1] == "sand" and rows[1].split()[-1] == "rocks"


def test_classify_rejects_malformed_request(trained_repository: Path) -> None:
    with pytest.raises(SystemExit):
        main(["classify", "--repository", str(trained_repository), "image:10:20"])


@pytest.mark.slow
def test_the_aging_clock_is_the_served_models_speed_against_the_reference(
    tmp_path: Path, reference_records: list[ProfileRecord]
) -> None:
    """A profile of the reference runs on about the paper's clock (a little faster: its image and
    video lines are 90th percentiles, which most requests beat); the same requests three times
    slower on a clock three times slower, and the scheduler reads it from the repository."""
    from dataclasses import replace

    from rps_serve.cost.runtime import aging_time_scale

    scales = {}
    for name, factor in (("reference", 1.0), ("slower", 3.0)):
        profile, out = tmp_path / f"{name}.jsonl", tmp_path / name
        slowed = [
            replace(r, encoder_s=factor * r.encoder_s, prefill_s=factor * r.prefill_s)
            for r in reference_records
        ]
        write_records(profile, slowed)
        assert main(["train", "--profile-data", str(profile), "--out", str(out)]) == 0
        scales[name] = aging_time_scale(out)
        assert json.loads((out / "cost_model_report.json").read_text())["aging_time_scale"] == scales[name]
    assert 0.7 < scales["reference"] <= 1.0
    assert scales["slower"] == pytest.approx(3.0 * scales["reference"], rel=0.05)
    assert aging_time_scale(tmp_path / "no-repository") == 1.0
