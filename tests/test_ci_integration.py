"""Chapter 3, tiers 3 and 4: the 20-step integration run against its tolerance band,
the checkpoint round trip and artifact validation; plus the bad-input messages.
"""

import json
from pathlib import Path

import pytest
import torch

from mlinfra_lab.ci import (
    ArtifactError,
    CheckpointMismatch,
    NotDecreasingError,
    ReferenceFileError,
    ReferenceMismatch,
    assert_close_to_reference,
    assert_decreasing,
    checkpoint_roundtrip,
    train_tiny,
    validate_artifacts,
)
from mlinfra_lab.ci.artifacts import METRICS_SCHEMA

pytestmark = pytest.mark.ci

REFERENCES = Path(__file__).parent / "references" / "train_tiny.json"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(steps=20, examples=100, seed=0, out_dir=tmp_path_factory.mktemp("run"))


def test_integration_run_is_inside_its_reference_band_and_the_loss_falls(run):
    # A band, not equality: another CPU or library version may change the last bits.
    assert_close_to_reference("train_tiny.losses", run.losses, REFERENCES)
    assert_decreasing(run.losses, window=5, min_drop=0.2)


def test_checkpoint_round_trip_restores_outputs_and_optimizer_state(run):
    report = checkpoint_roundtrip(run.model, run.optimizer)
    assert report.parameters == 4 and report.optimizer_tensors == 4  # 4 momentum buffers
    assert report.max_output_diff == 0.0


def test_checkpoint_round_trip_catches_a_buffer_that_is_not_saved():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.register_buffer("scale", torch.ones(2), persistent=False)

        def forward(self, x):
            return self.lin(x) * self.scale

    model = Scaled()
    model.scale.fill_(3.0)  # training changed it, but persistent=False keeps it out of saves
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(CheckpointMismatch, match="outputs differ"):
        checkpoint_roundtrip(model, optimizer)
    # a factory that rebuilds the buffer at its initial value also exposes the loss
    model.scale.fill_(3.0)
    with pytest.raises(CheckpointMismatch, match="a parameter or buffer was not saved"):
        checkpoint_roundtrip(model, optimizer, make_model=Scaled)


def test_artifacts_match_their_schemas_and_the_manifest(run):
    report = validate_artifacts(run.out_dir)
    assert report.files == ("checkpoint.pt", "metrics.json", "manifest.json")
    assert report.manifest_entries == 2
    metrics = json.loads((run.out_dir / "metrics.json").read_text())
    assert metrics["losses"] == list(run.losses) and metrics["seeds"]["augment"] is not None


def test_schema_violation_names_file_line_and_field(run, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("checkpoint.pt", "manifest.json"):
        (bad / name).write_bytes((run.out_dir / name).read_bytes())
    metrics = json.loads((run.out_dir / "metrics.json").read_text())
    metrics["losses"][3] = "oops"
    text = json.dumps(metrics, indent=2)
    (bad / "metrics.json").write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if '"oops"' in s)
    with pytest.raises(ArtifactError) as err:
        validate_artifacts(bad, {"metrics.json": METRICS_SCHEMA})
    assert f"metrics.json:{line}: schema violation at $.losses[3]" in str(err.value)
    assert "'oops' is not of type 'number'" in str(err.value)


def test_tampered_or_missing_artifacts_are_reported(run, tmp_path):
    with pytest.raises(ArtifactError, match="manifest.json:.*does not match its recorded"):
        bad = tmp_path / "tampered"
        bad.mkdir()
        for name in ("checkpoint.pt", "metrics.json", "manifest.json"):
            (bad / name).write_bytes((run.out_dir / name).read_bytes())
        (bad / "metrics.json").write_text((bad / "metrics.json").read_text() + " ")
        validate_artifacts(bad)
    with pytest.raises(ArtifactError, match="checkpoint.pt: expected artifact is missing"):
        validate_artifacts(tmp_path)


def test_reference_miss_explains_the_band_and_the_reason(tmp_path, monkeypatch):
    monkeypatch.delenv("MLINFRA_UPDATE_REFERENCES", raising=False)  # even under --update-...
    ref = tmp_path / "ref.json"
    assert_close_to_reference("loss", 0.5, ref, atol=1e-3, rtol=0.0, update="first value")
    assert_close_to_reference("loss", 0.5009, ref)  # inside the stored band
    with pytest.raises(ReferenceMismatch) as err:
        assert_close_to_reference("loss", 0.51, ref)
    message = str(err.value)
    assert "loss = 0.51 is outside the reference band 0.5 +/- 0.001" in message
    assert f"{ref}:2" in message and "'first value'" in message and "10x the tolerance" in message


def test_update_mode_rewrites_and_records_why_and_refuses_no_reason(tmp_path, monkeypatch):
    ref = tmp_path / "ref.json"
    assert_close_to_reference("a", [1.0, 2.0], ref, update="first")
    monkeypatch.setenv("MLINFRA_UPDATE_REFERENCES", "new optimizer default")
    assert_close_to_reference("a", [1.5, 2.5], ref)
    entry = json.loads(ref.read_text())["a"]
    assert entry["value"] == [1.5, 2.5] and entry["reason"] == "new optimizer default"
    assert {"updated", "environment", "atol", "rtol"} <= set(entry)
    monkeypatch.setenv("MLINFRA_UPDATE_REFERENCES", " ")
    with pytest.raises(ValueError, match="needs a reason"):
        assert_close_to_reference("a", 1.0, ref)


def test_missing_or_malformed_reference_file_names_file_and_line(tmp_path, monkeypatch):
    monkeypatch.delenv("MLINFRA_UPDATE_REFERENCES", raising=False)
    with pytest.raises(ReferenceFileError, match=r"missing\.json: no such reference file"):
        assert_close_to_reference("x", 1.0, tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "x": {\n    "value": 1.0,,\n  }\n}\n')
    with pytest.raises(ReferenceFileError, match=rf"{bad}:3:\d+: malformed reference file"):
        assert_close_to_reference("x", 1.0, bad)
    bad.write_text('{\n  "x": {"atol": 1.0},\n  "y": {"value": "high"}\n}\n')
    with pytest.raises(ReferenceFileError, match=rf"{bad}:2: reference 'x' needs a 'value'"):
        assert_close_to_reference("x", 1.0, bad)
    with pytest.raises(ReferenceFileError, match=rf"{bad}:3: reference 'y' has a value"):
        assert_close_to_reference("y", 1.0, bad)
    with pytest.raises(ReferenceFileError, match="no reference named 'z'"):
        assert_close_to_reference("z", 1.0, bad)


def test_assert_decreasing_fails_on_flat_or_non_finite_losses():
    assert_decreasing([1.0] * 5 + [0.5] * 5, min_drop=0.4)
    with pytest.raises(NotDecreasingError, match="needed a drop of at least 10%"):
        assert_decreasing([1.0] * 10, min_drop=0.1)
    with pytest.raises(NotDecreasingError, match="not finite at step 7"):
        assert_decreasing([1.0] * 6 + [float("nan")] + [0.1] * 3)


def test_cli_train_writes_artifacts_that_ci_validate_accepts(tmp_path, capsys):
    from mlinfra_lab.cli import main

    out = tmp_path / "run"
    assert main(["train", "--steps", "12", "--seed", "2", "--out", str(out)]) == 0
    assert "final loss (step 12)" in capsys.readouterr().out
    assert main(["ci", "validate", str(out)]) == 0
    assert main(["ci", "validate", str(tmp_path)]) == 2
    assert "checkpoint.pt: expected artifact is missing" in capsys.readouterr().err
