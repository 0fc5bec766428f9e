"""roundoff.quantize / dequantize: shapes and axes, codes against the element formats' encodings, the MX floor
rule written out here, the fixed point, and one-line refusals."""
from __future__ import annotations

import numpy as np
import pytest

import roundoff
from conftest import assert_same_bits, cli_json


def test_mx_floor_rule_written_out_on_random_blocks():
    rng = np.random.default_rng(41)
    x = (rng.standard_normal((8, 64)) * 2.0 ** rng.integers(-10, 10, (8, 64))).astype(np.float32)
    for name, elem in [("mxfp4", "e2m1"), ("mxfp6-e2m3", "e2m3"), ("mxfp6-e3m2", "e3m2")]:
        f = roundoff.Format(elem)
        values, codes, scales = roundoff.quantize(x, name)
        assert values.dtype == np.float32 and codes.shape == x.shape and scales.shape == (8, 2)
        blocks = x.astype(np.float64).reshape(8, 2, 32)
        s = np.floor(np.log2(np.abs(blocks).max(axis=-1))) - f.emax
        assert np.array_equal(scales.astype(np.int64) - 127, s.astype(np.int64))
        p = np.clip(roundoff.round(blocks / 2.0 ** s[..., None], f), -f.max_finite, f.max_finite)
        assert np.array_equal(roundoff.from_bits(codes.reshape(8, 2, 32), f), p)
        assert np.array_equal(values.reshape(8, 2, 32), (p * 2.0 ** s[..., None]).astype(np.float32))


@pytest.mark.parametrize("name", ["mxfp8-e4m3", "mxfp8-e5m2", "mxfp4", "mxint8", "nvfp4", "int4-g32",
                                  "int4-g128", "mxfp4:nv-ceil", "nf4"])
def test_axis_dequantize_and_fixed_point(name):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 3))
    q = roundoff.quantize(x, name, axis=0)
    assert q.values.dtype == np.float64 and q.codes.shape == x.shape
    assert q.scales.shape[1] == 3
    back = roundoff.dequantize(q.codes, q.scales, name, axis=0, tensor_scale=q.tensor_scale, dtype=np.float64)
    assert np.array_equal(back, q.values)
    again = roundoff.quantize(q.values, name, axis=0)
    assert np.array_equal(again.values, q.values)
    same_last = roundoff.quantize(np.ascontiguousarray(x.T), name)
    assert np.array_equal(same_last.codes, q.codes.T)


def test_nan_block_and_refusals():
    x = np.zeros(64)
    x[40] = np.nan
    _, codes, scales = roundoff.quantize(x, "mxfp8-e4m3")
    assert list(scales) == [127 - 127, 0xFF] and not codes.any()
    for args, msg in [((np.zeros(48), "mxfp4"), "block size 32 does not divide the axis length 48"),
                      ((np.zeros(32), "mxfp5"), "unknown block format 'mxfp5'"),
                      ((np.zeros(32), "int4-g32:nv-ceil"), "only MX formats take a rule")]:
        with pytest.raises(ValueError, match=msg) as e:
            roundoff.quantize(*args)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("name,dtype,shape,axis", [("mxfp4", np.float32, (3, 64), -1),
                                                   ("mxfp8-e4m3:nv-ceil", np.float64, (2, 32, 3), 1),
                                                   ("nvfp4", np.float32, (32, 5), 0),
                                                   ("int4-g32", np.float64, (4, 64), -1),
                                                   ("nf4", np.float32, (64, 2, 3), 0),
                                                   ("nvfp4-16x16", np.float32, (32, 48), 0),
                                                   ("nvfp4-16x16", np.float64, (48, 16), -1)])
def test_cli_quantize_npz_matches_the_binding(cli, tmp_path, name, dtype, shape, axis):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 6, shape)).astype(dtype)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "q.npz"
    lines = cli("quantize", "--format", name, "--axis", str(axis), str(tmp_path / "x.npy"), "--out", str(out))
    report = cli_json(lines)[0]
    q = roundoff.quantize(x, name, axis=axis)
    with np.load(out) as z:
        assert z["codes"].dtype == np.uint8 and np.array_equal(z["codes"], q.codes)
        assert z["scales"].dtype == q.scales.dtype and np.array_equal(z["scales"], q.scales)
        assert z["scales"].dtype == {"int4-g32": np.uint16, "nf4": np.uint32}.get(name, np.uint8)
        want = roundoff.dequantize(q.codes, q.scales, name, axis=axis, tensor_scale=q.tensor_scale,
                                   dtype=np.float32)
        assert z["values"].dtype == np.float32
        assert_same_bits(z["values"], want, name)
        assert ("tensor_scale" in z.files) == name.startswith("nvfp4")
        if "tensor_scale" in z.files:
            assert z["tensor_scale"].dtype == np.float32 and float(z["tensor_scale"]) == q.tensor_scale
    err = want.astype(np.float64) - x.astype(np.float64)
    assert report["format"] == name
    assert report["count"] == x.size
    assert report["max_abs_error"] == np.abs(err).max()
    assert report["rms_error"] == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=1e-12)
    nz = x != 0
    assert report["max_rel_error"] == (np.abs(err[nz]) / np.abs(x[nz].astype(np.float64))).max()


NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)  # QLoRA / bitsandbytes' NF4 table


def test_nf4_written_out():
    assert "nf4" in roundoff.block_formats()
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 128)) * 2.0 ** rng.integers(-20, 20, (3, 1))).astype(np.float32)
    x[0, :64] = 0.0                                   # an all-zero block
    mids = (NF4[:-1].astype(np.float64) + NF4[1:]) / 2
    x[1, :64] = 0.0
    x[1, 0] = 1.0
    x[1, 1:16] = mids                                 # ties where float32 holds the midpoint (masked below)
    q = roundoff.quantize(x, "nf4")
    assert q.codes.shape == x.shape and q.scales.shape == (3, 2) and q.scales.dtype == np.uint32
    blocks = x.astype(np.float64).reshape(3, 2, 64)
    s = np.abs(blocks).max(axis=-1).astype(np.float32)
    assert np.array_equal(q.scales, s.view(np.uint32))
    # nearest codebook value of x / S (exact here: float64 products c·S and x), ties to the lower index
    d = np.abs(blocks[..., None] - NF4.astype(np.float64) * s.astype(np.float64)[..., None, None])
    want = np.where(s[..., None] > 0, np.argmin(d, axis=-1), 7)
    assert np.array_equal(q.codes.reshape(3, 2, 64), want)
    assert np.array_equal(q.values.reshape(3, 2, 64),
                          (NF4[want].astype(np.float64) * s.astype(np.float64)[..., None]).astype(np.float32))
    assert np.all(q.codes[0, :64] == 7) and q.scales[0, 0] == 0
    exact = x[1, 1:16].astype(np.float64) == mids
    assert np.array_equal(q.codes[1, 1:16][exact], np.arange(15)[exact])
    ties = np.concatenate([[1.0], mids, np.zeros(48)])  # float64 holds every midpoint: all 15 ties
    assert np.array_equal(roundoff.quantize(ties, "nf4").codes[1:16], np.arange(15))
    with pytest.raises(ValueError, match="is not finite"):
        roundoff.quantize(np.full(64, np.nan), "nf4")


def _mlx_affine_numpy(x, bits, group, dtype):
    """MLX's affine quantization (mx.quantize, CPU reference) in numpy binary32 steps (IEEE, nearest-even)."""
    w = roundoff.round(np.asarray(x, dtype=np.float64), dtype).astype(np.float32).reshape(-1, group)
    n_bins = np.float32((1 << bits) - 1)
    w_min, w_max = w.min(axis=1), w.max(axis=1)
    low = np.abs(w_min) > np.abs(w_max)
    scale = np.maximum((w_max - w_min) / n_bins, np.float32(1e-7))
    scale = np.where(low, scale, -scale)
    edge = np.where(low, w_min, w_max)
    q0 = np.rint(edge / scale)
    nz = q0 != 0
    scale = np.where(nz, edge / np.where(nz, q0, np.float32(1)), scale).astype(np.float32)
    bias = np.where(nz, edge, np.float32(0)).astype(np.float32)
    codes = np.clip(np.rint((w - bias[:, None]) / scale[:, None]), 0, n_bins).astype(np.uint8)
    return codes.reshape(np.shape(x)), roundoff.round(scale.astype(np.float64), dtype), \
        roundoff.round(bias.astype(np.float64), dtype)


@pytest.mark.parametrize("bits,group,dtype", [(4, 64, "fp16"), (2, 32, "bf16"), (8, 128, "fp32"), (3, 64, "bf16"),
                                              (5, 32, "fp16"), (6, 128, "fp16")])
def test_mlx_affine_written_out_in_numpy(bits, group, dtype):
    rng = np.random.default_rng(bits * group)
    x = rng.standard_normal((6, 2 * group)) * 2.0 ** rng.integers(-12, 4, (6, 1))
    x[0] = 0.0
    x[1] = 0.375
    x[2] = np.abs(x[2])
    suffix = "" if dtype == "fp16" else "-" + dtype
    name = f"mlx-int{bits}-g{group}{suffix}"
    q = roundoff.quantize(x, name)
    codes, scale, bias = _mlx_affine_numpy(x, bits, group, dtype)
    assert np.array_equal(q.codes, codes)
    fmt = roundoff.Format(dtype)
    assert np.array_equal(roundoff.from_bits(q.scales.reshape(-1), fmt), scale)
    assert np.array_equal(roundoff.from_bits(q.biases.reshape(-1), fmt), bias)
    # Decoded: code·scale + bias, exact (as fractions), rounded once to float64.
    from fractions import Fraction
    s = roundoff.from_bits(q.scales, fmt)
    b = roundoff.from_bits(q.biases, fmt)
    for i in (0, 2, 5):
        for j in (0, group - 1, group, 2 * group - 1):
            exact = Fraction(int(q.codes[i, j])) * Fraction(float(s[i, j // group])) + Fraction(float(b[i, j // group]))
            assert q.values[i, j] == float(exact)
    back = roundoff.dequantize(q.codes, q.scales, name, biases=q.biases, dtype=np.float64)
    assert np.array_equal(back, q.values)
    with pytest.raises(ValueError, match="0 biases given; valid: 12 "):
        roundoff.dequantize(q.codes, q.scales, name)


def test_cli_mlx_affine_and_rule_option(cli, tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    cli("quantize", "--format", "mlx-int4-g32-bf16", str(tmp_path / "x.npy"), "--out", str(tmp_path / "m.npz"))
    q = roundoff.quantize(x, "mlx-int4-g32-bf16")
    with np.load(tmp_path / "m.npz") as z:
        assert np.array_equal(z["codes"], q.codes)
        assert z["scales"].dtype == np.uint16 and np.array_equal(z["scales"], q.scales)
        assert z["biases"].dtype == np.uint16 and np.array_equal(z["biases"], q.biases)
        assert_same_bits(z["values"], q.values, "mlx values")
    cli("quantize", "--format", "mxfp4", "--rule", "mlx-round", str(tmp_path / "x.npy"), "--out",
        str(tmp_path / "r.npz"))
    with np.load(tmp_path / "r.npz") as z:
        assert np.array_equal(z["scales"], roundoff.quantize(x, "mxfp4:mlx-round").scales)


def test_mlx_round_scale_written_out():
    # s = round(log2(fp32(fp32(amax) / 6))): the nearest integer to log2, no ties (2^(1/2) is irrational).
    rng = np.random.default_rng(9)
    x = rng.standard_normal((40, 32)) * 2.0 ** rng.integers(-20, 20, (40, 1))
    x[0] = 0.0
    q = roundoff.quantize(x, "mxfp4:mlx-round")
    amax = np.abs(x).max(axis=1).astype(np.float32)
    ratio = (amax / np.float32(6)).astype(np.float64)
    want = np.full(40, -127)
    pos = ratio > 0
    m, e = np.frexp(ratio[pos])  # ratio = m·2^e, m in [1/2, 1)
    want[pos] = np.clip(e - 1 + ((2 * m) ** 2 >= 2), -127, 127)
    assert np.array_equal(q.scales.reshape(-1).astype(int) - 127, want)


def _fp32(q: Fraction) -> float:
    from conftest import exact_round
    return exact_round(abs(q), q < 0, 24, -126, 127, float(np.finfo(np.float32).max), "ieee", False, "nearest-even")


@pytest.mark.parametrize("name,name_b", [("mxfp8-e4m3", None), ("mxfp4", "mxfp6-e2m3"), ("nvfp4", None),
                                         ("int4-g32", "mxfp4"), ("mxint8", None)])
def test_block_gemm_is_exact_block_dots_added_in_fp32(name, name_b):
    # The definition written out with fractions: T_t = Σ over the block of the decoded values' products (without
    # NVFP4's tensor scale), exact; C = fp32-seq over the T_t (s = fp32(T_0), s = fp32(s + T_t)); NVFP4: then
    # divided by S_enc,A·S_enc,B and rounded once.
    from fractions import Fraction
    rng = np.random.default_rng(17)
    nb = name if name_b is None else name_b
    k = 32
    a = rng.standard_normal((6, 8 * k)) * 2.0 ** rng.integers(-5, 5, (6, 1))
    b = rng.standard_normal((8 * k, 5)) * 2.0 ** rng.integers(-5, 5, (1, 5))
    c = roundoff.block_gemm(a, b, name, format_b=nb)
    qa = roundoff.quantize(a, name)
    qb = roundoff.quantize(b, nb, axis=0)
    va = roundoff.dequantize(qa.codes, qa.scales, name, dtype=np.float64,
                             tensor_scale=1.0 if name == "nvfp4" else qa.tensor_scale)
    vb = roundoff.dequantize(qb.codes, qb.scales, nb, axis=0, dtype=np.float64,
                             tensor_scale=1.0 if nb == "nvfp4" else qb.tensor_scale)
    for i in range(6):
        for j in range(5):
            s = None
            for t in range(8):
                T = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(va[i, t * k:(t + 1) * k],
                                                                                  vb[t * k:(t + 1) * k, j]))
                assert float(T) == T  # exact in binary64 for these formats
                s = Fraction(_fp32(T)) if s is None else Fraction(_fp32(s + T))
            want = float(s)
            if name == "nvfp4":
                want = _fp32(s / (Fraction(qa.tensor_scale) * Fraction(qb.tensor_scale)))
            assert c[i, j] == want, (name, i, j)


def test_block_gemm_is_not_a_gemm_of_the_dequantized_values():
    # Adding each product into fp32 (a plain GEMM of the dequantized values) differs from adding exact block dots.
    rng = np.random.default_rng(17)
    a, b = rng.standard_normal((30, 256)), rng.standard_normal((256, 20))
    c = roundoff.block_gemm(a, b, "mxfp8-e4m3")
    qa, qb = roundoff.quantize(a, "mxfp8-e4m3"), roundoff.quantize(b, "mxfp8-e4m3", axis=0)
    d = roundoff.gemm(qa.values, qb.values, inputs="fp32", accumulation="fp32-seq")
    assert 0 < np.sum(c != d) < c.size


def test_block_gemm_refusals_and_threads():
    a = np.ones((2, 64))
    with pytest.raises(ValueError, match="blocks of 32 .* and B's of 16 .* differ"):
        roundoff.block_gemm(a, np.ones((64, 2)), "mxfp4", format_b="nvfp4")
    with pytest.raises(ValueError, match="inner dimensions differ"):
        roundoff.block_gemm(a, np.ones((32, 2)), "mxfp4")
    with pytest.raises(ValueError, match="block size 32 does not divide the axis length 48"):
        roundoff.block_gemm(np.ones((2, 48)), np.ones((48, 2)), "mxfp4")
    with pytest.raises(ValueError, match="explicit integer seed"):
        roundoff.block_gemm(a, np.ones((64, 2)), "mxfp4", accumulation="fp16-sr")
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((20, 256)), rng.standard_normal((256, 30))
    one = roundoff.block_gemm(x, y, "mxfp8-e5m2", accumulation="bf16-sr", seed=4, threads=1)
    two = roundoff.block_gemm(x, y, "mxfp8-e5m2", accumulation="bf16-sr", seed=4, threads=2)
    assert_same_bits(one, two, "threads")
    # A NaN in a block of A: that block's scale is NaN, so its outputs are NaN and the others are not.
    x[0, 5] = np.nan
    c = roundoff.block_gemm(x, y, "mxfp8-e5m2")
    assert np.isnan(c[0]).all() and not np.isnan(c[1:]).any()


@pytest.mark.parametrize("bits,order", [(2, "sequential"), (4, "sequential"), (8, "sequential"), (4, "awq")])
def test_pack_unpack_round_trips_every_code(bits, order):
    per = 32 // bits
    rng = np.random.default_rng(bits)
    # Every code at least once (np.resize repeats the range), shuffled, in a (16·per, 2·per) matrix.
    codes = rng.permutation(np.resize(np.arange(1 << bits), 32 * per * per)).astype(np.uint8).reshape(16 * per, 2 * per)
    for axis in (-1, 0):
        if codes.shape[axis] % per:
            continue
        w = roundoff.pack_codes(codes, bits, order=order, axis=axis)
        assert w.dtype == np.uint32
        assert np.array_equal(roundoff.unpack_codes(w, bits, order=order, axis=axis), codes)
    # Slot by slot, written out: slot i of word 0 holds code slots[i] of the first run.
    slots = (0, 2, 4, 6, 1, 3, 5, 7) if order == "awq" else tuple(range(per))
    run = np.arange(per, dtype=np.uint8) % (1 << bits)
    word = int(roundoff.pack_codes(run, bits, order=order)[0])
    for i, src in enumerate(slots):
        assert (word >> (i * bits)) & ((1 << bits) - 1) == run[src]


def test_gptq_grid_in_numpy_and_pack_refusals():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((4, 128)) * 0.02).astype(np.float32)
    q = roundoff.quantize(x, "gptq-int4-g128")
    xmin = np.minimum(x.min(axis=1), np.float32(0))
    xmax = np.maximum(x.max(axis=1), np.float32(0))
    scale = (xmax - xmin) / np.float32(15)
    zero = np.rint(-xmin / scale)
    codes = np.clip(np.rint(x / scale[:, None]) + zero[:, None], 0, 15).astype(np.uint8)
    assert np.array_equal(q.codes, codes)
    assert np.array_equal(q.biases.reshape(-1), zero.astype(np.uint16))
    assert np.array_equal(q.scales.reshape(-1), roundoff.to_bits(roundoff.round(scale.astype(np.float64), "fp16"), "fp16"))
    back = roundoff.dequantize(q.codes, q.scales, "gptq-int4-g128", biases=q.biases, dtype=np.float64)
    s16 = roundoff.from_bits(q.scales, "fp16")
    assert np.array_equal(back, s16 * (q.codes.astype(np.float64) - q.biases.astype(np.float64)))
    for args, kw, msg in [((np.zeros(8, np.uint8), 3), {}, "valid: 2, 4, 8"),
                          ((np.zeros(8, np.uint8), 2), {"order": "awq"}, "4-bit codes only"),
                          ((np.zeros(6, np.uint8), 4), {}, "not a multiple of 8"),
                          ((np.full(8, 16, np.uint8), 4), {}, "do not fit 4 bits")]:
        with pytest.raises(ValueError, match=msg):
            roundoff.pack_codes(*args, **kw)


def test_nvfp4_16x16_tiles_are_nvfp4_on_each_tile_and_transpose_invariant():
    # A tile quantizes as a 1-D nvfp4 block of its 256 values would (same tensor scale): check it by quantizing
    # the tiles laid out as rows of 256 with a 256-block NVFP4 written out here from the 16-block one: amax
    # per tile, S_dec = ue4m3(amax · S_enc/6), elements e2m1(x · enc).
    rng = np.random.default_rng(12)
    w = (rng.standard_normal((32, 48)) * 2.0 ** rng.integers(-4, 4, (32, 1))).astype(np.float32)
    q = roundoff.quantize(w, "nvfp4-16x16")
    assert q.scales.shape == (2, 3) and q.codes.shape == w.shape
    qt = roundoff.quantize(np.ascontiguousarray(w.T), "nvfp4-16x16")
    assert np.array_equal(qt.codes, q.codes.T) and np.array_equal(qt.scales, q.scales.T)
    q0 = roundoff.quantize(w, "nvfp4-16x16", axis=0)
    assert np.array_equal(q0.codes, q.codes) and np.array_equal(q0.scales, q.scales)
    s_enc = np.float32(2688) / np.abs(w).max()
    assert q.tensor_scale == s_enc
    e2m1 = roundoff.Format("e2m1")
    for ti in range(2):
        for tj in range(3):
            tile = w[16 * ti:16 * ti + 16, 16 * tj:16 * tj + 16]
            s_dec = roundoff.round(np.float64(np.abs(tile).max() * (s_enc * np.float32(1 / 6))),
                                   roundoff.Format("e4m3"))
            assert roundoff.from_bits(np.array([q.scales[ti, tj]]), "e4m3")[0] == s_dec
            enc = np.float32(1) / (np.float32(s_dec) * (np.float32(1) / s_enc))
            want = roundoff.round((tile * enc).astype(np.float64), e2m1)
            got = roundoff.from_bits(q.codes[16 * ti:16 * ti + 16, 16 * tj:16 * tj + 16], e2m1)
            assert np.array_equal(got, want)
    back = roundoff.dequantize(q.codes, q.scales, "nvfp4-16x16", tensor_scale=q.tensor_scale)
    assert np.array_equal(back, q.values)
    with pytest.raises(ValueError, match="quantizes matrices in 16x16 tiles"):
        roundoff.quantize(np.zeros(256), "nvfp4-16x16")
    with pytest.raises(ValueError, match="does not split into 16x16 tiles"):
        roundoff.quantize(np.zeros((8, 32)), "nvfp4-16x16")


def test_nf4_dq_in_numpy():
    """nf4-dq (QLoRA double quantization) against the rule in numpy: nf4 codes unchanged, the absmax quantized
    again (mean offset, groups of 256, the dynamic map by fp32 midpoints, ties to the even index)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((300, 64)) * 2.0 ** rng.integers(-4, 5, (300, 1))).astype(np.float32)
    q = roundoff.quantize(x, "nf4-dq")
    r = roundoff.quantize(x, "nf4")
    assert np.array_equal(q.codes, r.codes) and q.scales.dtype == np.uint8 and q.scales.shape == (300, 1)
    s = r.scales.view(np.float32).reshape(-1)
    offset = np.float32(np.mean(s.astype(np.float64)))  # exact sum here (a few binades), then rounded
    assert q.scale_offset == offset
    c = (s - offset).astype(np.float32)
    assert q.scale_scales.shape == (2,)
    for g in range(2):
        grp = c[g * 256:(g + 1) * 256]
        a = np.float32(np.max(np.abs(grp)))
        assert q.scale_scales[g] == a
        decoded = roundoff.dequantize(q.codes[g * 256:(g + 1) * 256], q.scales[g * 256:(g + 1) * 256], "nf4-dq",
                                      scale_scales=q.scale_scales[g:g + 1], scale_offset=q.scale_offset)
        assert decoded.shape == (len(grp), 64)
    assert np.array_equal(roundoff.dequantize(q.codes, q.scales, "nf4-dq", scale_scales=q.scale_scales,
                                              scale_offset=q.scale_offset), q.values)
    assert np.max(np.abs(q.values - x)) < 0.6 * np.max(np.abs(x))
    with pytest.raises(ValueError, match="nf4-dq needs both"):
        roundoff.dequantize(q.codes, q.scales, "nf4-dq")


def test_palettize_is_numpy_argmin_per_tensor_and_per_group():
    rng = np.random.default_rng(9)
    w = rng.standard_normal((8, 33)).astype(np.float32)
    lut = np.array([[-1, 0, 1, 0.5, 0.5], [2, -2, 0, 0.25, -0.25]], dtype=np.float32)
    q = roundoff.palettize(w, lut)
    want = np.stack([np.argmin(np.abs(w[r][:, None] - lut[r // 4][None, :]), axis=1) for r in range(8)])
    assert np.array_equal(q.codes, want) and q.codes.dtype == np.uint8
    assert np.array_equal(q.values, np.take_along_axis(lut[np.arange(8) // 4], want, 1))
    assert np.array_equal(roundoff.depalettize(q.codes, lut), q.values)
    one = roundoff.quantize(w, "palette", lut=lut[0])
    assert np.array_equal(one.codes, np.argmin(np.abs(w[..., None] - lut[0]), axis=-1))
    with pytest.raises(ValueError, match="needs lut="):
        roundoff.quantize(w, "palette")
    with pytest.raises(ValueError, match="float32 values"):
        roundoff.palettize(w, np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="1 to 256"):
        roundoff.palettize(w, np.zeros(257, dtype=np.float32))
