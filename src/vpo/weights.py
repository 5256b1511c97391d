"""Weights on the probability simplex: Dirichlet draws, Sobol quasi-Monte-Carlo, keyed streams.

VPO scores a set of answers by E_w[max_i w . r_i] with w ~ Dirichlet(alpha 1_D); this module
draws the K weight vectors. Usage::

    rng = keyed_rng(0, "prompt-17", 3)                  # same stream in every process
    w = sample_simplex(100, 4, alpha=1.0, method="sobol", rng=rng)   # (K, D) = (100, 4)
    keys = stream_keys([("prompt-17",), ("prompt-18",)], seed=0, step=3)   # (G,) uint64
    w = group_weights(["prompt-17"], 100, 4, seed=0, step=3)[0]   # (K, D): THE keying of a group
    w_by_group = keyed_simplex(keys, 100, 4)            # (G, K, D), one stream per group
    e = keyed_exponentials(keys, 100, 4)                # (G, D, K), unnormalised, matmul layout

Shape glossary: G groups, K weights, D objectives.

Two sources of randomness:

* ``sample_simplex(..., rng=Generator)`` consumes a numpy ``Generator``; a stream drawn in
  one call equals the concatenation of draws made row block by row block.
* ``keyed_simplex(keys, ...)`` gives every key its own stream, independent of which other
  keys are in the call. For the default (iid, alpha = 1) it is a counter-based generator:
  coordinate j of key k is a pure function of (k, j), vectorised over all groups at once, so
  a group's weights never depend on the rest of the batch and cost no Python loop;
  ``keyed_exponentials`` gives the same draws unnormalised, in (G, D, K) layout. For Sobol or
  alpha != 1 each key seeds its own ``numpy`` Generator (a loop over keys).

Keys come from ``blake2b`` over a canonical byte encoding of the parts (``stream_key``), never
from Python's ``hash()``, which is salted per process.
"""

from __future__ import annotations

import hashlib
import math
import struct
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "SAMPLERS",
    "counter_uniforms",
    "encode_key",
    "given_key",
    "group_weights",
    "keyed_exponentials",
    "keyed_rng",
    "keyed_simplex",
    "sample_simplex",
    "stream_key",
    "stream_keys",
]

SAMPLERS = ("iid", "sobol")
"""Simplex samplers: ``iid`` Dirichlet draws, ``sobol`` scrambled Sobol quasi-Monte-Carlo."""

_DOMAIN = b"vpo.weights/v1"  # bumping it changes every keyed stream: do so only on purpose


# --------------------------------------------------------------------------------------
# keys
# --------------------------------------------------------------------------------------
def given_key(value: Any) -> Any:
    """The group key a row gives (its ``example_id``), or None when it gives none: absent, None, or
    a string that is empty or only whitespace. Every engine falls back on None (verl and OpenRLHF
    to the row's ``index``, TRL to the prompt), so blank ids never make one group of many prompts."""
    if isinstance(value, str) and not value.strip():
        return None
    return value


_U32 = struct.Struct("<I").pack


def _encode_int(value: int) -> bytes:
    raw = value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True)
    return b"i" + _U32(len(raw)) + raw


def _encode_str(value: str) -> bytes:
    raw = value.encode("utf-8")
    return b"s" + _U32(len(raw)) + raw


def _encode_part(part: Any, out: bytearray, where: str) -> None:
    """Append a type-tagged, length-prefixed encoding of ``part`` (injective over types)."""
    if isinstance(part, bool | np.bool_):
        out += b"b" + (b"\x01" if part else b"\x00")
    elif isinstance(part, int | np.integer):
        out += _encode_int(int(part))
    elif isinstance(part, float | np.floating):
        # float32/float16 scalars widen exactly to float64, so 0.5 and np.float32(0.5) agree.
        out += b"f" + struct.pack("<d", float(part))
    elif isinstance(part, str):  # np.str_ is a str subclass
        out += _encode_str(part)
    elif isinstance(part, bytes | np.bytes_):
        raw = bytes(part)
        out += b"y" + _U32(len(raw)) + raw
    elif isinstance(part, tuple):
        out += b"t" + _U32(len(part))
        for i, item in enumerate(part):
            _encode_part(item, out, f"{where}[{i}]")
    else:
        raise ValueError(
            f"key part {where} has type {type(part).__name__}; keys accept str, int, float, bytes, "
            "bool, numpy scalars and tuples of these"
        )


def encode_key(*parts: Any) -> bytes:
    """Canonical bytes of ``parts``: equal parts give equal bytes in every process and platform.

    Types are tagged, so ``1``, ``1.0``, ``"1"`` and ``b"1"`` are different keys; numpy scalars
    encode like the Python value they hold (``np.int64(3)`` == ``3``). Other types (lists,
    None, arrays, objects) raise ValueError naming the part.
    """
    out = bytearray(_DOMAIN)
    _encode_part(tuple(parts), out, "key")
    return bytes(out)


def stream_key(*parts: Any) -> int:
    """64-bit unsigned key of ``parts`` (blake2b of ``encode_key(*parts)``)."""
    return int.from_bytes(hashlib.blake2b(encode_key(*parts), digest_size=8).digest(), "little")


def stream_keys(labels: Iterable[Any], *, seed: Any, step: Any = 0) -> np.ndarray:
    """(G,) uint64 keys, one per group label: ``stream_key(seed, label, step)``.

    A group's key depends only on its own label, the seed and the step, so its weights do not
    depend on which other groups share the batch.
    """
    # encode_key(seed, label, step) assembled from a shared prefix and suffix: the hash state of the
    # prefix is copied for each label (cheaper than a fresh blake2b per label)
    head = bytearray(_DOMAIN + b"t" + _U32(3))
    _encode_part(seed, head, "seed")
    tail = bytearray()
    _encode_part(step, tail, "step")
    prefix, tail = hashlib.blake2b(bytes(head), digest_size=8), bytes(tail)
    digests = []
    for label in labels:
        kind = type(label)
        if kind is int or kind is str:  # the common labels, encoded without the type dispatch
            middle = _encode_int(label) if kind is int else _encode_str(label)
        else:
            buffer = bytearray()
            _encode_part(label, buffer, "label")
            middle = bytes(buffer)
        state = prefix.copy()
        state.update(middle + tail)
        digests.append(state.digest())
    return np.frombuffer(b"".join(digests), dtype="<u8").astype(np.uint64)


def keyed_rng(*key: Any) -> np.random.Generator:
    """A numpy Generator whose stream is a pure function of ``key`` (stable across processes).

    ``keyed_rng(seed, group_label, step)`` is the same stream on every rank and every run; the
    seed is 128 bits of blake2b over ``encode_key(*key)``.
    """
    digest = hashlib.blake2b(encode_key(*key), digest_size=16).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest, "little")))


# --------------------------------------------------------------------------------------
# samplers
# --------------------------------------------------------------------------------------
def _check_shape_args(num: Any, dim: Any, alpha: Any, method: Any) -> tuple[int, int, float]:
    if isinstance(num, bool) or not isinstance(num, int | np.integer) or num < 1:
        raise ValueError(f"num (K, the number of weight vectors) must be a positive integer, got {num!r}")
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise ValueError(f"dim (D, the number of objectives) must be a positive integer, got {dim!r}")
    try:
        alpha_f = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a positive number, got {alpha!r}") from None
    if not (alpha_f > 0 and math.isfinite(alpha_f)):
        raise ValueError(f"alpha must be a positive finite number, got {alpha!r}")
    if method not in SAMPLERS:
        raise ValueError(f"method must be one of {SAMPLERS}, got {method!r}")
    return int(num), int(dim), alpha_f


def _normalise_rows(gammas: np.ndarray) -> np.ndarray:
    """Divide each last-axis row by its sum. With a tiny alpha every Gamma draw of a row can
    underflow to 0; such a row becomes the barycentre rather than NaN."""
    totals = gammas.sum(axis=-1, keepdims=True)
    bad = totals <= 0.0
    if np.any(bad):
        gammas = np.where(bad, 1.0, gammas)
        totals = gammas.sum(axis=-1, keepdims=True)
    return gammas / totals


def _sobol_uniforms(num: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """(num, width) scrambled Sobol points in [0, 1), scrambling seeded from ``rng``."""
    from scipy.stats import qmc  # imported here so that ``import vpo.weights`` stays cheap

    engine = qmc.Sobol(d=width, scramble=True, rng=rng)
    with warnings.catch_warnings():
        # K = 100 is not a power of two; the balance warning is expected and harmless here.
        warnings.simplefilter("ignore", UserWarning)
        return engine.random(num)


def sample_simplex(num: int, dim: int, *, alpha: float = 1.0, method: str = "iid",
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """Draw ``num`` weight vectors from Dirichlet(alpha 1_dim): float64 (K, D), rows sum to 1.

    ``method="iid"``: independent draws (alpha = 1: normalised standard exponentials, the
    fastest exact construction; otherwise normalised Gamma(alpha) draws).
    ``method="sobol"``: scrambled Sobol points mapped to the simplex, the scrambling seeded
    from ``rng``. alpha = 1: the sorted-uniforms (spacings) construction on D - 1 Sobol
    coordinates, exactly uniform on the simplex; alpha != 1: the Gamma(alpha) inverse CDF of D
    Sobol coordinates, normalised. Marginals are Beta(alpha, (D - 1) alpha) either way; the
    points are spread more evenly than iid draws, which lowers the variance of E_w estimates.
    ``rng`` defaults to a fresh OS-seeded Generator.
    """
    num, dim, alpha = _check_shape_args(num, dim, alpha, method)
    if rng is None:
        rng = np.random.default_rng()
    elif not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if dim == 1:
        return np.ones((num, 1))
    if method == "iid":
        if alpha == 1.0:
            return _normalise_rows(rng.standard_exponential((num, dim)))
        return _normalise_rows(rng.standard_gamma(alpha, (num, dim)))
    if alpha == 1.0:
        cuts = np.sort(_sobol_uniforms(num, dim - 1, rng), axis=1)
        edges = np.concatenate([np.zeros((num, 1)), cuts, np.ones((num, 1))], axis=1)
        return np.diff(edges, axis=1)
    # Keep the inverse CDF finite: Sobol points can be exactly 0.
    from scipy import special

    uniforms = np.clip(_sobol_uniforms(num, dim, rng), 1e-300, 1.0 - 1e-16)
    return _normalise_rows(special.gammaincinv(alpha, uniforms))


# --------------------------------------------------------------------------------------
# keyed, vectorised streams
# --------------------------------------------------------------------------------------
_M1 = np.uint32(0x7FEB352D)
_M2 = np.uint32(0x846CA68B)
_S9, _S15, _S16 = np.uint32(9), np.uint32(15), np.uint32(16)
_GOLDEN32 = np.uint32(0x9E3779B9)


def _mix32(x: np.ndarray, spare: np.ndarray) -> np.ndarray:
    """In-place 32-bit avalanche mixer ("lowbias32", C. Wellons): a bijection on uint32
    (``spare``, an array of x's shape, holds the shifted words: no temporary per step)."""
    x ^= np.right_shift(x, _S16, out=spare)
    x *= _M1
    x ^= np.right_shift(x, _S15, out=spare)
    x *= _M2
    x ^= np.right_shift(x, _S16, out=spare)
    return x


_ONE_BITS = np.uint32(0x3F800000)  # float32 1.0
_BELOW_ONE = np.float32(1.0 - 2.0**-24)


def _keyed_uniforms(keys: np.ndarray, counters: np.ndarray, words: np.ndarray | None = None,
                    spare: np.ndarray | None = None) -> np.ndarray:
    """float32 (G, *counters.shape): entry [g, *i] is the uniform of counter ``counters[i]``
    under ``keys[g]`` (see ``counter_uniforms``). ``keys`` (G,) uint64; ``counters`` uint32,
    in whatever layout the caller wants the uniforms in. ``words`` and ``spare``: uint32 buffers
    of the result's shape to work in (the uniforms are a float32 view of ``words``)."""
    expand = (slice(None),) + (None,) * counters.ndim
    shape = (keys.size, *counters.shape)
    words = np.empty(shape, dtype=np.uint32) if words is None else words
    spare = np.empty(shape, dtype=np.uint32) if spare is None else spare
    np.bitwise_xor((counters * _GOLDEN32)[None], (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)[expand], out=words)
    _mix32(words, spare)
    words ^= (keys >> np.uint64(32)).astype(np.uint32)[expand]
    _mix32(words, spare)
    # u = (b + 1/2) 2**-23 for the top 23 bits b, exactly: the float32 with b as mantissa is
    # 1 + b 2**-23, and minus (1 - 2**-24) its difference is representable, so no rounding
    words >>= _S9
    words |= _ONE_BITS
    uniforms = words.view(np.float32)
    uniforms -= _BELOW_ONE
    return uniforms


def counter_uniforms(keys: np.ndarray, count: int) -> np.ndarray:
    """(G, count) float32 uniforms in (0, 1): entry [g, j] is a pure function of (keys[g], j).

    Two rounds of a 32-bit bijective mixer keyed by the low and high halves of the 64-bit key:
    ``u = mix(mix(j * golden ^ lo) ^ hi)``; the top 23 bits plus one half, times 2**-23, give a
    float32 in [2**-24, 1 - 2**-24] exactly (23 bits + 0.5 fit float32's 24-bit mantissa), so
    ``-log u`` is finite and positive. For a fixed key the map from j to the 32-bit word is a
    bijection, so a group's words never repeat (its 23-bit uniforms collide only by chance).
    """
    if count < 0 or count >= 2**32:
        raise ValueError(f"count must be in [0, 2**32), got {count}")
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    return _keyed_uniforms(keys, np.arange(count, dtype=np.uint32))


_CHUNK_VALUES = 1 << 15
"""Uniforms hashed per chunk of groups in ``keyed_exponentials``: 128 KiB of words, in a core's L2 cache."""


def _check_keys(keys: Any) -> np.ndarray:
    keys = np.asarray(keys)
    if keys.ndim != 1 or (keys.size and not np.issubdtype(keys.dtype, np.integer)):
        raise ValueError(f"keys must be a 1-D array of integers, got dtype {keys.dtype} shape {keys.shape}")
    return keys.astype(np.uint64)


def keyed_exponentials(keys: np.ndarray | Sequence[int], num: int, dim: int) -> np.ndarray:
    """Unnormalised keyed weights: float64 (G, D, K) standard exponentials, laid out for a matmul.

    Entry [g, d, k] is ``-log u`` with u = ``counter_uniforms(keys, K D)[g, k D + d]``; the log
    runs in float32 (the costly step) and is widened exactly to float64. Column k of slice g
    divided by its sum is row k of ``keyed_simplex(keys, num, dim)[g]``, a Dirichlet(1_D)
    draw. The (G, D, K) layout is the one ``rewards (.., M, D) @ weights`` consumes, so no
    transpose copy is needed; callers may also defer the normalisation (``vpo.objective``
    applies 1 / sum after the max over answers).
    """
    num, dim, _ = _check_shape_args(num, dim, 1.0, "iid")
    keys = _check_keys(keys)
    if num * dim >= 2**32:
        raise ValueError(f"num * dim must be < 2**32, got {num * dim}")
    counters = np.arange(0, num * dim, dim, dtype=np.uint32)[None, :] + np.arange(dim, dtype=np.uint32)[:, None]
    out = np.empty((keys.size, dim, num))
    step = max(1, _CHUNK_VALUES // (num * dim))
    # one pair of buffers for every chunk: a chunk's words stay in cache through the dozen passes over them
    words, spare = (np.empty((min(step, keys.size), dim, num), dtype=np.uint32) for _ in range(2))
    for start in range(0, keys.size, step):
        chunk = keys[start:start + step]
        logs = _keyed_uniforms(chunk, counters, words[:chunk.size], spare[:chunk.size])
        np.log(logs, out=logs)
        np.negative(logs, out=out[start:start + step])
    return out


def keyed_simplex(keys: np.ndarray | Sequence[int], num: int, dim: int, *, alpha: float = 1.0,
                  method: str = "iid") -> np.ndarray:
    """One Dirichlet(alpha 1_D) stream per key: float64 (G, K, D), each row on the simplex.

    ``keys``: (G,) integer keys (``stream_keys``). Slice g depends only on ``keys[g]``.
    iid with alpha = 1 (the VPO default): ``keyed_exponentials`` normalised, so coordinate
    (k, d) uses counter k D + d and the first K' < K weights of a key are the same for every K.
    Sobol or alpha != 1: per key,
    ``sample_simplex(num, dim, alpha=alpha, method=method, rng=np.random.default_rng(key))``.
    """
    num, dim, alpha = _check_shape_args(num, dim, alpha, method)
    keys = _check_keys(keys)
    if dim == 1:
        return np.ones((keys.size, num, 1))
    if method == "iid" and alpha == 1.0:
        exps = keyed_exponentials(keys, num, dim)
        exps /= exps.sum(axis=1, keepdims=True)
        return np.ascontiguousarray(exps.transpose(0, 2, 1))
    out = np.empty((keys.size, num, dim))
    for g, key in enumerate(keys.tolist()):
        out[g] = sample_simplex(num, dim, alpha=alpha, method=method, rng=np.random.default_rng(key))
    return out


FIXED = 0
"""The ``step`` of weights that stay the same for a group across steps (random weighting in the
authors' release keeps one w per dataset row). It is step 0, so an estimator called without a
step (its default) draws a group's fixed weights."""


def group_weights(labels: Iterable[Any], num: int, dim: int, *, seed: Any = 0, step: Any = FIXED,
                  alpha: float = 1.0, sampler: str = "iid") -> np.ndarray:
    """The (G, K, D) weights of groups ``labels``: the one way a group's weights are keyed.

    Row g is ``keyed_simplex(stream_keys([labels[g]], seed=seed, step=step), K, D)``: a pure
    function of (seed, label, step), the same on every rank, process and engine, and
    independent of the other groups in the call. ``step=FIXED`` keeps a group's weights for
    the whole run. The estimators (``vpo``, ``random_weight``, ``goal_conditioned``) draw
    exactly these (up to float rounding: their fast path normalises after the max); the TRL,
    verl and OpenRLHF adapters pass (seed, step, label) to them or call this function.
    """
    keys = stream_keys(labels, seed=seed, step=step)
    return keyed_simplex(keys, num, dim, alpha=alpha, method=sampler)
