"""Simplex samplers and keyed streams (vpo.weights)."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from vpo.weights import (counter_uniforms, encode_key, keyed_rng, keyed_simplex, sample_simplex, stream_key,
                         stream_keys)


def test_keyed_rng_is_deterministic_and_key_sensitive():
    a = keyed_rng(0, "prompt", 3).random(5)
    assert np.array_equal(a, keyed_rng(0, "prompt", 3).random(5))
    assert not np.array_equal(a, keyed_rng(0, "prompt", 4).random(5))
    assert not np.array_equal(a, keyed_rng(1, "prompt", 3).random(5))


def test_keyed_rng_same_stream_in_a_subprocess():
    code = "from vpo.weights import keyed_rng; print(repr(keyed_rng(7, 'g', (1, 2.5), b'x').random(3).tolist()))"
    # a different hash seed proves Python's salted hash() plays no part
    env = {"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == repr(keyed_rng(7, "g", (1, 2.5), b"x").random(3).tolist())


def test_encode_key_types_are_distinct_and_numpy_scalars_match_python():
    keys = [encode_key(1), encode_key(1.0), encode_key("1"), encode_key(b"1"), encode_key(True), encode_key((1,))]
    assert len(set(keys)) == len(keys)
    assert encode_key(np.int64(3)) == encode_key(3)
    assert encode_key(np.float32(0.5)) == encode_key(0.5)
    assert encode_key(np.str_("a")) == encode_key("a")
    assert encode_key("a", "bc") != encode_key("ab", "c")  # length prefixes
    assert stream_key(0, "a", 1) == stream_key(0, "a", 1) < 2**64


@pytest.mark.parametrize("bad", [[1, 2], None, {"a": 1}, np.zeros(2), object()])
def test_encode_key_rejects_other_types(bad):
    with pytest.raises(ValueError, match="key part"):
        keyed_rng(0, bad)


@pytest.mark.parametrize("method", ["iid", "sobol"])
@pytest.mark.parametrize("alpha", [1.0, 0.5, 3.0])
def test_sample_simplex_rows_on_simplex(method, alpha):
    w = sample_simplex(64, 5, alpha=alpha, method=method, rng=np.random.default_rng(0))
    assert w.shape == (64, 5) and w.dtype == np.float64
    assert np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)


def test_sample_simplex_dim_one_is_all_ones():
    assert np.array_equal(sample_simplex(3, 1, rng=np.random.default_rng(0)), np.ones((3, 1)))


@pytest.mark.parametrize("kwargs, match", [
    ({"num": 0, "dim": 3}, "num"), ({"num": -2, "dim": 3}, "num"), ({"num": 4, "dim": 0}, "dim"),
    ({"num": 4, "dim": 3, "alpha": 0.0}, "alpha"), ({"num": 4, "dim": 3, "alpha": -1.0}, "alpha"),
    ({"num": 4, "dim": 3, "method": "halton"}, "method"), ({"num": 2.5, "dim": 3}, "num"),
])
def test_sample_simplex_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sample_simplex(rng=np.random.default_rng(0), **kwargs)


def test_iid_stream_is_the_concatenation_of_block_draws():
    one = sample_simplex(10, 4, rng=np.random.default_rng(5))
    rng = np.random.default_rng(5)
    two = np.concatenate([sample_simplex(4, 4, rng=rng), sample_simplex(6, 4, rng=rng)])
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("alpha, dim", [(1.0, 4), (0.5, 3), (2.0, 5)])
@pytest.mark.parametrize("method", ["iid", "sobol"])
def test_marginals_match_beta(alpha, dim, method):
    w = sample_simplex(4096, dim, alpha=alpha, method=method, rng=np.random.default_rng(1))
    for d in range(dim):
        p = stats.kstest(w[:, d], stats.beta(alpha, (dim - 1) * alpha).cdf).pvalue
        assert p > 1e-3, (d, p)


def test_keyed_simplex_marginals_match_beta():
    w = keyed_simplex(stream_keys(range(40), seed=3), 100, 4).reshape(-1, 4)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    for d in range(4):
        assert stats.kstest(w[:, d], stats.beta(1.0, 3.0).cdf).pvalue > 1e-3


def test_counter_uniforms_strictly_inside_and_uniform():
    u = counter_uniforms(np.array([1, 2**63 + 5], dtype=np.uint64), 50_000)
    assert u.dtype == np.float32 and u.min() > 0 and u.max() < 1
    assert stats.kstest(u[1].astype(np.float64), "uniform").pvalue > 1e-3
    # 23-bit levels: only birthday collisions, about n**2 / 2**24 = 149 of them
    assert 50_000 - np.unique(u[0]).size < 300


@given(st.lists(st.integers(0, 10**6), min_size=2, max_size=6, unique=True), st.integers(0, 5))
@settings(max_examples=30, deadline=None)
def test_keyed_simplex_slice_depends_only_on_its_key(labels, which):
    which %= len(labels)
    keys = stream_keys(labels, seed="s", step=2)
    full = keyed_simplex(keys, 7, 3)
    alone = keyed_simplex(keys[which:which + 1], 7, 3)
    np.testing.assert_array_equal(full[which], alone[0])


def test_keyed_simplex_prefix_property_and_other_samplers():
    keys = stream_keys(["a", "b"], seed=0, step=1)
    np.testing.assert_allclose(keyed_simplex(keys, 5, 3)[:, :2], keyed_simplex(keys, 2, 3))
    sob = keyed_simplex(keys, 8, 3, method="sobol")
    np.testing.assert_array_equal(sob[1], keyed_simplex(keys[1:], 8, 3, method="sobol")[0])
    np.testing.assert_allclose(sob.sum(-1), 1.0)
    assert not np.array_equal(keyed_simplex(keys, 5, 3)[0], keyed_simplex(keys, 5, 3)[1])


def test_keyed_exponentials_are_keyed_simplex_unnormalised_in_matmul_layout():
    from vpo.weights import keyed_exponentials

    keys = stream_keys(range(5), seed=1, step=2)
    e = keyed_exponentials(keys, 9, 4)
    assert e.shape == (5, 4, 9) and e.dtype == np.float64 and np.all(e > 0)
    np.testing.assert_allclose((e / e.sum(axis=1, keepdims=True)).transpose(0, 2, 1), keyed_simplex(keys, 9, 4),
                               rtol=1e-15)
    np.testing.assert_array_equal(keyed_exponentials(keys[3:4], 9, 4)[0], e[3])
    np.testing.assert_array_equal(-np.log(counter_uniforms(keys, 36)).reshape(5, 9, 4).transpose(0, 2, 1), e)
