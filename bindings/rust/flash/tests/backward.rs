//! Backward results (dQ, dK, dV) against an independent fp64 reference gradient written here from the
//! chain rule on the materialised softmax (nothing taken from the library: not its O, not its LSE; the
//! visibility rule is tests/common's). Every mask kind, seqlen_q != seqlen_k, GQA, empty rows, strided
//! views, all three dtypes, both CPU algorithms, determinism, and the error paths; then packed variable-length
//! batches (`Varlen`), each sequence against dense calls on it alone. Outputs are poisoned (NaN) before each run.

mod common;

use std::os::raw::c_void;

use common::{max_abs_err, reference, Masking, Rng, Shape};
use flash::half::{bf16, f16};
use flash::{
    Algorithm, Backward, BlockMask, DType, Device, Element, Error, ErrorKind, Forward, RawTensor, Stream, Tensor,
    TensorMut, Varlen,
};
use flash_sys as sys;

/// (dQ, dK, dV) in f64 for contiguous q [b, sq, hq, d], k, v [b, sk, hkv, d] and dO like q:
///   P = softmax(scale S + mask) per row, dV += P^T dO, dP = dO V^T, dS = P (dP - sum_j P dP),
///   dQ = scale dS K, dK += scale dS^T Q; dK, dV of a kv head summed over its query heads (GQA).
fn reference_grad(s: &Shape, m: &Masking, q: &[f64], k: &[f64], v: &[f64], d_o: &[f64]) -> [Vec<f64>; 3] {
    let scale = m.scale.unwrap_or(1.0 / (s.d as f64).sqrt());
    let (mut dq, mut dk, mut dv) = (vec![0.0; s.q_len()], vec![0.0; s.kv_len()], vec![0.0; s.kv_len()]);
    let group = s.hq / s.hkv;
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for b in 0..s.b {
        for h in 0..s.hq {
            let hk = h / group;
            for i in 0..s.sq {
                let qrow = ((b * s.sq + i) * s.hq + h) * s.d;
                let (qi, doi) = (&q[qrow..][..s.d], &d_o[qrow..][..s.d]);
                let krow = |j: usize| ((b * s.sk + j) * s.hkv + hk) * s.d;
                let seen: Vec<(usize, f64)> = (0..s.sk)
                    .filter(|&j| m.visible(s, b, h, i, j))
                    .map(|j| (j, scale * dot(qi, &k[krow(j)..][..s.d])))
                    .collect();
                if seen.is_empty() {
                    continue; // P = 0: no gradient from this row
                }
                let max = seen.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = seen.iter().map(|x| (x.1 - max).exp()).sum();
                let p: Vec<f64> = seen.iter().map(|x| (x.1 - max).exp() / sum).collect();
                let dp: Vec<f64> = seen.iter().map(|&(j, _)| dot(doi, &v[krow(j)..][..s.d])).collect();
                let row_d: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
                for (n, &(j, _)) in seen.iter().enumerate() {
                    let ds = p[n] * (dp[n] - row_d);
                    let kr = krow(j);
                    for x in 0..s.d {
                        dv[kr + x] += p[n] * doi[x];
                        dq[qrow + x] += scale * ds * k[kr + x];
                        dk[kr + x] += scale * ds * qi[x];
                    }
                }
            }
        }
    }
    [dq, dk, dv]
}

trait Elem: Element {
    /// Bound on each gradient, relative to its largest reference entry (floored at 1).
    const TOL: f64;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}
impl Elem for f32 {
    const TOL: f64 = 5e-5;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl Elem for f16 {
    const TOL: f64 = 6e-3;
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
}
impl Elem for bf16 {
    const TOL: f64 = 5e-2;
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}

fn options<'m>(m: &Masking, mask: Option<&'m BlockMask>) -> Forward<'m> {
    let mut f = Forward::new().causal(m.causal).alignment(m.alignment()).window(m.window_left, m.window_right);
    if let Some(s) = m.scale {
        f = f.scale(s as f32);
    }
    if let Some(mask) = mask {
        f = f.block_mask(mask);
    }
    f
}

struct Case<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    o: Vec<T>,
    d_o: Vec<T>,
    lse: Vec<f32>,
}

/// Fresh inputs, the library's forward (O and LSE), and dO.
fn setup<T: Elem>(s: Shape, m: &Masking, mask: Option<&BlockMask>, seed: u64) -> Case<T> {
    let mut rng = Rng(seed);
    let round = |x: Vec<f64>| -> Vec<T> { x.iter().map(|&v| T::from_f64(v)).collect() };
    let (q, k, v) = (round(rng.vec(s.q_len())), round(rng.vec(s.kv_len())), round(rng.vec(s.kv_len())));
    let d_o = round(rng.vec(s.q_len()));
    let mut o = vec![T::from_f64(f64::NAN); s.q_len()];
    let mut lse = vec![f32::NAN; s.b * s.hq * s.sq];
    options(m, mask)
        .run_with_lse(
            &Tensor::new(&q, s.q()).unwrap(),
            &Tensor::new(&k, s.kv()).unwrap(),
            &Tensor::new(&v, s.kv()).unwrap(),
            &mut TensorMut::new(&mut o, s.q()).unwrap(),
            &mut TensorMut::new(&mut lse, s.lse()).unwrap(),
        )
        .unwrap();
    Case { q, k, v, o, d_o, lse }
}

fn widen<T: Elem>(x: &[T]) -> Vec<f64> {
    x.iter().map(|&v| v.to_f64()).collect()
}

fn check_grads<T: Elem>(what: &str, got: [&[T]; 3], want: &[Vec<f64>; 3]) {
    for (name, (g, w)) in ["dq", "dk", "dv"].iter().zip(got.iter().zip(want)) {
        let bound = T::TOL * w.iter().fold(1.0f64, |a, x| a.max(x.abs()));
        let err = max_abs_err(&widen(g), w);
        assert!(err <= bound, "{what}: max |{name} - ref| = {err:e} > {bound:e}");
    }
}

/// Forward, backward on `alg` (poisoned outputs), and a check against the reference gradient.
fn check_case<T: Elem>(s: Shape, m: &Masking, seed: u64, alg: Algorithm) {
    let mask = m.blocks.as_ref().map(|(bm, bn, shape, map)| BlockMask::from_dense(*bm, *bn, *shape, map).unwrap());
    let c = setup::<T>(s, m, mask.as_ref(), seed);
    let want = reference_grad(&s, m, &widen(&c.q), &widen(&c.k), &widen(&c.v), &widen(&c.d_o));
    let nan = T::from_f64(f64::NAN);
    let (mut dq, mut dk, mut dv) = (vec![nan; s.q_len()], vec![nan; s.kv_len()], vec![nan; s.kv_len()]);
    let used = Backward::from(options(m, mask.as_ref()))
        .algorithm(alg)
        .run(
            &Tensor::new(&c.q, s.q()).unwrap(),
            &Tensor::new(&c.k, s.kv()).unwrap(),
            &Tensor::new(&c.v, s.kv()).unwrap(),
            &Tensor::new(&c.o, s.q()).unwrap(),
            &Tensor::new(&c.d_o, s.q()).unwrap(),
            &Tensor::new(&c.lse, s.lse()).unwrap(),
            &mut TensorMut::new(&mut dq, s.q()).unwrap(),
            &mut TensorMut::new(&mut dk, s.kv()).unwrap(),
            &mut TensorMut::new(&mut dv, s.kv()).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{s:?} {m:?} {alg}: {e}"));
    assert_eq!(used, if alg == Algorithm::AUTO { Algorithm::CPU } else { alg });
    check_grads(&format!("{s:?} {m:?} {alg}"), [&dq, &dk, &dv], &want);
}

fn shape(b: usize, sq: usize, sk: usize, hq: usize, hkv: usize, d: usize) -> Shape {
    Shape { b, sq, sk, hq, hkv, d }
}

const ALGORITHMS: [Algorithm; 3] = [Algorithm::AUTO, Algorithm::CPU, Algorithm::NAIVE];

#[test]
fn dense_fp32_odd_sizes_gqa_and_head_dims() {
    let shapes = [
        shape(1, 1, 1, 1, 1, 8),
        shape(2, 37, 53, 4, 2, 64),
        shape(1, 65, 130, 3, 1, 40),
        shape(1, 129, 64, 2, 2, 128),
        shape(1, 5, 150, 2, 1, 256),
    ];
    for (n, s) in shapes.into_iter().enumerate() {
        for alg in ALGORITHMS {
            check_case::<f32>(s, &Masking::default(), 200 + n as u64, alg);
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
    for s in [shape(1, 90, 140, 2, 1, 32), shape(1, 140, 90, 2, 2, 16)] {
        for top_left in [false, true] {
            for (wl, wr) in windows {
                let m = Masking { top_left, window_left: wl, window_right: wr, ..Default::default() };
                check_case::<f32>(s, &m, 21, Algorithm::CPU);
                check_case::<f32>(s, &m, 22, Algorithm::NAIVE);
            }
            let m = Masking { causal: true, top_left, window_left: Some(10), ..Default::default() };
            check_case::<f32>(s, &m, 23, Algorithm::CPU);
        }
    }
}

#[test]
fn block_sparse_patterns_alone_and_with_causal() {
    let s = shape(2, 150, 200, 2, 1, 32);
    let mut rng = Rng(99);
    for (bm, bn) in [(64, 64), (64, 128), (128, 64), (128, 128)] {
        for (mb, mh) in [(2, 2), (1, 1)] {
            let (nq, nk) = (flash::num_blocks(s.sq, bm), flash::num_blocks(s.sk, bn));
            let map = rng.bools(mb * mh * nq * nk, 0.5);
            let mut m = Masking { blocks: Some((bm, bn, [mb, mh, nq, nk], map)), ..Default::default() };
            check_case::<f32>(s, &m, 31, Algorithm::CPU);
            check_case::<f32>(s, &m, 32, Algorithm::NAIVE);
            m.causal = true;
            m.top_left = bm == 64;
            check_case::<f32>(s, &m, 33, Algorithm::CPU);
        }
    }
}

#[test]
fn half_precision() {
    let s = shape(1, 77, 90, 4, 2, 64);
    for m in [Masking::default(), Masking { causal: true, ..Default::default() }] {
        check_case::<f16>(s, &m, 41, Algorithm::CPU);
        check_case::<bf16>(s, &m, 42, Algorithm::CPU);
        check_case::<f16>(s, &m, 43, Algorithm::NAIVE);
    }
}

#[test]
fn rows_without_keys_get_zero_dq_and_unseen_keys_zero_dk_dv() {
    // Bottom-right causal, sq > sk: the first sq - sk rows see no key.
    let s = shape(1, 100, 30, 2, 2, 32);
    let m = Masking { causal: true, ..Default::default() };
    let c = setup::<f32>(s, &m, None, 51);
    let t = |x| Tensor::new(x, s.q()).unwrap();
    let tk = |x| Tensor::new(x, s.kv()).unwrap();
    let g = Backward::from(options(&m, None))
        .compute(&t(&c.q), &tk(&c.k), &tk(&c.v), &t(&c.o), &t(&c.d_o), &Tensor::new(&c.lse, s.lse()).unwrap())
        .unwrap();
    assert!(g.dq[..70 * 2 * 32].iter().all(|&x| x == 0.0));
    // Top-left causal, sk > sq: keys past sq are seen by no query.
    let s = shape(1, 30, 100, 2, 2, 32);
    let m = Masking { causal: true, top_left: true, ..Default::default() };
    let c = setup::<f32>(s, &m, None, 52);
    let t = |x| Tensor::new(x, s.q()).unwrap();
    let tk = |x| Tensor::new(x, s.kv()).unwrap();
    let g = options(&m, None)
        .backward()
        .compute(&t(&c.q), &tk(&c.k), &tk(&c.v), &t(&c.o), &t(&c.d_o), &Tensor::new(&c.lse, s.lse()).unwrap())
        .unwrap();
    assert!(g.dk[30 * 2 * 32..].iter().all(|&x| x == 0.0) && g.dv[30 * 2 * 32..].iter().all(|&x| x == 0.0));
    let want = reference_grad(&s, &m, &widen(&c.q), &widen(&c.k), &widen(&c.v), &widen(&c.d_o));
    check_grads("compute", [&g.dq, &g.dk, &g.dv], &want);
}

#[test]
fn strided_inputs_and_outputs() {
    // q: every other row of a [1, 2*sq, hq, d] buffer; k, v: views into a packed [1, sk, 2, hkv, d] buffer;
    // dq written in the [b, h, s, d] layout; dk, dv into the first half of wider rows.
    let (sq, sk, hq, hkv, d) = (40, 60, 4, 2, 32);
    let s = shape(1, sq, sk, hq, hkv, d);
    let mut rng = Rng(61);
    let qbuf: Vec<f32> = rng.vec(2 * sq * hq * d).iter().map(|&x| x as f32).collect();
    let kv: Vec<f32> = rng.vec(sk * 2 * hkv * d).iter().map(|&x| x as f32).collect();
    let q = Tensor::with_strides(&qbuf, s.q(), [2 * sq * hq * d, 2 * hq * d, d, 1]).unwrap();
    let kvs = [sk * 2 * hkv * d, 2 * hkv * d, d, 1];
    let k = Tensor::with_strides(&kv, s.kv(), kvs).unwrap();
    let v = Tensor::with_strides(&kv[hkv * d..], s.kv(), kvs).unwrap();
    let m = Masking { causal: true, ..Default::default() };
    let (mut o, mut lse) = (vec![0f32; s.q_len()], vec![0f32; hq * sq]);
    let f = options(&m, None);
    f.run_with_lse(
        &q,
        &k,
        &v,
        &mut TensorMut::new(&mut o, s.q()).unwrap(),
        &mut TensorMut::new(&mut lse, s.lse()).unwrap(),
    )
    .unwrap();
    let d_o: Vec<f32> = rng.vec(s.q_len()).iter().map(|&x| x as f32).collect();
    let mut dq = vec![f32::NAN; s.q_len()];
    let mut dk = vec![f32::NAN; 2 * s.kv_len()];
    let mut dv = vec![f32::NAN; 2 * s.kv_len()];
    Backward::from(f)
        .run(
            &q,
            &k,
            &v,
            &Tensor::new(&o, s.q()).unwrap(),
            &Tensor::new(&d_o, s.q()).unwrap(),
            &Tensor::new(&lse, s.lse()).unwrap(),
            &mut TensorMut::with_strides(&mut dq, s.q(), [sq * hq * d, d, sq * d, 1]).unwrap(),
            &mut TensorMut::with_strides(&mut dk, s.kv(), [sk * hkv * 2 * d, hkv * 2 * d, 2 * d, 1]).unwrap(),
            &mut TensorMut::with_strides(&mut dv, s.kv(), [2 * sk * hkv * d, 2 * hkv * d, d, 1]).unwrap(),
        )
        .unwrap();
    // Gather everything back into contiguous layouts for the reference.
    let gather = |data: &[f32], shp: [usize; 4], st: [usize; 4]| -> Vec<f64> {
        let mut out = Vec::with_capacity(shp.iter().product());
        for a in 0..shp[0] {
            for b in 0..shp[1] {
                for c in 0..shp[2] {
                    for e in 0..shp[3] {
                        out.push(data[a * st[0] + b * st[1] + c * st[2] + e * st[3]] as f64);
                    }
                }
            }
        }
        out
    };
    let want = reference_grad(
        &s,
        &m,
        &gather(&qbuf, s.q(), q.strides()),
        &gather(&kv, s.kv(), kvs),
        &gather(&kv[hkv * d..], s.kv(), kvs),
        &widen(&d_o),
    );
    let got_dq = gather(&dq, s.q(), [sq * hq * d, d, sq * d, 1]);
    let got_dk = gather(&dk, s.kv(), [sk * hkv * 2 * d, hkv * 2 * d, 2 * d, 1]);
    let got_dv = gather(&dv, s.kv(), [2 * sk * hkv * d, 2 * hkv * d, d, 1]);
    for (name, g, w) in [("dq", got_dq, &want[0]), ("dk", got_dk, &want[1]), ("dv", got_dv, &want[2])] {
        let err = max_abs_err(&g, w);
        assert!(err <= f32::TOL * w.iter().fold(1.0f64, |a, x| a.max(x.abs())), "{name}: {err:e}");
    }
}

#[test]
fn deterministic_bitwise_equal_across_three_runs() {
    let s = shape(2, 300, 333, 8, 2, 64);
    let m = Masking { causal: true, ..Default::default() };
    let c = setup::<f32>(s, &m, None, 71);
    for alg in ALGORITHMS {
        let b = Backward::from(options(&m, None)).algorithm(alg).deterministic(true);
        let runs: Vec<_> = (0..3)
            .map(|_| {
                b.compute(
                    &Tensor::new(&c.q, s.q()).unwrap(),
                    &Tensor::new(&c.k, s.kv()).unwrap(),
                    &Tensor::new(&c.v, s.kv()).unwrap(),
                    &Tensor::new(&c.o, s.q()).unwrap(),
                    &Tensor::new(&c.d_o, s.q()).unwrap(),
                    &Tensor::new(&c.lse, s.lse()).unwrap(),
                )
                .unwrap()
            })
            .collect();
        let bits = |g: &flash::Gradients<f32>| -> Vec<u32> {
            g.dq.iter().chain(&g.dk).chain(&g.dv).map(|x| x.to_bits()).collect()
        };
        assert!(runs[1..].iter().all(|r| bits(r) == bits(&runs[0])), "{alg}");
    }
}

#[test]
fn backward_options_mirror_forward_and_reference_forward_agrees() {
    // The reference forward of tests/common and the library's O agree (the backward's inputs are sane).
    let s = shape(1, 33, 47, 2, 1, 16);
    let m = Masking { window_left: Some(4), window_right: Some(4), ..Default::default() };
    let c = setup::<f32>(s, &m, None, 81);
    let (o_ref, _) = reference(&s, &m, &widen(&c.q), &widen(&c.k), &widen(&c.v));
    assert!(max_abs_err(&widen(&c.o), &o_ref) < 2e-5);
    let b = Backward::new().window(Some(4), Some(4)).scale(0.0).alignment(flash::Alignment::BottomRight);
    let f = b.options();
    let t = |x| Tensor::new(x, s.q()).unwrap();
    let tk = |x| Tensor::new(x, s.kv()).unwrap();
    let lse = Tensor::new(&c.lse, s.lse()).unwrap();
    let g1 = b.compute(&t(&c.q), &tk(&c.k), &tk(&c.v), &t(&c.o), &t(&c.d_o), &lse).unwrap();
    let g2 = f.backward().compute(&t(&c.q), &tk(&c.k), &tk(&c.v), &t(&c.o), &t(&c.d_o), &lse).unwrap();
    assert_eq!(g1, g2);
}

// ---- Errors ----------------------------------------------------------------------------------------------

fn assert_error(e: Error, kind: ErrorKind, code: i32, message: &str) {
    assert_eq!(e.kind(), kind, "{e}");
    assert_eq!(e.code(), code, "{e}");
    assert!(e.message().contains(message), "message {:?} lacks {message:?}", e.message());
}

/// A backward on host tensors q [1, sq, hq, d], k, v [1, sk, hkv, d], with dO [1, sq_do, hq, d] and the
/// LSE [1, hq, sq_lse].
#[allow(clippy::too_many_arguments)]
fn host_backward(
    b: Backward<'_>,
    sq: usize,
    sk: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    sq_do: usize,
    sq_lse: usize,
) -> flash::Result<Algorithm> {
    let q = vec![0.5f32; sq * hq * d];
    let kv = vec![0.25f32; sk * hkv * d];
    let d_o = vec![1f32; sq_do * hq * d];
    let lse = vec![0f32; hq * sq_lse];
    let (mut dq, mut dk, mut dv) = (vec![0f32; q.len()], vec![0f32; kv.len()], vec![0f32; kv.len()]);
    b.run(
        &Tensor::new(&q, [1, sq, hq, d])?,
        &Tensor::new(&kv, [1, sk, hkv, d])?,
        &Tensor::new(&kv, [1, sk, hkv, d])?,
        &Tensor::new(&q, [1, sq, hq, d])?,
        &Tensor::new(&d_o, [1, sq_do, hq, d])?,
        &Tensor::new(&lse, [1, hq, sq_lse])?,
        &mut TensorMut::new(&mut dq, [1, sq, hq, d])?,
        &mut TensorMut::new(&mut dk, [1, sk, hkv, d])?,
        &mut TensorMut::new(&mut dv, [1, sk, hkv, d])?,
    )
}

#[test]
fn error_shapes() {
    let e = host_backward(Backward::new(), 8, 8, 2, 1, 16, 4, 8).unwrap_err();
    assert_error(e, ErrorKind::BadShape, sys::FLASH_ERROR_BAD_SHAPE, "d_o.shape[1] is 4 but q.shape[1] is 8");
    let e = host_backward(Backward::new(), 8, 8, 2, 1, 16, 8, 5).unwrap_err();
    assert_error(e, ErrorKind::BadShape, sys::FLASH_ERROR_BAD_SHAPE, "lse.shape[2] is 5 but q.shape[1] is 8");
    let e = host_backward(Backward::new(), 8, 8, 3, 2, 16, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::BadShape, sys::FLASH_ERROR_BAD_SHAPE, "not a multiple of k.shape[2] (heads_kv) 2");
    let e = host_backward(Backward::new(), 8, 8, 2, 1, 12, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::UnsupportedHeadDim, sys::FLASH_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim");
}

#[test]
fn error_options() {
    let e = host_backward(Backward::new().scale(f32::NAN), 8, 8, 1, 1, 8, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::InvalidArgument, sys::FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is not finite");
    let e = host_backward(Backward::new().algorithm(Algorithm::from_raw(99)), 8, 8, 1, 1, 8, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::InvalidArgument, sys::FLASH_ERROR_INVALID_ARGUMENT, "algorithm is 99");
    let e = host_backward(Backward::new().window(Some(1 << 31), None), 8, 8, 1, 1, 8, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::BadMask, sys::FLASH_ERROR_BAD_MASK, "window_left is 2147483648");
    for alg in [Algorithm::SM80, Algorithm::SM90] {
        let e = host_backward(Backward::new().algorithm(alg), 8, 8, 1, 1, 8, 8, 8).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlgorithmUnavailable, "{e}");
    }
    let mask = BlockMask::from_dense(64, 64, [2, 1, 1, 1], &[true, true]).unwrap();
    let e = host_backward(Backward::new().block_mask(&mask), 8, 8, 1, 1, 8, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::BadMask, sys::FLASH_ERROR_BAD_MASK, "block_mask has batch 2");
}

fn raw_host<T>(data: &mut [T], dtype: DType, shape: [usize; 4]) -> RawTensor {
    // Safety: `data` is a live host allocation holding the whole (contiguous) shape for each test's call.
    unsafe {
        RawTensor::from_raw_parts(
            data.as_mut_ptr() as *mut c_void,
            dtype,
            Device::Cpu,
            shape,
            flash::contiguous_strides(shape),
        )
    }
    .unwrap()
}

fn raw_lse(data: &mut [f32], shape: [usize; 3]) -> RawTensor {
    // Safety: as raw_host.
    unsafe {
        RawTensor::from_raw_parts(
            data.as_mut_ptr() as *mut c_void,
            DType::Fp32,
            Device::Cpu,
            shape,
            flash::contiguous_strides(shape),
        )
    }
    .unwrap()
}

#[test]
fn error_raw_dtypes_overlaps_and_workspace_query() {
    let s = [1, 8, 1, 8];
    let (mut q, mut k, mut v, mut o, mut d_o) =
        (vec![0.1f32; 64], vec![0.2f32; 64], vec![0.3f32; 64], vec![0f32; 64], vec![1f32; 64]);
    let mut lse = vec![0f32; 8];
    let mut grads = vec![0f32; 3 * 64];
    let mut half_do = vec![0u16; 64];
    let (gq, rest) = grads.split_at_mut(64);
    let (gk, gv) = rest.split_at_mut(64);
    let (rq, rk, rv, ro, rdo) = (
        raw_host(&mut q, DType::Fp32, s),
        raw_host(&mut k, DType::Fp32, s),
        raw_host(&mut v, DType::Fp32, s),
        raw_host(&mut o, DType::Fp32, s),
        raw_host(&mut d_o, DType::Fp32, s),
    );
    let rl = raw_lse(&mut lse, [1, 1, 8]);
    let (dq, dk, dv) = (raw_host(gq, DType::Fp32, s), raw_host(gk, DType::Fp32, s), raw_host(gv, DType::Fp32, s));

    let n = Backward::new().workspace_size_raw(&rq, &rk, &rv, &ro, &rdo, &rl, &dq, &dk, &dv).unwrap();
    assert!(n < (1 << 30));
    let used = Backward::new().run_raw(&rq, &rk, &rv, &ro, &rdo, &rl, &dq, &dk, &dv, Stream::default()).unwrap();
    assert_eq!(used, Algorithm::CPU);

    let hdo = raw_host(&mut half_do, DType::Fp16, s);
    let e = Backward::new().run_raw(&rq, &rk, &rv, &ro, &hdo, &rl, &dq, &dk, &dv, Stream::default()).unwrap_err();
    assert_error(e, ErrorKind::DtypeMismatch, sys::FLASH_ERROR_DTYPE_MISMATCH, "d_o.dtype is fp16 but q.dtype is fp32");
    let e = Backward::new().run_raw(&rq, &rk, &rv, &ro, &rdo, &rl, &rq, &dk, &dv, Stream::default()).unwrap_err();
    assert_error(e, ErrorKind::InvalidArgument, sys::FLASH_ERROR_INVALID_ARGUMENT, "dq overlaps q in memory");
    let e = Backward::new().run_raw(&rq, &rk, &rv, &ro, &rdo, &rl, &dq, &dk, &dk, Stream::default()).unwrap_err();
    assert_error(e, ErrorKind::InvalidArgument, sys::FLASH_ERROR_INVALID_ARGUMENT, "dv overlaps dk in memory");
    // The LSE must be fp32: a 4-d fp32 tensor in its place is refused by rank.
    let e = Backward::new().run_raw(&rq, &rk, &rv, &ro, &rdo, &rq, &dq, &dk, &dv, Stream::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadShape, "{e}");
    // A null data pointer.
    let null = unsafe {
        RawTensor::from_raw_parts(std::ptr::null_mut(), DType::Fp32, Device::Cpu, s, flash::contiguous_strides(s))
    }
    .unwrap();
    let e = Backward::new().run_raw(&rq, &rk, &rv, &ro, &rdo, &rl, &null, &dk, &dv, Stream::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NullPointer, "{e}");
}

// ---- Packed variable-length batches (Varlen): forward and backward ----------------------------------------------
// Every sequence's rows of O, the LSE and dQ, and its slot's rows of dK and dV, are bitwise those of dense calls of
// batch 1 on that sequence alone (the cpu and naive algorithms run each sequence exactly as that call); the dense
// calls are checked against the f64 references. Rows past the last offsets hold NaN on input (never read) and in the
// poisoned outputs (never written); a slot's keys past seqused_k get dK = dV = 0.

fn offsets(lens: &[usize]) -> Vec<i32> {
    let mut cu = vec![0i32];
    for &l in lens {
        cu.push(cu.last().unwrap() + l as i32);
    }
    cu
}

fn same_bits<T: Elem>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_f64().to_bits(), w.to_f64().to_bits(), "{what}: element {i}: {} vs {}", g.to_f64(), w.to_f64());
    }
}

/// Rows `rows` of a packed [total, h, d] buffer, densely packed (a sequence's part).
fn rows_of<T: Copy>(x: &[T], rows: std::ops::Range<usize>, h: usize, d: usize) -> Vec<T> {
    x[rows.start * h * d..rows.end * h * d].to_vec()
}

struct VarlenSpec<'a> {
    lens_q: &'a [usize],
    lens_k: &'a [usize],
    used: Option<&'a [i32]>,
    hq: usize,
    hkv: usize,
    d: usize,
}

const TAIL_Q: usize = 2;
const TAIL_K: usize = 3;

/// Packed forward and backward of `spec` under `m` on `alg`, each sequence checked as the section comment says.
/// Returns (o, lse, dq, dk, dv) of the packed call.
#[allow(clippy::type_complexity)]
fn check_varlen<T: Elem>(spec: &VarlenSpec<'_>, m: &Masking, alg: Algorithm, seed: u64) -> [Vec<f64>; 5] {
    let (hq, hkv, d) = (spec.hq, spec.hkv, spec.d);
    let (cu_q, cu_k) = (offsets(spec.lens_q), offsets(spec.lens_k));
    let (tq, tk) = (*cu_q.last().unwrap() as usize, *cu_k.last().unwrap() as usize);
    let (nq, nk) = (tq + TAIL_Q, tk + TAIL_K);
    let mut rng = Rng(seed);
    let nan = T::from_f64(f64::NAN);
    let mut fill = |n: usize, valid: usize| -> Vec<T> {
        (0..n).map(|i| if i < valid { T::from_f64(rng.uniform()) } else { nan }).collect()
    };
    let (q, k, v) =
        (fill(nq * hq * d, tq * hq * d), fill(nk * hkv * d, tk * hkv * d), fill(nk * hkv * d, tk * hkv * d));
    let d_o = fill(nq * hq * d, tq * hq * d);
    let mut seqlens = Varlen::new(&cu_q, &cu_k).unwrap();
    if let Some(used) = spec.used {
        seqlens = seqlens.seqused_k(used).unwrap();
    }
    let fwd = options(m, None).algorithm(alg);
    let (mut o, mut lse) = (vec![nan; nq * hq * d], vec![f32::NAN; hq * nq]);
    let (qs, ks) = ([nq, hq, d], [nk, hkv, d]);
    let used_alg = fwd
        .run_varlen(
            &Tensor::new(&q, qs).unwrap(),
            &Tensor::new(&k, ks).unwrap(),
            &Tensor::new(&v, ks).unwrap(),
            &seqlens,
            &mut TensorMut::new(&mut o, qs).unwrap(),
            Some(&mut TensorMut::new(&mut lse, [hq, nq]).unwrap()),
        )
        .unwrap_or_else(|e| panic!("{m:?} {alg}: {e}"));
    assert_eq!(used_alg, if alg == Algorithm::AUTO { Algorithm::CPU } else { alg });
    let (mut dq, mut dk, mut dv) = (vec![nan; nq * hq * d], vec![nan; nk * hkv * d], vec![nan; nk * hkv * d]);
    Backward::from(fwd)
        .run_varlen(
            &Tensor::new(&q, qs).unwrap(),
            &Tensor::new(&k, ks).unwrap(),
            &Tensor::new(&v, ks).unwrap(),
            &Tensor::new(&o, qs).unwrap(),
            &Tensor::new(&d_o, qs).unwrap(),
            &Tensor::new(&lse, [hq, nq]).unwrap(),
            &seqlens,
            &mut TensorMut::new(&mut dq, qs).unwrap(),
            &mut TensorMut::new(&mut dk, ks).unwrap(),
            &mut TensorMut::new(&mut dv, ks).unwrap(),
        )
        .unwrap_or_else(|e| panic!("backward {m:?} {alg}: {e}"));
    let zero_rows = |x: &[T], r: std::ops::Range<usize>, h: usize, what: &str| {
        assert!(x[r.start * h * d..r.end * h * d].iter().all(|e| e.to_f64() == 0.0), "{what} not 0");
    };
    for i in 0..spec.lens_q.len() {
        let rows = cu_q[i] as usize..cu_q[i + 1] as usize;
        let sk = spec.used.map_or(spec.lens_k[i], |u| u[i] as usize);
        let keys = cu_k[i] as usize..cu_k[i] as usize + sk;
        zero_rows(&dk, keys.end..cu_k[i + 1] as usize, hkv, "dk past seqused_k");
        zero_rows(&dv, keys.end..cu_k[i + 1] as usize, hkv, "dv past seqused_k");
        let what = format!("{m:?} {alg} sequence {i} ({} queries, {sk} keys)", rows.len());
        if rows.is_empty() {
            zero_rows(&dk, keys.clone(), hkv, &what);
            zero_rows(&dv, keys, hkv, &what);
            continue;
        }
        if sk == 0 {
            zero_rows(&o, rows.clone(), hq, &what);
            zero_rows(&dq, rows.clone(), hq, &what);
            assert!((0..hq).all(|h| rows.clone().all(|r| lse[h * nq + r] == f32::NEG_INFINITY)), "{what}: lse");
            continue;
        }
        let s = shape(1, rows.len(), sk, hq, hkv, d);
        let (qi, ki, vi, doi) = (
            rows_of(&q, rows.clone(), hq, d),
            rows_of(&k, keys.clone(), hkv, d),
            rows_of(&v, keys.clone(), hkv, d),
            rows_of(&d_o, rows.clone(), hq, d),
        );
        let (mut od, mut ld) = (vec![nan; s.q_len()], vec![f32::NAN; hq * s.sq]);
        fwd.run_with_lse(
            &Tensor::new(&qi, s.q()).unwrap(),
            &Tensor::new(&ki, s.kv()).unwrap(),
            &Tensor::new(&vi, s.kv()).unwrap(),
            &mut TensorMut::new(&mut od, s.q()).unwrap(),
            &mut TensorMut::new(&mut ld, s.lse()).unwrap(),
        )
        .unwrap();
        let g = Backward::from(fwd)
            .compute(
                &Tensor::new(&qi, s.q()).unwrap(),
                &Tensor::new(&ki, s.kv()).unwrap(),
                &Tensor::new(&vi, s.kv()).unwrap(),
                &Tensor::new(&od, s.q()).unwrap(),
                &Tensor::new(&doi, s.q()).unwrap(),
                &Tensor::new(&ld, s.lse()).unwrap(),
            )
            .unwrap();
        same_bits(&rows_of(&o, rows.clone(), hq, d), &od, &format!("{what}: o"));
        for h in 0..hq {
            let packed: Vec<f32> = rows.clone().map(|r| lse[h * nq + r]).collect();
            same_bits(&packed, &ld[h * s.sq..(h + 1) * s.sq], &format!("{what}: lse head {h}"));
        }
        same_bits(&rows_of(&dq, rows.clone(), hq, d), &g.dq, &format!("{what}: dq"));
        same_bits(&rows_of(&dk, keys.clone(), hkv, d), &g.dk, &format!("{what}: dk"));
        same_bits(&rows_of(&dv, keys.clone(), hkv, d), &g.dv, &format!("{what}: dv"));
        // The dense calls against the references.
        let (ro, _) = reference(&s, m, &widen(&qi), &widen(&ki), &widen(&vi));
        let bound = T::TOL * ro.iter().fold(1.0f64, |a, x| a.max(x.abs()));
        assert!(max_abs_err(&widen(&od), &ro) <= bound, "{what}: o against the reference");
        let want = reference_grad(&s, m, &widen(&qi), &widen(&ki), &widen(&vi), &widen(&doi));
        check_grads(&what, [&g.dq, &g.dk, &g.dv], &want);
    }
    // Outside every sequence: not written.
    assert!(o[tq * hq * d..].iter().chain(&dq[tq * hq * d..]).all(|x| x.to_f64().is_nan()), "rows past cu_seqlens_q");
    assert!((0..hq).all(|h| lse[h * nq + tq..(h + 1) * nq].iter().all(|x| x.is_nan())), "lse past cu_seqlens_q");
    assert!(
        dk[tk * hkv * d..].iter().chain(&dv[tk * hkv * d..]).all(|x| x.to_f64().is_nan()),
        "rows past cu_seqlens_k"
    );
    [widen(&o), lse.iter().map(|&x| x as f64).collect(), widen(&dq), widen(&dk), widen(&dv)]
}

#[test]
fn varlen_lengths_zero_one_and_odd_gqa() {
    let spec = VarlenSpec {
        lens_q: &[0, 1, 5, 1, 33, 0, 17, 1],
        lens_k: &[3, 1, 0, 9, 20, 0, 17, 40],
        used: None,
        hq: 4,
        hkv: 2,
        d: 40,
    };
    for (n, causal) in [false, true].into_iter().enumerate() {
        let m = Masking { causal, ..Default::default() };
        for alg in ALGORITHMS {
            check_varlen::<f32>(&spec, &m, alg, 720 + n as u64);
        }
    }
    let mqa = VarlenSpec { lens_q: &[7, 0, 12], lens_k: &[5, 13, 12], used: None, hq: 3, hkv: 1, d: 64 };
    check_varlen::<f32>(&mqa, &Masking { causal: true, scale: Some(0.3), ..Default::default() }, Algorithm::CPU, 7);
}

#[test]
fn varlen_masks_per_sequence() {
    let spec = VarlenSpec { lens_q: &[9, 30, 1, 12], lens_k: &[30, 9, 12, 1], used: None, hq: 2, hkv: 1, d: 16 };
    for top_left in [false, true] {
        for (l, r) in [(None, None), (Some(0), Some(0)), (Some(4), None), (None, Some(3)), (Some(6), Some(2))] {
            for causal in [false, true] {
                let m = Masking { causal, top_left, window_left: l, window_right: r, ..Default::default() };
                check_varlen::<f32>(&spec, &m, Algorithm::CPU, 31);
            }
        }
    }
}

#[test]
fn varlen_seqused_k() {
    let used = [10, 0, 3, 2];
    let spec = VarlenSpec { lens_q: &[4, 1, 7, 0], lens_k: &[10, 6, 8, 5], used: Some(&used), hq: 4, hkv: 1, d: 24 };
    check_varlen::<f32>(&spec, &Masking { causal: true, ..Default::default() }, Algorithm::CPU, 5);
    let m = Masking { window_left: Some(2), window_right: Some(1), ..Default::default() };
    check_varlen::<f32>(&spec, &m, Algorithm::NAIVE, 6);
    // max_seqlen_k follows seqused_k unless given.
    let (cu_q, cu_k) = (offsets(spec.lens_q), offsets(spec.lens_k));
    let vl = Varlen::new(&cu_q, &cu_k).unwrap();
    assert_eq!((vl.batch(), vl.max_seqlen_q(), vl.max_seqlen_k()), (4, 7, 10));
    assert_eq!(vl.seqused_k(&[1, 2, 3, 4]).unwrap().max_seqlen_k(), 4);
    let given = vl.max_seqlen(50, 60).unwrap().seqused_k(&used).unwrap();
    assert_eq!((given.max_seqlen_q(), given.max_seqlen_k()), (50, 60));
}

#[test]
fn varlen_half_precision() {
    let spec = VarlenSpec { lens_q: &[9, 0, 20, 1], lens_k: &[9, 3, 25, 1], used: None, hq: 2, hkv: 2, d: 32 };
    let m = Masking { causal: true, ..Default::default() };
    check_varlen::<f16>(&spec, &m, Algorithm::CPU, 8);
    check_varlen::<bf16>(&spec, &m, Algorithm::CPU, 9);
}

#[test]
fn varlen_deterministic_compute_and_raw_agree() {
    let spec = VarlenSpec { lens_q: &[40, 3, 77], lens_k: &[90, 3, 20], used: None, hq: 8, hkv: 2, d: 64 };
    let m = Masking { causal: true, ..Default::default() };
    let runs: Vec<_> = (0..3).map(|_| check_varlen::<f32>(&spec, &m, Algorithm::CPU, 13)).collect();
    for r in &runs[1..] {
        for (a, b) in runs[0].iter().zip(r) {
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "run to run");
        }
    }
    // compute_varlen (zero-filled results) and run_varlen_raw (host memory through raw pointers) give the same bits.
    let (cu_q, cu_k) = (offsets(spec.lens_q), offsets(spec.lens_k));
    let (tq, tk, hq, hkv, d) = (120usize, 113usize, 8usize, 2usize, 64usize);
    let mut rng = Rng(99);
    let mut q: Vec<f32> = rng.vec(tq * hq * d).iter().map(|&x| x as f32).collect();
    let mut k: Vec<f32> = rng.vec(tk * hkv * d).iter().map(|&x| x as f32).collect();
    let mut v: Vec<f32> = rng.vec(tk * hkv * d).iter().map(|&x| x as f32).collect();
    let mut d_o: Vec<f32> = rng.vec(tq * hq * d).iter().map(|&x| x as f32).collect();
    let vl = Varlen::new(&cu_q, &cu_k).unwrap();
    let fwd = Forward::new().causal(true);
    let (mut o, mut lse) = (vec![0f32; tq * hq * d], vec![0f32; hq * tq]);
    fwd.run_varlen(
        &Tensor::new(&q, [tq, hq, d]).unwrap(),
        &Tensor::new(&k, [tk, hkv, d]).unwrap(),
        &Tensor::new(&v, [tk, hkv, d]).unwrap(),
        &vl,
        &mut TensorMut::new(&mut o, [tq, hq, d]).unwrap(),
        Some(&mut TensorMut::new(&mut lse, [hq, tq]).unwrap()),
    )
    .unwrap();
    let g = fwd
        .backward()
        .compute_varlen(
            &Tensor::new(&q, [tq, hq, d]).unwrap(),
            &Tensor::new(&k, [tk, hkv, d]).unwrap(),
            &Tensor::new(&v, [tk, hkv, d]).unwrap(),
            &Tensor::new(&o, [tq, hq, d]).unwrap(),
            &Tensor::new(&d_o, [tq, hq, d]).unwrap(),
            &Tensor::new(&lse, [hq, tq]).unwrap(),
            &vl,
        )
        .unwrap();
    assert_eq!(g.algorithm, Algorithm::CPU);
    let raw3 = |x: &mut [f32], shape: [usize; 3]| -> RawTensor {
        // Safety: live host allocations holding the whole contiguous shape, for the calls below.
        unsafe {
            RawTensor::from_raw_parts(
                x.as_mut_ptr() as *mut c_void,
                DType::Fp32,
                Device::Cpu,
                shape,
                flash::contiguous_strides(shape),
            )
        }
        .unwrap()
    };
    let raw2 = |x: &mut [f32], shape: [usize; 2]| -> RawTensor {
        // Safety: as raw3.
        unsafe {
            RawTensor::from_raw_parts(
                x.as_mut_ptr() as *mut c_void,
                DType::Fp32,
                Device::Cpu,
                shape,
                flash::contiguous_strides(shape),
            )
        }
        .unwrap()
    };
    // Safety: the offsets are live host slices of batch + 1 entries for the calls below.
    let raw_vl = unsafe {
        Varlen::from_raw_parts(Device::Cpu, 3, cu_q.as_ptr(), cu_k.as_ptr(), std::ptr::null(), 77, 90).unwrap()
    };
    let (mut o2, mut lse2) = (vec![f32::NAN; o.len()], vec![f32::NAN; lse.len()]);
    let (rq, rk, rv) = (raw3(&mut q, [tq, hq, d]), raw3(&mut k, [tk, hkv, d]), raw3(&mut v, [tk, hkv, d]));
    let (ro2, rl2) = (raw3(&mut o2, [tq, hq, d]), raw2(&mut lse2, [hq, tq]));
    assert_eq!(fwd.workspace_size_varlen_raw(&rq, &rk, &rv, &raw_vl, &ro2, Some(&rl2)).unwrap(), 0);
    fwd.run_varlen_raw(&rq, &rk, &rv, &raw_vl, &ro2, Some(&rl2), Stream::legacy_default()).unwrap();
    assert!(o.iter().zip(&o2).all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(lse.iter().zip(&lse2).all(|(a, b)| a.to_bits() == b.to_bits()));
    let (mut dq, mut dk, mut dv) =
        (vec![f32::NAN; tq * hq * d], vec![f32::NAN; tk * hkv * d], vec![f32::NAN; tk * hkv * d]);
    let (ro, rdo, rl) = (raw3(&mut o, [tq, hq, d]), raw3(&mut d_o, [tq, hq, d]), raw2(&mut lse, [hq, tq]));
    let (rdq, rdk, rdv) = (raw3(&mut dq, [tq, hq, d]), raw3(&mut dk, [tk, hkv, d]), raw3(&mut dv, [tk, hkv, d]));
    fwd.backward()
        .run_varlen_raw(&rq, &rk, &rv, &ro, &rdo, &rl, &raw_vl, &rdq, &rdk, &rdv, Stream::legacy_default())
        .unwrap();
    for (a, b) in [(&g.dq, &dq), (&g.dk, &dk), (&g.dv, &dv)] {
        assert!(a.iter().zip(b.iter()).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}
