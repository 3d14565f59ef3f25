"""Tier-1 unit tests of train_tiny's parts, the ones chapter 3 shows: the loss on known
inputs, the preprocessing, the model's output shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlinfra_lab.ci import (
    Augment,
    TrainConfig,
    build_tiny_model,
    make_dataset,
    regression_loss,
    seed_everything,
)

pytestmark = pytest.mark.ci


def test_loss_is_the_mean_squared_error_on_known_inputs():
    pred, target = torch.tensor([[1.0], [3.0]]), torch.tensor([[0.0], [1.0]])
    assert regression_loss(pred, target).item() == pytest.approx((1 + 4) / 2)  # mean, not sum
    assert regression_loss(target, target).item() == 0.0


def test_augmentation_keeps_shape_dtype_and_follows_its_seed():
    x = np.ones((40, 8), dtype=np.float32)
    a, b = Augment(seed=7, jitter=0.1)(x), Augment(seed=7, jitter=0.1)(x)
    assert a.shape == x.shape and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, Augment(seed=8, jitter=0.1)(x))
    assert np.std(a - x) == pytest.approx(0.1, rel=0.2)
    np.testing.assert_array_equal(Augment(seed=7, jitter=0.0)(x), x)


def test_dataset_and_model_shapes():
    seed_everything(0)
    x, y = make_dataset(examples=30, features=8)
    assert (x.shape, y.shape, x.dtype, y.dtype) == ((30, 8), (30, 1), np.float32, np.float32)
    model = build_tiny_model(TrainConfig(hidden=16))
    assert model(torch.from_numpy(x[:10])).shape == (10, 1)
    assert model[0].out_features == 16
