"""Length/format bias correction (``rlkit/debias.py``): the fit, the correction, its state, its config, a run."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.config import check_config, compose_config
from rlkit.core.errors import ConfigError
from rlkit.core.rubric import load_rubric
from rlkit.core.types import Rollout
from rlkit.reward.debias import (
    FEATURES,
    LengthFormatDebias,
    completion_features,
    default_dimensions,
    threshold_dimensions,
)

REPO = Path(__file__).resolve().parents[2]
RUBRIC = REPO / "conf" / "rubric_files" / "arithmetic.yaml"


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


def _synthetic_batch(gen: torch.Generator, b: int = 16, g: int = 16, slope: float = 0.04,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A judge whose score is true quality plus ``slope`` points per token; two unrelated features.

    Returns scores ``[B, G, 2]`` (dimension 0 biased on a 0–20 scale, dimension 1 unbiased 0–1),
    features ``[B, G, 3]`` (length, newlines, markdown) and the quality ``[B, G]``.
    """
    length = torch.randint(5, 200, (b, g), generator=gen).double()
    newlines = torch.randint(0, 6, (b, g), generator=gen).double()
    markdown = torch.randint(0, 4, (b, g), generator=gen).double()
    quality = 5 + 6 * torch.rand(b, g, generator=gen, dtype=torch.float64)
    biased = quality + slope * length                   # stays inside [5, 19] ⊂ [0, 20]: nothing clamps
    unbiased = torch.rand(b, g, generator=gen, dtype=torch.float64)
    scores = torch.stack([biased, unbiased], dim=-1).float()
    return scores, torch.stack([length, newlines, markdown], dim=-1), quality


def _debias(**kwargs) -> LengthFormatDebias:
    options = {"window": 1024, "min_samples": 64, "ridge": 1e-3, **kwargs}
    return LengthFormatDebias(["length", "newlines", "markdown"], [0, 1], [0.0, 0.0], [20.0, 1.0], **options)


def test_recovers_the_length_slope_and_removes_the_correlation():
    gen = torch.Generator().manual_seed(0)
    debias = _debias()
    for _ in range(4):
        scores, features, quality = _synthetic_batch(gen)
        out = debias.correct(scores, features)
    length_sd = float(debias._x[:, 0].std(unbiased=False))
    # β is in score points per standard deviation of the feature: slope × σ(length)
    assert debias.coefficients[0, 0].item() == pytest.approx(0.04 * length_sd, rel=0.05)
    assert abs(debias.coefficients[0, 1].item()) < 0.1 and abs(debias.coefficients[0, 2].item()) < 0.1
    assert debias.r2[0].item() > 0.5
    assert abs(debias.coefficients[1, 0].item()) < 0.05 and debias.r2[1].item() < 0.05  # nothing to remove
    length = features[..., 0].reshape(-1)
    assert _corr(scores[..., 0].reshape(-1), length) > 0.6
    assert abs(_corr(out[..., 0].reshape(-1), length)) < 0.1
    assert _corr(out[..., 0].reshape(-1), quality.reshape(-1)) > 0.97
    # centred on the batch: each dimension keeps its batch mean (nothing was clamped here)
    assert out.mean(dim=(0, 1)).tolist() == pytest.approx(scores.mean(dim=(0, 1)).tolist(), abs=1e-4)
    metrics = debias.metrics(["quality", "other"])
    assert metrics["debias/quality/length"] == pytest.approx(debias.coefficients[0, 0].item())
    assert set(metrics) == {"debias/window", *(f"debias/{d}/{f}" for d in ("quality", "other")
                                               for f in ("length", "newlines", "markdown", "r2"))}


def test_too_few_samples_leaves_scores_unchanged():
    gen = torch.Generator().manual_seed(1)
    debias = _debias(min_samples=300)
    scores, features, _ = _synthetic_batch(gen)  # 256 rows
    assert torch.equal(debias.correct(scores, features), scores)
    assert not debias.fitted.any() and debias.coefficients.abs().sum() == 0
    assert debias.metrics(["quality", "other"])["debias/quality/length"] == 0.0
    scores, features, _ = _synthetic_batch(gen)  # 512 rows now: fitted
    assert not torch.equal(debias.correct(scores, features), scores) and debias.fitted.all()


def test_nan_stays_nan_and_is_left_out_of_the_fit():
    gen = torch.Generator().manual_seed(2)
    scores, features, _ = _synthetic_batch(gen)
    holed = scores.clone()
    holed[::2, :, 0] = float("nan")  # half the prompts unscored on dimension 0
    with_nan, without = _debias(min_samples=16), _debias(min_samples=16)
    out = with_nan.correct(holed, features)
    assert torch.isnan(out[::2, :, 0]).all() and not torch.isnan(out[1::2]).any()
    without.correct(scores[1::2], features[1::2])
    assert torch.allclose(with_nan.coefficients[0], without.coefficients[0], atol=1e-9)
    assert torch.allclose(out[1::2, :, 0], without.correct(scores[1::2], features[1::2], update=False)[..., 0])
    # a dimension with too few scored rows is not corrected, the others are
    sparse = scores.clone()
    sparse[:, :, 1] = float("nan")
    sparse[0, 0, 1] = 0.5
    fresh = _debias(min_samples=16)
    out = fresh.correct(sparse, features)
    assert fresh.fitted.tolist() == [True, False] and out[0, 0, 1] == 0.5


def test_corrected_scores_are_clamped_to_the_range():
    gen = torch.Generator().manual_seed(3)
    debias = _debias(min_samples=16)
    scores, features, _ = _synthetic_batch(gen)
    scores[..., 1] = (features[..., 0] > 100).float()  # a binary judgement that is pure length
    out = debias.correct(scores, features)
    assert out[..., 1].min() >= 0 and out[..., 1].max() <= 1
    assert ((out[..., 1] > 0) & (out[..., 1] < 1)).any(), "binary scores become fractional"
    assert out[..., 0].min() >= 0 and out[..., 0].max() <= 20


def test_state_dict_round_trip_continues_identically(tmp_path):
    gen = torch.Generator().manual_seed(4)
    batches = [_synthetic_batch(gen, b=8, g=8) for _ in range(6)]
    a = _debias(window=200, min_samples=64)
    for scores, features, _ in batches[:3]:
        a.correct(scores, features)
    torch.save({"debias": a.state_dict()}, tmp_path / "state.pt")
    b = _debias(window=200, min_samples=64)
    b.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True)["debias"])
    for scores, features, _ in batches[3:]:
        assert torch.equal(a.correct(scores, features), b.correct(scores, features))
    assert torch.equal(a.coefficients, b.coefficients) and torch.equal(a.r2, b.r2)
    assert a.window_rows == b.window_rows == 200  # 6 × 64 rows, the last 200 kept
    with pytest.raises(ValueError, match="features"):
        LengthFormatDebias(["length"], [0], [0.0, 0.0], [20.0, 1.0]).load_state_dict(a.state_dict())


def test_window_keeps_the_latest_rows_and_evaluation_does_not_feed_it():
    gen = torch.Generator().manual_seed(5)
    debias = _debias(window=100, min_samples=16)
    scores, features, _ = _synthetic_batch(gen, b=8, g=8)
    debias.correct(scores, features)
    debias.correct(scores, features)
    assert debias.window_rows == 100
    assert torch.equal(debias._x[-64:], features.reshape(-1, 3))
    before = debias.state_dict()
    debias.correct(scores[:2], features[:2], update=False)
    assert all(torch.equal(before[k], v) for k, v in debias.state_dict().items())


def test_features_from_text_and_token_counts():
    text = "# Answer\n\n- **seven** is 7\n- 2. also\n1) first\n```\ncode\n```"
    rollout = Rollout(records=[{"prompt": "p"}], completions=[[text, "7"]])
    names = list(FEATURES)
    x = completion_features(rollout, names)[0]
    by_name = dict(zip(names, x[0].tolist(), strict=True))
    assert by_name["length"] == len(text) and by_name["newlines"] == text.count("\n")
    assert by_name["markdown"] == 7  # heading, two bullets, a numbered line, two fences, one bold span
    assert x[1].tolist() == [1.0, 0.0, 0.0, 1.0]
    counted = Rollout(records=[{"prompt": "p"}], completions=[[text, "7"]],
                      completion_token_counts=torch.tensor([[30, 2]]))
    assert completion_features(counted, ["length"])[0, :, 0].tolist() == [30.0, 2.0]


def test_default_dimensions_skip_gates_and_condition_targets():
    rubric = load_rubric(RUBRIC)
    assert threshold_dimensions(rubric) == ["format"]  # format is a gate
    assert default_dimensions(rubric) == ["correctness", "brevity", "repetition"]
    debias = LengthFormatDebias.for_rubric(rubric)
    assert debias.dimensions == [1, 2, 3] and debias.high.tolist() == [1.0, 1.0, 5.0, 5.0]


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("override", "where", "message"), [
    ("debias.features=[length,wordiness]", "debias.features",
     "unknown feature 'wordiness'; available: length, newlines, markdown, digits_share"),
    ("debias.dimensions=[correctness,clarity]", "debias.dimensions",
     "unknown dimension 'clarity'; rubric arithmetic has format, correctness, brevity, repetition"),
    ("debias.dimensions=[format]", "debias.dimensions", "'format' is a gate"),
    ("debias.min_samples=600", "debias.min_samples", "exceeds debias.window=512"),
    ("debias.features=[]", "debias.features", "name at least one feature"),
    ("debias.window=0", "debias.window", "must be >= 1, got 0"),
])
def test_bad_debias_config_names_the_field(registry, override, where, message):
    cfg = compose_config(registry, [override])
    with pytest.raises(ConfigError) as info:
        check_config(cfg, registry)
    assert str(info.value).startswith(where) and message in str(info.value)


def test_debias_config_defaults_and_enabled(registry):
    validated = check_config(compose_config(registry, []), registry)
    assert validated.debias is not None and not validated.debias.enabled
    assert validated.debias.features == ["length", "newlines", "markdown"] and validated.debias.dimensions is None
    on = check_config(compose_config(registry, ["debias.enabled=true", "debias.dimensions=[repetition]"]),
                      registry)
    assert on.debias.enabled and on.debias.dimensions == ["repetition"]


# --- end to end --------------------------------------------------------------------------------


def _fit_rows(run_dir: Path, *extra: str) -> list[dict[str, str]]:
    args = ["fit", "logger=csv", "checkpoint_every=2", "batch_size=4", "num_generations=4", "debias.enabled=true",
            "debias.dimensions=[correctness,repetition]", "debias.window=32", "debias.min_samples=16",
            f"hydra.run.dir={run_dir}", *extra]
    assert main(args) == 0
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    return [row for row in csv.DictReader(path.read_text().splitlines()) if row.get("reward/mean")]


@pytest.mark.slow
def test_fit_with_debias_logs_coefficients_and_resumes_exactly(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    rows = _fit_rows(tmp_path / "straight", "trainer.max_steps=4")
    assert len(rows) == 4
    keys = [f"debias/{d}/{f}" for d in ("correctness", "repetition") for f in ("length", "newlines", "markdown", "r2")]
    for row in rows:
        for key in keys:
            assert key in row and math.isfinite(float(row[key])), key
        assert 0.0 <= float(row["debias/repetition/r2"]) <= 1.0
    assert [float(r["debias/window"]) for r in rows] == [16.0, 32.0, 32.0, 32.0]
    assert not any(k.startswith(("debias/format/", "debias/brevity/")) for k in rows[0])
    ckpt = tmp_path / "straight" / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=True)["rlkit"]["debias"]
    assert state["features"].shape == (32, 3) and state["scores"].shape == (32, 4)

    # stopped after step 2 and resumed: steps 3 and 4 see the same window, so log the same fit
    _fit_rows(tmp_path / "first_half", "trainer.max_steps=2")
    resumed = _fit_rows(tmp_path / "resumed", "trainer.max_steps=4",
                        f"ckpt_path={tmp_path / 'first_half' / 'checkpoints' / 'last.ckpt'}")
    assert [r["step"] for r in resumed] == ["2", "3"]
    for got, want in zip(resumed, rows[2:], strict=True):
        assert {k: got[k] for k in [*keys, "reward/mean"]} == {k: want[k] for k in [*keys, "reward/mean"]}
