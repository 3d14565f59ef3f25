"""Chapter 3: the legitimate spread of the tiny run, the band derived from it, and the
injected regressions that band must catch.

The band is derived from the float64 run alone (the float32 run's own rounding error) and
then checked against variants it was *not* derived from: another thread count and the
deterministic flags off must pass, every injected bug must fail.
"""

import json
import math
from pathlib import Path

import pytest

from mlinfra_lab.ci import (
    REGRESSIONS,
    ReferenceMismatch,
    SpreadReport,
    TrainConfig,
    Variant,
    VariantError,
    assert_close_to_reference,
    derive_band,
    measure_spread,
    run_variant,
    train_tiny,
)

pytestmark = pytest.mark.ci

K = 10  # the chapter's headroom factor

COMMITTED = Path(__file__).parent / "references" / "train_tiny.json"
HELD_OUT = (Variant("2 threads", threads=2), Variant("deterministic off", deterministic=False))


@pytest.fixture(scope="module")
def band_and_reference(tmp_path_factory):
    report = measure_spread(variants=[Variant("float64 arithmetic", dtype="float64")])
    band = derive_band(report, k=K)
    reference = tmp_path_factory.mktemp("ref") / "train_tiny.json"
    assert_close_to_reference(
        "losses", report.baseline, reference, atol=band.atol, rtol=band.rtol, update="baseline"
    )
    return report, band, reference


def test_float64_exposes_a_nonzero_rounding_error_and_the_band_is_k_times_it(
    band_and_reference,
):
    report, band, _ = band_and_reference
    worst = report.max_deviation("float64 arithmetic")
    assert 0.0 < worst < 1e-4  # a rounding error: not zero, far below any real change
    assert band.atol == pytest.approx(K * worst) and band.rtol == 0.0


@pytest.mark.parametrize("variant", HELD_OUT, ids=lambda v: v.name)
def test_legitimate_variation_passes_the_band(band_and_reference, monkeypatch, variant):
    monkeypatch.delenv("MLINFRA_UPDATE_REFERENCES", raising=False)
    _, _, reference = band_and_reference
    assert_close_to_reference("losses", run_variant(TrainConfig(), variant), reference)


@pytest.mark.parametrize("bug", sorted(REGRESSIONS))
def test_injected_regression_fails_the_band(band_and_reference, monkeypatch, bug):
    monkeypatch.delenv("MLINFRA_UPDATE_REFERENCES", raising=False)
    _, _, reference = band_and_reference
    losses = run_variant(TrainConfig(regression=bug), Variant("baseline"))
    with pytest.raises(ReferenceMismatch, match="outside the reference band"):
        assert_close_to_reference("losses", losses, reference)


def test_a_variant_in_a_fresh_process_carries_its_environment():
    # ATEN_CPU_CAPABILITY is read at torch's import: only a fresh process can change it.
    config = TrainConfig(steps=3)
    report = measure_spread(config, [Variant("no SIMD", env={"ATEN_CPU_CAPABILITY": "default"})])
    assert len(report.losses["no SIMD"]) == 3
    assert report.max_relative_deviation() < 1e-5  # another vector width, same training


def test_zero_spread_gives_no_band_and_bad_variants_are_refused():
    same = SpreadReport(baseline=(1.0, 0.5), losses={"a": (1.0, 0.5)})
    assert same.max_deviation() == 0.0
    with pytest.raises(VariantError, match="bit for bit"):
        derive_band(same)
    with pytest.raises(ValueError, match="k is a headroom factor"):
        derive_band(SpreadReport((1.0,), {"a": (1.1,)}), k=0.5)
    assert derive_band(SpreadReport((1.0,), {"a": (1.25,)}), k=4).atol == 1.0
    with pytest.raises(VariantError, match="threads must be >= 1"):
        run_variant(TrainConfig(steps=1), Variant("none", threads=0))
    with pytest.raises(VariantError, match="unique"):
        measure_spread(TrainConfig(steps=1), [Variant("baseline")])


def test_train_config_rejects_unknown_regressions_and_dtypes():
    with pytest.raises(ValueError, match="unknown regression 'typo'; known: loss-sum"):
        TrainConfig(regression="typo")
    with pytest.raises(ValueError, match="dtype must be"):
        TrainConfig(dtype="float16")
    assert math.isfinite(run_variant(TrainConfig(steps=2, dtype="float64"), Variant("b"))[-1])


def test_the_committed_reference_band_has_headroom_over_this_machines_spread():
    # Runs wherever the suite runs: a new runner with a wider spread fails here, by name,
    # instead of failing the integration run's band without saying why.
    report = measure_spread(variants=HELD_OUT + (Variant("float64", dtype="float64"),))
    entry = json.loads(COMMITTED.read_text())["train_tiny.losses"]
    assert entry["rtol"] == 0.0
    assert entry["atol"] >= K * report.max_deviation(), (
        f"{COMMITTED}: atol {entry['atol']:g} is less than {K}x this machine's legitimate "
        f"spread {report.max_deviation():.3g}: re-derive the band (chapter 3) on this runner"
    )


@pytest.mark.parametrize("bug", sorted(REGRESSIONS))
def test_the_committed_reference_band_stops_every_injected_regression(monkeypatch, bug):
    monkeypatch.delenv("MLINFRA_UPDATE_REFERENCES", raising=False)
    losses = train_tiny(config=TrainConfig(regression=bug)).losses
    with pytest.raises(ReferenceMismatch, match="outside the reference band"):
        assert_close_to_reference("train_tiny.losses", losses, COMMITTED)
