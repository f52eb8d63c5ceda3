"""The label-free measures on constructed cases whose values are known."""

import math

import numpy as np
import pytest

from dwatt.layer_measures import (
    MEASURES,
    LayerMeasures,
    curvature,
    dataset_entropy,
    effective_rank,
    intrinsic_dimension,
    matrix_entropy,
    prompt_entropy,
)


def test_the_entropy_of_an_isotropic_gram_matrix_is_one_and_of_a_rank_one_matrix_zero():
    assert matrix_entropy(np.eye(7)) == pytest.approx(1.0)
    ones = np.ones((5, 3))
    assert matrix_entropy(ones @ ones.T) == pytest.approx(0.0, abs=1e-12)
    # two equal eigenvalues of four: log 2 / log 4
    assert matrix_entropy(np.diag([1.0, 1.0, 0.0, 0.0])) == pytest.approx(0.5)
    assert math.isnan(matrix_entropy(np.zeros((3, 3))))


def test_prompt_entropy_reads_directions_not_lengths():
    orthogonal = np.eye(4, 8) * np.array([[1.0], [50.0], [0.1], [3.0]])
    assert prompt_entropy(orthogonal) == pytest.approx(1.0)
    same_direction = np.outer([1.0, 2.0, 30.0], np.arange(1.0, 9.0))
    assert prompt_entropy(same_direction) == pytest.approx(0.0, abs=1e-9)
    assert dataset_entropy(orthogonal) == pytest.approx(1.0)


def test_curvature_is_zero_on_a_straight_line_and_a_right_angle_on_a_staircase():
    line = np.outer(np.arange(6.0), [1.0, 2.0, -1.0])
    assert curvature(line) == pytest.approx(0.0, abs=1e-6)
    staircase = np.array([[0, 0], [1, 0], [1, 1], [2, 1], [2, 2]], dtype=float)
    assert curvature(staircase) == pytest.approx(math.pi / 2)
    assert math.isnan(curvature(line[:2]))


def test_effective_rank_counts_equal_directions():
    assert effective_rank(np.eye(6)) == pytest.approx(6.0)
    assert effective_rank(np.outer(np.arange(1.0, 5.0), [1.0, -1.0, 2.0])) == pytest.approx(1.0)


@pytest.mark.parametrize("dimension", [2, 5])
def test_two_nn_finds_the_dimension_of_points_on_a_flat_subspace(dimension):
    generator = np.random.default_rng(0)
    flat = generator.uniform(size=(2000, dimension)) @ generator.normal(size=(dimension, 20))
    estimate = intrinsic_dimension(flat)
    assert estimate == pytest.approx(dimension, rel=0.15)
    assert intrinsic_dimension(flat) == estimate  # deterministic
    assert math.isnan(intrinsic_dimension(np.ones((10, 4))))  # one distinct point


def test_a_measure_picks_by_its_declared_direction_and_never_a_nan():
    values = {1: 0.5, 2: math.nan, 3: 0.9, 4: 0.1}
    assert MEASURES["effective_rank"].pick(values) == 3
    assert MEASURES["prompt_entropy"].pick(values) == 4
    assert MEASURES["curvature"].pick({1: 0.2, 2: 0.2}) == 1  # a tie: the shallower
    assert MEASURES["curvature"].pick({1: math.nan}) is None
    assert MEASURES["prompt_entropy"].oriented(0.3) == -0.3


def test_layer_measures_gathers_texts_one_at_a_time():
    generator = np.random.default_rng(1)
    texts = [generator.normal(size=(n, 16)) for n in (5, 9, 1, 7)]
    measures = LayerMeasures()
    for tokens in texts:
        measures.add(tokens)
    values = measures.values()
    assert set(values) == set(MEASURES)
    pooled = np.stack([tokens.mean(axis=0) for tokens in texts])
    assert values["dataset_entropy"] == pytest.approx(dataset_entropy(pooled))
    assert values["effective_rank"] == pytest.approx(effective_rank(pooled))
    # the one-token text has no prompt entropy or curvature; the mean is over the others
    assert values["prompt_entropy"] == pytest.approx(np.mean([prompt_entropy(t) for t in texts if len(t) > 1]))
    assert values["curvature"] == pytest.approx(np.mean([curvature(t) for t in texts if len(t) > 2]))
