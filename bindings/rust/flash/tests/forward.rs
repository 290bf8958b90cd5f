//! Forward results against the independent fp64 reference in tests/common: every mask kind and their
//! combinations, seqlen_q != seqlen_k, GQA, empty rows, strided views, all three dtypes, both CPU
//! algorithms. Outputs are poisoned (NaN) before each run.

mod common;

use common::{max_abs_err, reference, Masking, Rng, Shape};
use flash::half::{bf16, f16};
use flash::{Algorithm, BlockMask, Element, Forward, Tensor, TensorMut};

trait Elem: Element {
    /// Tolerance on O (values in [-1, 1]): a few units in the last place of the dtype.
    const TOL: f64;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}
impl Elem for f32 {
    const TOL: f64 = 2e-5;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl Elem for f16 {
    const TOL: f64 = 4.0 * 4.9e-4; // 4 ulp at 1.0
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
}
impl Elem for bf16 {
    const TOL: f64 = 4.0 * 3.9e-3; // 4 ulp at 1.0
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}

fn forward_options<'m>(m: &Masking, mask: Option<&'m BlockMask>, alg: Algorithm) -> Forward<'m> {
    let mut f =
        Forward::new().causal(m.causal).alignment(m.alignment()).window(m.window_left, m.window_right).algorithm(alg);
    if let Some(s) = m.scale {
        f = f.scale(s as f32);
    }
    if let Some(mask) = mask {
        f = f.block_mask(mask);
    }
    f
}

/// Runs one case with fresh inputs on `alg` and checks O and LSE against the reference computed from the
/// same (rounded) inputs. Returns the largest error on O.
fn check_case<T: Elem>(s: Shape, m: &Masking, seed: u64, alg: Algorithm) -> f64 {
    let mut rng = Rng(seed);
    let round = |x: &Vec<f64>| -> Vec<T> { x.iter().map(|&v| T::from_f64(v)).collect() };
    let (q, k, v) = (round(&rng.vec(s.q_len())), round(&rng.vec(s.kv_len())), round(&rng.vec(s.kv_len())));
    let widen = |x: &Vec<T>| -> Vec<f64> { x.iter().map(|&v| v.to_f64()).collect() };
    let (o_ref, lse_ref) = reference(&s, m, &widen(&q), &widen(&k), &widen(&v));

    let mask = m.blocks.as_ref().map(|(bm, bn, shape, map)| BlockMask::from_dense(*bm, *bn, *shape, map).unwrap());
    let mut o = vec![T::from_f64(f64::NAN); s.q_len()];
    let mut lse = vec![f32::NAN; s.b * s.hq * s.sq];
    let used = forward_options(m, mask.as_ref(), alg)
        .run_with_lse(
            &Tensor::new(&q, s.q()).unwrap(),
            &Tensor::new(&k, s.kv()).unwrap(),
            &Tensor::new(&v, s.kv()).unwrap(),
            &mut TensorMut::new(&mut o, s.q()).unwrap(),
            &mut TensorMut::new(&mut lse, s.lse()).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{s:?} {m:?} {alg}: {e}"));
    if alg != Algorithm::AUTO {
        assert_eq!(used, alg);
    } else {
        assert_eq!(used, Algorithm::CPU, "AUTO on host tensors");
    }
    let err = max_abs_err(&widen(&o), &o_ref);
    assert!(err <= T::TOL, "{s:?} {m:?} {alg}: max |O - ref| = {err:e} > {:e}", T::TOL);
    let lse: Vec<f64> = lse.iter().map(|&x| x as f64).collect();
    let lse_err = max_abs_err(&lse, &lse_ref);
    assert!(lse_err <= 1e-4, "{s:?} {m:?} {alg}: max |LSE - ref| = {lse_err:e}");
    err
}

const ALGORITHMS: [Algorithm; 3] = [Algorithm::AUTO, Algorithm::CPU, Algorithm::NAIVE];

fn shape(b: usize, sq: usize, sk: usize, hq: usize, hkv: usize, d: usize) -> Shape {
    Shape { b, sq, sk, hq, hkv, d }
}

#[test]
fn dense_fp32_odd_sizes_gqa_and_head_dims() {
    let shapes = [
        shape(1, 1, 1, 1, 1, 8),
        shape(2, 37, 53, 4, 2, 64),
        shape(1, 65, 130, 3, 1, 40),
        shape(1, 129, 128, 2, 2, 128),
        shape(1, 5, 300, 2, 1, 256),
    ];
    for (n, s) in shapes.into_iter().enumerate() {
        for alg in ALGORITHMS {
            check_case::<f32>(s, &Masking::default(), 100 + n as u64, alg);
        }
    }
}

#[test]
fn explicit_scale() {
    let m = Masking { scale: Some(0.37), ..Default::default() };
    check_case::<f32>(shape(1, 20, 33, 2, 2, 32), &m, 7, Algorithm::CPU);
}

#[test]
fn causal_both_alignments_with_unequal_lengths() {
    // sq > sk with bottom-right alignment leaves the first sq - sk rows with no key: O = 0, LSE = -inf.
    for s in [shape(2, 70, 45, 2, 1, 32), shape(1, 45, 150, 2, 2, 64), shape(1, 64, 64, 1, 1, 16)] {
        for top_left in [false, true] {
            let m = Masking { causal: true, top_left, ..Default::default() };
            for alg in ALGORITHMS {
                check_case::<f32>(s, &m, 11, alg);
            }
        }
    }
}

#[test]
fn sliding_windows_and_causal_window() {
    let windows = [(Some(3), Some(0)), (Some(5), Some(2)), (None, Some(4)), (Some(0), None), (Some(17), Some(9))];
    for s in [shape(1, 90, 140, 2, 1, 32), shape(2, 140, 90, 2, 2, 16)] {
        for top_left in [false, true] {
            for (wl, wr) in windows {
                let m = Masking { top_left, window_left: wl, window_right: wr, ..Default::default() };
                check_case::<f32>(s, &m, 21, Algorithm::CPU);
                check_case::<f32>(s, &m, 22, Algorithm::NAIVE);
            }
            // causal + a left window: the window (wl, 0), whatever window_right says.
            let m =
                Masking { causal: true, top_left, window_left: Some(10), window_right: Some(50), ..Default::default() };
            check_case::<f32>(s, &m, 23, Algorithm::CPU);
        }
    }
}

fn random_blocks(rng: &mut Rng, bm: usize, bn: usize, mb: usize, mh: usize, s: &Shape, density: f64) -> Masking {
    let (nq, nk) = (flash::num_blocks(s.sq, bm), flash::num_blocks(s.sk, bn));
    let map = rng.bools(mb * mh * nq * nk, density);
    Masking { blocks: Some((bm, bn, [mb, mh, nq, nk], map)), ..Default::default() }
}

#[test]
fn block_sparse_random_patterns_per_batch_and_head_and_broadcast() {
    let s = shape(2, 150, 300, 2, 1, 32);
    let mut rng = Rng(99);
    for (bm, bn) in [(64, 64), (64, 128), (128, 64), (128, 128)] {
        for (mb, mh) in [(2, 2), (1, 2), (2, 1), (1, 1)] {
            for density in [0.25, 0.6] {
                let m = random_blocks(&mut rng, bm, bn, mb, mh, &s, density);
                check_case::<f32>(s, &m, 31, Algorithm::CPU);
                check_case::<f32>(s, &m, 32, Algorithm::NAIVE);
            }
        }
    }
}

#[test]
fn block_sparse_composes_with_causal_and_windows() {
    let s = shape(1, 200, 260, 2, 2, 32);
    let mut rng = Rng(5);
    for top_left in [false, true] {
        let mut m = random_blocks(&mut rng, 64, 64, 1, 2, &s, 0.5);
        m.causal = true;
        m.top_left = top_left;
        check_case::<f32>(s, &m, 41, Algorithm::CPU);
        m.causal = false;
        m.window_left = Some(70);
        m.window_right = Some(30);
        check_case::<f32>(s, &m, 42, Algorithm::CPU);
    }
}

#[test]
fn all_dense_block_map_equals_no_mask_and_all_empty_gives_zeros() {
    let s = shape(1, 130, 200, 2, 2, 16);
    let (nq, nk) = (flash::num_blocks(s.sq, 64), flash::num_blocks(s.sk, 128));
    let dense = Masking { blocks: Some((64, 128, [1, 1, nq, nk], vec![true; nq * nk])), ..Default::default() };
    check_case::<f32>(s, &dense, 51, Algorithm::CPU);
    let empty = Masking { blocks: Some((64, 128, [1, 1, nq, nk], vec![false; nq * nk])), ..Default::default() };
    check_case::<f32>(s, &empty, 52, Algorithm::CPU);
    check_case::<f32>(s, &empty, 52, Algorithm::NAIVE);
}

#[test]
fn compact_form_is_taken_as_given() {
    // seqlen 128 / 64: 2 query blocks, 2 key blocks. Row 0 keeps key block 1 only, row 1 keeps {1, 0}.
    let s = shape(1, 128, 128, 1, 1, 8);
    let mask = BlockMask::from_compact(64, 64, [1, 1, 2], 2, vec![1, 2], vec![1, -7, 1, 0]).unwrap();
    let map = vec![false, true, true, true];
    let m = Masking { blocks: Some((64, 64, [1, 1, 2, 2], map)), ..Default::default() };
    let mut rng = Rng(3);
    let (q, k, v) = (rng.vec(s.q_len()), rng.vec(s.kv_len()), rng.vec(s.kv_len()));
    let (o_ref, _) = reference(&s, &m, &q, &k, &v);
    let f = |x: &Vec<f64>| x.iter().map(|&y| y as f32).collect::<Vec<_>>();
    let (q32, k32, v32) = (f(&q), f(&k), f(&v));
    let mut o = vec![f32::NAN; s.q_len()];
    Forward::new()
        .block_mask(&mask)
        .run(
            &Tensor::new(&q32, s.q()).unwrap(),
            &Tensor::new(&k32, s.kv()).unwrap(),
            &Tensor::new(&v32, s.kv()).unwrap(),
            &mut TensorMut::new(&mut o, s.q()).unwrap(),
        )
        .unwrap();
    let o: Vec<f64> = o.iter().map(|&x| x as f64).collect();
    assert!(max_abs_err(&o, &o_ref) < 2e-5);
}

#[test]
fn half_precision_dtypes() {
    for (n, s) in [shape(1, 77, 77, 2, 2, 64), shape(2, 33, 100, 4, 1, 128)].into_iter().enumerate() {
        for causal in [false, true] {
            let m = Masking { causal, ..Default::default() };
            for alg in [Algorithm::CPU, Algorithm::NAIVE] {
                let e16 = check_case::<f16>(s, &m, 61 + n as u64, alg);
                let eb16 = check_case::<bf16>(s, &m, 61 + n as u64, alg);
                eprintln!("{s:?} causal={causal} {alg}: fp16 {e16:.2e}, bf16 {eb16:.2e}");
            }
        }
    }
}

#[test]
fn strided_views_packed_qkv_and_padded_outputs() {
    // Q, K, V interleaved in one [b, s, 3, h, d] buffer (a fused QKV projection); O written into a
    // buffer with padding between rows and heads, which must stay untouched; LSE transposed.
    let (b, sl, h, d) = (2, 50, 3, 32);
    let s = shape(b, sl, sl, h, h, d);
    let mut rng = Rng(71);
    let qkv: Vec<f32> = rng.vec(b * sl * 3 * h * d).iter().map(|&x| x as f32).collect();
    let qkv_strides = [sl * 3 * h * d, 3 * h * d, d, 1];
    let view = |which: usize| Tensor::with_strides(&qkv[which * h * d..], [b, sl, h, d], qkv_strides).unwrap();
    let unpack = |which: usize| -> Vec<f64> {
        let mut out = Vec::with_capacity(b * sl * h * d);
        for bi in 0..b {
            for si in 0..sl {
                for hi in 0..h {
                    for di in 0..d {
                        out.push(qkv[bi * qkv_strides[0] + si * qkv_strides[1] + which * h * d + hi * d + di] as f64);
                    }
                }
            }
        }
        out
    };
    let m = Masking { causal: true, ..Default::default() };
    let (o_ref, lse_ref) = reference(&s, &m, &unpack(0), &unpack(1), &unpack(2));

    const PAD: f32 = 12345.0;
    let o_strides = [sl * h * (d + 5) + 3, h * (d + 5), d + 5, 1];
    let mut o = vec![PAD; b * o_strides[0]];
    let lse_strides = [1, b, b * h]; // [b, h, sq] stored as [sq, h, b]
    let mut lse = vec![f32::NAN; b * h * sl];
    Forward::new()
        .causal(true)
        .run_with_lse(
            &view(0),
            &view(1),
            &view(2),
            &mut TensorMut::with_strides(&mut o, [b, sl, h, d], o_strides).unwrap(),
            &mut TensorMut::with_strides(&mut lse, [b, h, sl], lse_strides).unwrap(),
        )
        .unwrap();
    let mut got = Vec::new();
    let mut written = vec![false; o.len()];
    for bi in 0..b {
        for si in 0..sl {
            for hi in 0..h {
                for di in 0..d {
                    let at = bi * o_strides[0] + si * o_strides[1] + hi * o_strides[2] + di;
                    written[at] = true;
                    got.push(o[at] as f64);
                }
            }
        }
    }
    assert!(max_abs_err(&got, &o_ref) < 2e-5);
    assert!(o.iter().zip(&written).all(|(&x, &w)| w || x == PAD), "padding was written");
    let mut got_lse = Vec::new();
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..sl {
                got_lse.push(lse[bi * lse_strides[0] + hi * lse_strides[1] + si * lse_strides[2]] as f64);
            }
        }
    }
    assert!(max_abs_err(&got_lse, &lse_ref) < 1e-4);
}

#[test]
fn broadcast_kv_over_batch_with_stride_zero() {
    let s = shape(3, 20, 40, 2, 2, 16);
    let mut rng = Rng(81);
    let one_k = rng.vec(s.kv_len() / 3);
    let one_v = rng.vec(s.kv_len() / 3);
    let q = rng.vec(s.q_len());
    let tile = |x: &Vec<f64>| x.iter().cycle().take(x.len() * 3).copied().collect::<Vec<_>>();
    let (o_ref, _) = reference(&s, &Masking::default(), &q, &tile(&one_k), &tile(&one_v));
    let f = |x: &Vec<f64>| x.iter().map(|&y| y as f32).collect::<Vec<_>>();
    let (q32, k32, v32) = (f(&q), f(&one_k), f(&one_v));
    let kv_strides = [0, 2 * 16, 16, 1];
    let mut o = vec![f32::NAN; s.q_len()];
    flash::forward(
        &Tensor::new(&q32, s.q()).unwrap(),
        &Tensor::with_strides(&k32, s.kv(), kv_strides).unwrap(),
        &Tensor::with_strides(&v32, s.kv(), kv_strides).unwrap(),
        &mut TensorMut::new(&mut o, s.q()).unwrap(),
    )
    .unwrap();
    let o: Vec<f64> = o.iter().map(|&x| x as f64).collect();
    assert!(max_abs_err(&o, &o_ref) < 2e-5);
}

#[test]
fn deterministic_flag_gives_bitwise_equal_runs() {
    let s = shape(1, 100, 100, 2, 2, 64);
    let mut rng = Rng(91);
    let q: Vec<f32> = rng.vec(s.q_len()).iter().map(|&x| x as f32).collect();
    let run = || {
        let mut o = vec![0f32; s.q_len()];
        let t = Tensor::new(&q, s.q()).unwrap();
        Forward::new().deterministic(true).run(&t, &t, &t, &mut TensorMut::new(&mut o, s.q()).unwrap()).unwrap();
        o
    };
    let (a, b) = (run(), run());
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
}
