//! KV-cache attention (`KvcacheForward`) and `combine` on host slices, against an independent f64 reference
//! written here from flash.h's definitions (the addressing of contiguous and paged caches, the append, the
//! bottom-right mask per sequence, the combine formula).
//!
//! Every case draws fresh random inputs. Cache slots no query may see hold NaN (a stray read would show in O;
//! the append's targets are NaN too), outputs are poisoned with NaN, and after the call the caches must equal
//! the expected caches bit for bit: the appended rows in their slots, nothing else touched.
//!
//! Bounds:
//! - f32: the cpu algorithm accumulates fp32 inputs in double and rounds O and the LSE once to fp32
//!   (libflash/cpu/kvcache_cpu.cpp, "Acc: fp32 for 16-bit inputs, double for fp32 ones"; split partials are
//!   merged in double). With the reference using the scale the library uses (flash.h's softmax_scale is a C
//!   float: 1/sqrt(d) rounded to f32), what is left is that rounding (<= 1/2 ulp) plus double-precision noise
//!   that may carry a value across a rounding boundary: |O - ref| <= 1 ulp_f32(|ref|) + 1e-12, the LSE alike.
//! - f16, bf16: at most twice the error of a naive implementation in the same dtype on the same rounded inputs
//!   (S, P and O each rounded to the dtype, the softmax in f64), the largest error over the whole output (and
//!   over the finite LSE entries) in both cases.

mod common;

use std::os::raw::c_void;

use common::{max_abs_err, Rng};
use flash::half::{bf16, f16};
use flash::sys;
use flash::{
    combine, combine_raw, Algorithm, CacheIndex, DType, Device, Element, ErrorKind, Forward, KvcacheForward, RawTensor,
    Stream, Tensor, TensorMut,
};

trait Elem: Element + std::fmt::Debug {
    /// A naive same-dtype bound applies (16-bit types); f32 has the 1-ulp bound.
    const HALF: bool;
    const DTYPE_NAME: &'static str;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn bits(self) -> u32;
}
impl Elem for f32 {
    const HALF: bool = false;
    const DTYPE_NAME: &'static str = "f32";
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn bits(self) -> u32 {
        self.to_bits()
    }
}
impl Elem for f16 {
    const HALF: bool = true;
    const DTYPE_NAME: &'static str = "f16";
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
}
impl Elem for bf16 {
    const HALF: bool = true;
    const DTYPE_NAME: &'static str = "bf16";
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
}

/// x rounded to T and widened back.
fn rd<T: Elem>(x: f64) -> f64 {
    if x.is_infinite() {
        return x;
    }
    T::from_f64(x).to_f64()
}

/// The spacing at |x| of a binary format with `bits` explicit mantissa bits and smallest normal exponent `emin`
/// (the subnormal spacing below the normal range).
fn ulp_of(x: f64, bits: i32, emin: i32) -> f64 {
    let a = x.abs();
    let e = if a == 0.0 { emin } else { (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin) }; // |x| in [2^e, 2^(e+1))
    2f64.powi(e - bits)
}
fn ulp32(x: f64) -> f64 {
    ulp_of(x, 23, -126)
}

/// The scale the library computes with (flash.h's softmax_scale is a C float; 0 = 1/sqrt(d) as a float).
fn f32_scale(d: usize) -> f64 {
    (1.0 / (d as f64).sqrt()) as f32 as f64
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// Cache row i is sequence i.
    Contiguous,
    /// Cache row cache_batch_idx[i] (a random permutation of rows, with spare ones).
    BatchIdx,
    /// Pages of this many rows, in a random order through the block table (with spare pages).
    Paged(usize),
}

#[derive(Clone, Debug)]
struct Case<T> {
    b: usize,
    sn: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    layout: Layout,
    /// Rows (contiguous) or pages (paged) of the cache, and positions per row / page.
    rows: usize,
    row_len: usize,
    seqlens: Vec<i32>,
    batch_idx: Vec<i32>,
    table: Vec<i32>,
    max_pages: usize,
    q: Vec<T>,
    k_cache: Vec<T>,
    v_cache: Vec<T>,
    /// k_new, v_new when appending.
    new: Option<(Vec<T>, Vec<T>)>,
}

impl<T: Elem> Case<T> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        rng: &mut Rng,
        b: usize,
        sn: usize,
        hq: usize,
        hkv: usize,
        d: usize,
        layout: Layout,
        lengths: &[i32],
        append: bool,
    ) -> Self {
        let round = |x: Vec<f64>| -> Vec<T> { x.into_iter().map(T::from_f64).collect() };
        let total: Vec<usize> = lengths.iter().map(|&n| n as usize + if append { sn } else { 0 }).collect();
        let max_len = total.iter().copied().max().unwrap().max(1) + (rng.next_u64() % 5) as usize;
        let spare = 1 + (rng.next_u64() % 3) as usize;
        let (mut batch_idx, mut table, mut max_pages) = (Vec::new(), Vec::new(), 0);
        let (rows, row_len) = match layout {
            Layout::Contiguous => (b, max_len),
            Layout::BatchIdx => {
                let perm = permutation(rng, b + spare);
                batch_idx = perm[..b].iter().map(|&x| x as i32).collect();
                (b + spare, max_len)
            }
            Layout::Paged(ps) => {
                max_pages = (max_len + ps - 1) / ps;
                let pages = b * max_pages + spare;
                table = permutation(rng, pages)[..b * max_pages].iter().map(|&x| x as i32).collect();
                (pages, ps)
            }
        };
        let elems = rows * row_len * hkv * d;
        let mut case = Case {
            b,
            sn,
            hq,
            hkv,
            d,
            layout,
            rows,
            row_len,
            seqlens: lengths.to_vec(),
            batch_idx,
            table,
            max_pages,
            q: round(rng.vec(b * sn * hq * d)),
            k_cache: vec![T::from_f64(f64::NAN); elems],
            v_cache: vec![T::from_f64(f64::NAN); elems],
            new: append.then(|| (round(rng.vec(b * sn * hkv * d)), round(rng.vec(b * sn * hkv * d)))),
        };
        for (i, &n) in lengths.iter().enumerate() {
            for t in 0..n as usize {
                let at = case.offset(i, t);
                for x in 0..hkv * d {
                    case.k_cache[at + x] = T::from_f64(rng.uniform());
                    case.v_cache[at + x] = T::from_f64(rng.uniform());
                }
            }
        }
        case
    }

    fn cache_shape(&self) -> [usize; 4] {
        [self.rows, self.row_len, self.hkv, self.d]
    }
    fn q_shape(&self) -> [usize; 4] {
        [self.b, self.sn, self.hq, self.d]
    }
    fn new_shape(&self) -> [usize; 4] {
        [self.b, self.sn, self.hkv, self.d]
    }

    /// Element offset of key position t of sequence i in the cache (flash.h's addressing).
    fn offset(&self, i: usize, t: usize) -> usize {
        let (row, pos) = match self.layout {
            Layout::Contiguous => (i, t),
            Layout::BatchIdx => (self.batch_idx[i] as usize, t),
            Layout::Paged(ps) => (self.table[i * self.max_pages + t / ps] as usize, t % ps),
        };
        (row * self.row_len + pos) * self.hkv * self.d
    }

    fn index(&self) -> CacheIndex<'_> {
        match self.layout {
            Layout::Contiguous => CacheIndex::contiguous(&self.seqlens),
            Layout::BatchIdx => CacheIndex::with_batch_idx(&self.seqlens, &self.batch_idx).unwrap(),
            Layout::Paged(_) => CacheIndex::paged(&self.seqlens, &self.table, self.max_pages).unwrap(),
        }
    }

    /// The caches after flash.h's step 1 (row r of sequence i's new keys at position seqlens[i] + r).
    fn expected_caches(&self) -> (Vec<T>, Vec<T>) {
        let (mut k, mut v) = (self.k_cache.clone(), self.v_cache.clone());
        if let Some((kn, vn)) = &self.new {
            let w = self.hkv * self.d;
            for i in 0..self.b {
                for r in 0..self.sn {
                    let at = self.offset(i, self.seqlens[i] as usize + r);
                    let from = (i * self.sn + r) * w;
                    k[at..at + w].copy_from_slice(&kn[from..from + w]);
                    v[at..at + w].copy_from_slice(&vn[from..from + w]);
                }
            }
        }
        (k, v)
    }

    /// (O [b, sn, hq, d], LSE [b, hq, sn]) in f64 over the given caches; `naive`: the same-dtype naive
    /// implementation instead (S, P, O rounded to T).
    fn reference(&self, k: &[T], v: &[T], m: &Mask, naive: bool) -> (Vec<f64>, Vec<f64>) {
        let r = |x: f64| if naive { rd::<T>(x) } else { x };
        let (b, sn, hq, hkv, d) = (self.b, self.sn, self.hq, self.hkv, self.d);
        let scale = m.scale.unwrap_or_else(|| f32_scale(d));
        let mut o = vec![0.0; b * sn * hq * d];
        let mut lse = vec![f64::NEG_INFINITY; b * hq * sn];
        for i in 0..b {
            let len = self.seqlens[i] as usize + if self.new.is_some() { sn } else { 0 };
            for h in 0..hq {
                let hk = h / (hq / hkv);
                for row in 0..sn {
                    let pos = len as i64 - sn as i64 + row as i64;
                    let qi = &self.q[((i * sn + row) * hq + h) * d..][..d];
                    let mut s: Vec<(usize, f64)> = Vec::new();
                    for j in 0..len {
                        if !m.sees(pos, j as i64) {
                            continue;
                        }
                        let kj = &k[self.offset(i, j) + hk * d..][..d];
                        let dot: f64 = qi.iter().zip(kj).map(|(a, b)| a.to_f64() * b.to_f64()).sum();
                        s.push((j, r(dot * scale)));
                    }
                    if s.is_empty() {
                        continue;
                    }
                    let mx = s.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
                    let sum: f64 = s.iter().map(|x| (x.1 - mx).exp()).sum();
                    lse[(i * hq + h) * sn + row] = mx + sum.ln();
                    let oi = &mut o[((i * sn + row) * hq + h) * d..][..d];
                    for &(j, x) in &s {
                        let p = r((x - mx).exp() / sum);
                        let vj = &v[self.offset(i, j) + hk * d..][..d];
                        for (od, vd) in oi.iter_mut().zip(vj) {
                            *od += p * vd.to_f64();
                        }
                    }
                    for od in oi.iter_mut() {
                        *od = r(*od);
                    }
                }
            }
        }
        (o, lse)
    }
}

fn permutation(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        p.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    p
}

/// The mask as flash.h defines it for KV-cache calls: query row r of a sequence with L keys sits at key
/// position L - seqlen_new + r and sees key j iff j <= that position (causal) and the window allows it.
#[derive(Clone, Copy, Debug, Default)]
struct Mask {
    scale: Option<f64>,
    causal: bool,
    left: Option<u32>,
    right: Option<u32>,
    num_splits: u32,
}
impl Mask {
    fn sees(&self, pos: i64, j: i64) -> bool {
        let right = if self.causal { Some(0) } else { self.right };
        self.left.map_or(true, |l| j >= pos - l as i64) && right.map_or(true, |r| j <= pos + r as i64)
    }
    fn options(&self) -> KvcacheForward {
        let mut f = KvcacheForward::new().causal(self.causal).window(self.left, self.right).num_splits(self.num_splits);
        if let Some(s) = self.scale {
            f = f.scale(s as f32);
        }
        f
    }
}

fn assert_same_bits<T: Elem>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len());
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.bits(), w.bits(), "{what} differs from the expected cache at element {n}");
    }
}

/// Runs the case (appending when it has new keys) and checks the caches bit for bit and O, LSE against the
/// reference. Returns the outputs.
fn check<T: Elem>(mut case: Case<T>, m: &Mask) -> (Vec<T>, Vec<f32>) {
    let (want_k, want_v) = case.expected_caches();
    let mut o = vec![T::from_f64(f64::NAN); case.q.len()];
    let mut lse = vec![f32::NAN; case.b * case.hq * case.sn];
    let (qs, cs, ns, ls) = (case.q_shape(), case.cache_shape(), case.new_shape(), [case.b, case.hq, case.sn]);
    let seqlens = case.seqlens.clone();
    let (batch_idx, table) = (case.batch_idx.clone(), case.table.clone());
    let index = match case.layout {
        Layout::Contiguous => CacheIndex::contiguous(&seqlens),
        Layout::BatchIdx => CacheIndex::with_batch_idx(&seqlens, &batch_idx).unwrap(),
        Layout::Paged(_) => CacheIndex::paged(&seqlens, &table, case.max_pages).unwrap(),
    };
    let opts = m.options();
    let q = Tensor::new(&case.q, qs).unwrap();
    let mut o_t = TensorMut::new(&mut o, qs).unwrap();
    let mut lse_t = TensorMut::new(&mut lse, ls).unwrap();
    let run = match &case.new {
        Some((kn, vn)) => opts.run_append(
            &q,
            &mut TensorMut::new(&mut case.k_cache, cs).unwrap(),
            &mut TensorMut::new(&mut case.v_cache, cs).unwrap(),
            &Tensor::new(kn, ns).unwrap(),
            &Tensor::new(vn, ns).unwrap(),
            &index,
            &mut o_t,
            Some(&mut lse_t),
        ),
        None => opts.run(
            &q,
            &Tensor::new(&case.k_cache, cs).unwrap(),
            &Tensor::new(&case.v_cache, cs).unwrap(),
            &index,
            &mut o_t,
            Some(&mut lse_t),
        ),
    }
    .unwrap_or_else(|e| panic!("{} {:?} {m:?}: {e}", T::DTYPE_NAME, case.layout));
    assert_eq!(run.algorithm, Algorithm::CPU);
    if m.num_splits > 0 {
        assert_eq!(run.num_splits, m.num_splits);
    }
    assert_same_bits(&case.k_cache, &want_k, "k_cache");
    assert_same_bits(&case.v_cache, &want_v, "v_cache");

    let (o_ref, lse_ref) = case.reference(&want_k, &want_v, m, false);
    let o64: Vec<f64> = o.iter().map(|x| x.to_f64()).collect();
    let lse64: Vec<f64> = lse.iter().map(|&x| x as f64).collect();
    let err_o = max_abs_err(&o64, &o_ref);
    let err_lse = max_abs_err(&lse64, &lse_ref);
    let what = format!(
        "{} {:?} b{} sn{} hq{} hkv{} d{} {m:?}",
        T::DTYPE_NAME,
        case.layout,
        case.b,
        case.sn,
        case.hq,
        case.hkv,
        case.d
    );
    if T::HALF {
        let (o_naive, lse_naive) = case.reference(&want_k, &want_v, m, true);
        let naive_o = max_abs_err(&o_naive, &o_ref);
        let lse_naive: Vec<f64> = lse_naive.iter().map(|&x| x as f32 as f64).collect();
        let naive_lse = max_abs_err(&lse_naive, &lse_ref);
        assert!(err_o <= 2.0 * naive_o, "{what}: max |O - ref| = {err_o:e} > 2 x naive {naive_o:e}");
        assert!(err_lse <= 2.0 * naive_lse, "{what}: max |LSE - ref| = {err_lse:e} > 2 x naive {naive_lse:e}");
    } else {
        for (n, (g, w)) in o64.iter().zip(&o_ref).chain(lse64.iter().zip(&lse_ref)).enumerate() {
            if w.is_finite() {
                assert!((g - w).abs() <= ulp32(*w) + 1e-12, "{what}: element {n}: {g} vs {w} (more than 1 ulp)");
            }
        }
    }
    (o, lse)
}

const LAYOUTS: [Layout; 5] =
    [Layout::Contiguous, Layout::BatchIdx, Layout::Paged(1), Layout::Paged(16), Layout::Paged(64)];

fn random_case<T: Elem>(seed: u64) -> (Case<T>, Mask) {
    let mut rng = Rng(seed);
    let pick = |rng: &mut Rng, n: u64| (rng.next_u64() % n) as usize;
    let b = 1 + pick(&mut rng, 3);
    let hkv = [1, 3][pick(&mut rng, 2)];
    let hq = hkv * [1, 4][pick(&mut rng, 2)];
    let d = [8, 40, 72, 128][pick(&mut rng, 4)];
    let sn = 1 + pick(&mut rng, 16);
    let mut lengths: Vec<i32> = (0..b).map(|_| pick(&mut rng, 150) as i32).collect();
    lengths[0] = lengths[0].max(40); // at least one long sequence
    let layout = LAYOUTS[seed as usize % LAYOUTS.len()];
    let append = seed % 2 == 1;
    let case = Case::new(&mut rng, b, sn, hq, hkv, d, layout, &lengths, append);
    let (left, right) = match seed % 3 {
        0 => (None, None),
        1 => (Some(pick(&mut rng, 60) as u32), None),
        _ => (Some(pick(&mut rng, 30) as u32), Some(pick(&mut rng, 5) as u32)),
    };
    let m = Mask { causal: pick(&mut rng, 2) == 1, left, right, num_splits: [0, 1, 3][pick(&mut rng, 3)], scale: None };
    (case, m)
}

#[test]
fn random_cases_f32() {
    for seed in 0..20 {
        let (case, m) = random_case::<f32>(1000 + seed);
        check(case, &m);
    }
}

#[test]
fn random_cases_f16() {
    for seed in 0..20 {
        let (case, m) = random_case::<f16>(2000 + seed);
        check(case, &m);
    }
}

#[test]
fn random_cases_bf16() {
    for seed in 0..20 {
        let (case, m) = random_case::<bf16>(3000 + seed);
        check(case, &m);
    }
}

#[test]
fn paged_page_sizes_with_and_without_append() {
    for (n, ps) in [1usize, 16, 64].into_iter().enumerate() {
        for append in [false, true] {
            let mut rng = Rng(40 + n as u64 * 2 + append as u64);
            let case = Case::<f32>::new(&mut rng, 3, 5, 4, 1, 40, Layout::Paged(ps), &[0, 77, 130], append);
            check(case, &Mask { causal: true, ..Default::default() });
            let case = Case::<f16>::new(&mut rng, 3, 5, 4, 1, 40, Layout::Paged(ps), &[0, 77, 130], append);
            check(case, &Mask { causal: true, ..Default::default() });
        }
    }
}

#[test]
fn cache_batch_idx_with_and_without_append() {
    for append in [false, true] {
        let mut rng = Rng(50 + append as u64);
        let case = Case::<f32>::new(&mut rng, 3, 7, 4, 4, 72, Layout::BatchIdx, &[9, 60, 33], append);
        assert_ne!(case.batch_idx, vec![0, 1, 2]);
        check(case, &Mask { causal: true, ..Default::default() });
    }
}

#[test]
fn seqlen_new_1_to_16_and_gqa_ratios() {
    for sn in [1, 2, 5, 9, 16] {
        for ratio in [1, 4] {
            let mut rng = Rng(60 + sn as u64 * 10 + ratio as u64);
            let case = Case::<f16>::new(&mut rng, 2, sn, 3 * ratio, 3, 64, Layout::Contiguous, &[31, 97], true);
            check(case, &Mask { causal: true, ..Default::default() });
        }
    }
}

#[test]
fn num_splits_1_and_3() {
    for splits in [1, 3] {
        let mut rng = Rng(70 + splits as u64);
        let m = Mask { causal: true, left: Some(100), num_splits: splits, ..Default::default() };
        check(Case::<f32>::new(&mut rng, 2, 3, 8, 2, 128, Layout::Paged(16), &[211, 5], true), &m);
        check(Case::<bf16>::new(&mut rng, 2, 3, 8, 2, 128, Layout::Paged(16), &[211, 5], true), &m);
    }
}

#[test]
fn masks_and_rows_without_keys() {
    let masks = [
        (false, None, None),
        (true, None, None),
        (false, Some(3), Some(0)),
        (true, Some(10), None),
        (false, Some(0), Some(0)),
        (false, Some(2), Some(2)),
        (false, None, Some(1)),
    ];
    for (n, (causal, left, right)) in masks.into_iter().enumerate() {
        let mut rng = Rng(80 + n as u64);
        // Sequence 0 holds fewer keys than there are new queries: under causal masking its first rows see no
        // key; sequence 2 holds none at all.
        let case = Case::<f32>::new(&mut rng, 3, 6, 2, 1, 16, Layout::Paged(16), &[3, 45, 0], false);
        let (o, lse) = check(case, &Mask { causal, left, right, ..Default::default() });
        let row = 2 * 16; // elements of one query row (2 heads x 16)
        assert!(o[2 * 6 * row..].iter().all(|&x| x == 0.0), "a sequence with no key: O = 0");
        assert!(lse[2 * 2 * 6..].iter().all(|&x| x == f32::NEG_INFINITY));
        if causal {
            assert!(o[..3 * row].iter().all(|&x| x == 0.0));
        }
    }
}

#[test]
fn explicit_scale() {
    let mut rng = Rng(90);
    let case = Case::<f32>::new(&mut rng, 2, 4, 2, 2, 32, Layout::Contiguous, &[20, 3], true);
    check(case, &Mask { scale: Some(0.3f32 as f64), ..Default::default() });
}

#[test]
fn decode_loop_matches_forward_over_the_prefix() {
    // One token at a time, as a decoder: each step equals the last row of causal attention over the keys so
    // far (computed here by Forward over the cache prefix, within its own fp32 bound of tests/forward.rs).
    let (b, hq, hkv, d, prompt, steps) = (1, 4, 2, 16, 9, 6);
    let mut rng = Rng(91);
    let max_len = prompt + steps;
    let mut k_cache = vec![f32::NAN; max_len * hkv * d];
    let mut v_cache = vec![f32::NAN; max_len * hkv * d];
    for x in 0..prompt * hkv * d {
        k_cache[x] = rng.uniform() as f32;
        v_cache[x] = rng.uniform() as f32;
    }
    for step in 0..steps {
        let len = prompt + step;
        let q: Vec<f32> = rng.vec(hq * d).into_iter().map(|x| x as f32).collect();
        let kn: Vec<f32> = rng.vec(hkv * d).into_iter().map(|x| x as f32).collect();
        let vn: Vec<f32> = rng.vec(hkv * d).into_iter().map(|x| x as f32).collect();
        let mut o = vec![f32::NAN; hq * d];
        let seqlens = [len as i32];
        KvcacheForward::new()
            .causal(true)
            .run_append(
                &Tensor::new(&q, [b, 1, hq, d]).unwrap(),
                &mut TensorMut::new(&mut k_cache, [b, max_len, hkv, d]).unwrap(),
                &mut TensorMut::new(&mut v_cache, [b, max_len, hkv, d]).unwrap(),
                &Tensor::new(&kn, [b, 1, hkv, d]).unwrap(),
                &Tensor::new(&vn, [b, 1, hkv, d]).unwrap(),
                &CacheIndex::contiguous(&seqlens),
                &mut TensorMut::new(&mut o, [b, 1, hq, d]).unwrap(),
                None,
            )
            .unwrap();
        let n = (len + 1) * hkv * d;
        let mut full = vec![f32::NAN; hq * d];
        Forward::new()
            .causal(true)
            .run(
                &Tensor::new(&q, [b, 1, hq, d]).unwrap(),
                &Tensor::new(&k_cache[..n], [b, len + 1, hkv, d]).unwrap(),
                &Tensor::new(&v_cache[..n], [b, len + 1, hkv, d]).unwrap(),
                &mut TensorMut::new(&mut full, [b, 1, hq, d]).unwrap(),
            )
            .unwrap();
        let diff = o.iter().zip(&full).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(diff <= 2e-5, "step {step}: {diff}");
    }
    assert!(k_cache.iter().chain(&v_cache).all(|x| x.is_finite()));
}

#[test]
fn caller_workspace_and_size_query() {
    let mut rng = Rng(92);
    let case = Case::<f32>::new(&mut rng, 1, 2, 2, 1, 32, Layout::Contiguous, &[300], false);
    let (qs, cs) = (case.q_shape(), case.cache_shape());
    let mut o = vec![0f32; case.q.len()];
    let q = RawTensor::from(&Tensor::new(&case.q, qs).unwrap());
    let kc = RawTensor::from(&Tensor::new(&case.k_cache, cs).unwrap());
    let vc = RawTensor::from(&Tensor::new(&case.v_cache, cs).unwrap());
    // Safety: o is a live host buffer of q's shape, used by nothing else during the calls below.
    let o_raw = unsafe {
        RawTensor::from_raw_parts(
            o.as_mut_ptr() as *mut c_void,
            DType::Fp32,
            Device::Cpu,
            qs,
            flash::contiguous_strides(qs),
        )
    }
    .unwrap();
    let index = case.index();
    let opts = KvcacheForward::new().num_splits(3);
    let bytes = opts.workspace_size_raw(&q, &kc, &vc, None, &index, &o_raw, None).unwrap();
    assert!(bytes > 0);
    assert_eq!(
        KvcacheForward::new().num_splits(1).workspace_size_raw(&q, &kc, &vc, None, &index, &o_raw, None).unwrap(),
        0
    );
    let mut ws = vec![f64::NAN; bytes / 8 + 1];
    // Safety: ws holds at least `bytes` bytes, 8-byte aligned, used by nothing else during the call.
    let with_ws = unsafe { opts.workspace(ws.as_mut_ptr() as *mut c_void, bytes) };
    with_ws.run_raw(&q, &kc, &vc, None, &index, &o_raw, None, Stream::legacy_default()).unwrap();
    let got = o.clone();
    opts.run_raw(&q, &kc, &vc, None, &index, &o_raw, None, Stream::legacy_default()).unwrap();
    assert_eq!(got, o);
    // Safety: as above, with a size smaller than the query said (the library refuses before writing).
    let small = unsafe { opts.workspace(ws.as_mut_ptr() as *mut c_void, 8) };
    let e = small.run_raw(&q, &kc, &vc, None, &index, &o_raw, None, Stream::legacy_default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WorkspaceTooSmall);
    assert_eq!(
        e.message(),
        format!("workspace_size is 8 bytes but this call needs {bytes} (see flash_fwd_kvcache_workspace_size)")
    );
}

// ---- Refusals ------------------------------------------------------------------------------------------------

/// A small contiguous f32 case (b 2, sn 3, hq 4, hkv 2, d 32, seqlens [5, 9]) with new keys.
fn small(layout: Layout) -> Case<f32> {
    Case::<f32>::new(&mut Rng(7), 2, 3, 4, 2, 32, layout, &[5, 9], true)
}

/// Runs `case` with `index` (appending) and expects a refusal that writes nothing.
fn refused(case: &mut Case<f32>, index: &CacheIndex<'_>, opts: KvcacheForward) -> flash::Error {
    let (k0, v0) = (case.k_cache.clone(), case.v_cache.clone());
    let mut o = vec![f32::NAN; case.q.len()];
    let (qs, cs, ns) = (case.q_shape(), case.cache_shape(), case.new_shape());
    let (kn, vn) = case.new.clone().unwrap();
    let e = opts
        .run_append(
            &Tensor::new(&case.q, qs).unwrap(),
            &mut TensorMut::new(&mut case.k_cache, cs).unwrap(),
            &mut TensorMut::new(&mut case.v_cache, cs).unwrap(),
            &Tensor::new(&kn, ns).unwrap(),
            &Tensor::new(&vn, ns).unwrap(),
            index,
            &mut TensorMut::new(&mut o, qs).unwrap(),
            None,
        )
        .unwrap_err();
    assert_same_bits(&case.k_cache, &k0, "k_cache");
    assert_same_bits(&case.v_cache, &v0, "v_cache");
    assert!(o.iter().all(|x| x.is_nan()), "O written by a refused call");
    e
}

#[test]
fn index_lengths_must_match_the_batch() {
    let mut case = small(Layout::Contiguous);
    let three = [1, 2, 3];
    let e = refused(&mut case, &CacheIndex::contiguous(&three), KvcacheForward::new());
    assert_eq!(e.kind(), ErrorKind::BadShape);
    assert_eq!(e.message(), "cache_seqlens has 3 entries but q.shape[0] (batch) is 2");
}

#[test]
fn index_values_out_of_range_are_refused_by_the_library() {
    let mut case = small(Layout::BatchIdx);
    let rows = case.rows as i32;
    let max_len = case.row_len as i32;
    let opts = KvcacheForward::new();
    let lens = [5, max_len - 1];
    let e = refused(&mut case, &CacheIndex::with_batch_idx(&lens, &[0, 1]).unwrap(), opts);
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        e.message(),
        format!(
            "cache_seqlens[1] is {}: appending seqlen_new 3 keys needs {} positions but k_cache.shape[1] (max_len) is {max_len}",
            max_len - 1,
            max_len + 2
        )
    );
    let e = refused(&mut case, &CacheIndex::with_batch_idx(&[-1, 2], &[0, 1]).unwrap(), opts);
    assert_eq!(e.message(), "cache_seqlens[0] is -1 but must be >= 0");
    let e = refused(&mut case, &CacheIndex::with_batch_idx(&[5, 9], &[0, rows]).unwrap(), opts);
    assert_eq!(
        e.message(),
        format!("cache_batch_idx[1] is {rows} but must be in [0, {rows}) (k_cache.shape[0], batch_cache)")
    );
    let e = refused(&mut case, &CacheIndex::with_batch_idx(&[5, 5], &[1, 1]).unwrap(), opts);
    assert_eq!(
        e.message(),
        "k_new: sequences 0 and 1 append to the same cache slot (row 1, position 5); check cache_batch_idx"
    );

    let mut paged = small(Layout::Paged(4));
    let (pages, max_pages) = (paged.rows as i32, paged.max_pages);
    let mut table = paged.table.clone();
    table[max_pages + 1] = pages;
    let e = refused(&mut paged, &CacheIndex::paged(&[5, 9], &table, max_pages).unwrap(), opts);
    assert_eq!(
        e.message(),
        format!("block_table[1,1] is {pages} but must be in [0, {pages}) (k_cache.shape[0], num_pages)")
    );
    let mut table = paged.table.clone();
    table[max_pages] = table[1]; // sequence 1 reads the page sequence 0 appends to
    let e = refused(&mut paged, &CacheIndex::paged(&[5, 9], &table, max_pages).unwrap(), opts);
    assert!(e.message().contains("appends to a cache slot") && e.message().ends_with("check block_table"), "{e}");
}

#[test]
fn options_out_of_range() {
    let mut case = small(Layout::Contiguous);
    let lens = [5, 9];
    let index = CacheIndex::contiguous(&lens);
    let e = refused(&mut case, &index, KvcacheForward::new().num_splits(300));
    assert_eq!(e.message(), "num_splits is 300 but must be in [0, 256] (0 = choose)");
    let e = refused(&mut case, &index, KvcacheForward::new().num_splits(u32::MAX));
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(e.message(), "num_splits is 4294967295, larger than 2^31-1");
    let e = refused(&mut case, &index, KvcacheForward::new().window(Some(1 << 31), None));
    assert_eq!(e.kind(), ErrorKind::BadMask);
    let e = refused(&mut case, &index, KvcacheForward::new().algorithm(Algorithm::NAIVE));
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert_eq!(e.message(), "algorithm naive does not support flash_fwd_kvcache (use cpu or auto)");
    let e = refused(&mut case, &index, KvcacheForward::new().scale(f32::INFINITY));
    assert_eq!(e.message(), "softmax_scale is not finite");
}

fn raw<T: Element>(data: &[T], shape: [usize; 4]) -> RawTensor {
    RawTensor::from(&Tensor::new(data, shape).unwrap())
}

#[test]
fn mismatched_tensors_are_refused_by_the_library() {
    let case = small(Layout::Contiguous);
    let lens = [5, 9];
    let index = CacheIndex::contiguous(&lens);
    let (qs, cs) = (case.q_shape(), case.cache_shape());
    let q = raw(&case.q, qs);
    let (kc, vc) = (raw(&case.k_cache, cs), raw(&case.v_cache, cs));
    let mut o = vec![f32::NAN; case.q.len()];
    let o_t = raw(&o, qs);
    let opts = KvcacheForward::new();
    let run = |q: &RawTensor, kc: &RawTensor, vc: &RawTensor, new: Option<(&RawTensor, &RawTensor)>| {
        opts.run_raw(q, kc, vc, new, &index, &o_t, None, Stream::legacy_default()).unwrap_err()
    };
    let half: Vec<f16> = case.k_cache.iter().map(|&x| f16::from_f32(x)).collect();
    let e = run(&q, &raw(&half, cs), &vc, None);
    assert_eq!((e.kind(), e.message()), (ErrorKind::DtypeMismatch, "k_cache.dtype is fp16 but q.dtype is fp32"));
    let short = [cs[0], cs[1] - 1, cs[2], cs[3]];
    let e = run(&q, &kc, &raw(&case.v_cache[..short.iter().product()], short), None);
    assert_eq!(e.kind(), ErrorKind::BadShape);
    assert_eq!(e.message(), format!("v_cache.shape[1] is {} but k_cache.shape[1] is {}", cs[1] - 1, cs[1]));
    let (kn, vn) = case.new.clone().unwrap();
    let e = run(
        &q,
        &kc,
        &vc,
        Some((&raw(&kn[..2 * 3 * 2 * 16], [2, 3, 2, 16]), &raw(&vn[..2 * 3 * 2 * 16], [2, 3, 2, 16]))),
    );
    assert_eq!(e.message(), "k_new.shape[3] is 16 but q.shape[3] is 32");
    let three = [1, cs[1], 3, cs[3]];
    let n3: usize = three.iter().product();
    let e = run(&q, &raw(&case.k_cache[..n3], three), &raw(&case.v_cache[..n3], three), None);
    assert_eq!(e.message(), "q.shape[2] (heads_q) is 4, not a multiple of k_cache.shape[2] (heads_kv) 3");
    let one = [1, cs[1], cs[2], cs[3]];
    let n1: usize = one.iter().product();
    let e = run(&q, &raw(&case.k_cache[..n1], one), &raw(&case.v_cache[..n1], one), None);
    assert_eq!(
        e.message(),
        "k_cache.shape[0] (batch_cache) is 1 but q.shape[0] (batch) is 2 and cache_batch_idx is NULL"
    );
    // An output overlapping an input.
    let e = opts.run_raw(&q, &kc, &vc, None, &index, &q, None, Stream::legacy_default()).unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::InvalidArgument, "o overlaps q in memory"));
    assert!(o.iter_mut().all(|x| x.is_nan()));
}

#[test]
fn index_arrays_must_live_where_q_does() {
    let case = small(Layout::Contiguous);
    let (qs, cs) = (case.q_shape(), case.cache_shape());
    let mut o = vec![f32::NAN; case.q.len()];
    let lens = [5i32, 9];
    // Safety: never dereferenced (refused before the call), and the pointer is a live host array anyway.
    let index =
        unsafe { CacheIndex::from_raw_parts(Device::Cuda(0), lens.as_ptr(), std::ptr::null(), std::ptr::null(), 0, 0) };
    let e = KvcacheForward::new()
        .run(
            &Tensor::new(&case.q, qs).unwrap(),
            &Tensor::new(&case.k_cache, cs).unwrap(),
            &Tensor::new(&case.v_cache, cs).unwrap(),
            &index,
            &mut TensorMut::new(&mut o, qs).unwrap(),
            None,
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeviceMismatch);
    assert_eq!(e.message(), "the cache index arrays are on Cuda(0) but q is on Some(Cpu)");
}

#[test]
fn cuda_tensors_without_a_cuda_device() {
    // Fake device pointers: only where no GPU could run a kernel on them.
    if flash::cuda_device_count().unwrap() > 0 {
        return;
    }
    let t = |addr: usize, shape: [usize; 4]| {
        unsafe { RawTensor::cuda(addr as *mut c_void, DType::Fp16, 0, shape) }.unwrap()
    };
    let (q, kc, vc, o) = (
        t(0x10_0000, [2, 1, 4, 64]),
        t(0x20_0000, [2, 8, 2, 64]),
        t(0x30_0000, [2, 8, 2, 64]),
        t(0x40_0000, [2, 1, 4, 64]),
    );
    // Safety: device pointers of the index arrays, never read on the host.
    let index = unsafe {
        CacheIndex::from_raw_parts(Device::Cuda(0), 0x50_0000 as *const i32, std::ptr::null(), std::ptr::null(), 0, 0)
    };
    let e = KvcacheForward::new().run_raw(&q, &kc, &vc, None, &index, &o, None, Stream::legacy_default()).unwrap_err();
    // Validated, then refused: today with ALGORITHM_UNAVAILABLE (no GPU kernel serves these calls yet); once
    // the kernels exist, a machine without a device says NO_CUDA_DEVICE.
    let refused = |kind| matches!(kind, ErrorKind::AlgorithmUnavailable | ErrorKind::NoCudaDevice);
    assert!(refused(e.kind()), "{e}");
    let lse = unsafe { RawTensor::cuda(0x60_0000 as *mut c_void, DType::Fp32, 0, [2, 4, 1]) }.unwrap();
    let e = combine_raw(&[o], &[lse], &q, None, Stream::legacy_default()).unwrap_err();
    assert!(refused(e.kind()), "{e}");
    // Validation comes first: a mismatch is named as on the CPU.
    let e = KvcacheForward::new()
        .run_raw(&q, &kc, &t(0x70_0000, [2, 8, 2, 32]), None, &index, &o, None, Stream::legacy_default())
        .unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::BadShape, "v_cache.shape[3] is 32 but k_cache.shape[3] is 64"));
}

// ---- combine ----------------------------------------------------------------------------------------------------

/// flash.h's formula in f64: M = max LSE_p, w_p = exp(LSE_p - M), O = sum w_p O_p / sum w_p, LSE = M + log sum
/// w_p; a part at -inf contributes nothing (its O is not looked at); all -inf: O = 0, LSE = -inf. Parts are
/// [b, s, h, d] (O) and [b, h, s] (LSE), densely packed.
fn combine_ref(o_parts: &[Vec<f64>], lse_parts: &[Vec<f64>], [b, s, h, d]: [usize; 4]) -> (Vec<f64>, Vec<f64>) {
    let mut o = vec![0.0; b * s * h * d];
    let mut lse = vec![f64::NEG_INFINITY; b * h * s];
    for bb in 0..b {
        for hh in 0..h {
            for ss in 0..s {
                let li = (bb * h + hh) * s + ss;
                let m = lse_parts.iter().map(|l| l[li]).fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let oi = ((bb * s + ss) * h + hh) * d;
                let mut total = 0.0;
                for (op, lp) in o_parts.iter().zip(lse_parts) {
                    if lp[li] == f64::NEG_INFINITY {
                        continue;
                    }
                    let w = (lp[li] - m).exp();
                    total += w;
                    for e in 0..d {
                        o[oi + e] += w * op[oi + e];
                    }
                }
                for e in 0..d {
                    o[oi + e] /= total;
                }
                lse[li] = m + total.ln();
            }
        }
    }
    (o, lse)
}

/// O, LSE in f64 of q [b, sq, h, d] over keys [lo, hi) of k, v [b, sk, h, d], no mask.
fn attention_range(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    [b, sq, sk, h, d]: [usize; 5],
    (lo, hi): (usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let scale = f32_scale(d);
    let mut o = vec![0.0; b * sq * h * d];
    let mut lse = vec![f64::NEG_INFINITY; b * h * sq];
    for bb in 0..b {
        for hh in 0..h {
            for i in 0..sq {
                let qi = &q[((bb * sq + i) * h + hh) * d..][..d];
                let s: Vec<f64> = (lo..hi)
                    .map(|j| {
                        let kj = &k[((bb * sk + j) * h + hh) * d..][..d];
                        scale * qi.iter().zip(kj).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = s.iter().map(|x| (x - m).exp()).sum();
                lse[(bb * h + hh) * sq + i] = m + total.ln();
                let oi = &mut o[((bb * sq + i) * h + hh) * d..][..d];
                for (x, j) in s.iter().zip(lo..hi) {
                    let p = (x - m).exp() / total;
                    for (e, od) in oi.iter_mut().enumerate() {
                        *od += p * v[((bb * sk + j) * h + hh) * d + e] as f64;
                    }
                }
            }
        }
    }
    (o, lse)
}

#[test]
fn combine_equals_attention_over_all_keys() {
    // Partial results over consecutive key ranges (Forward on strided views of K and V), merged, against attention
    // over all keys in f64. Each part's O and LSE are within 1 ulp_f32 of exact (fp32 inputs accumulate in
    // double); LSE errors of at most 2 ulp(Lambda) (Lambda = max |LSE_p|) move the normalised weights by at
    // most ~4 ulp(Lambda) in all, so O by that times max |O_p|; the O_p errors add ulp(max |O_p|); the final
    // rounding ulp(|O|).
    let (b, sq, sk, h, d) = (2, 7, 61, 3, 24);
    for (n, cuts) in [vec![61], vec![20, 61], vec![1, 30, 61], vec![7, 8, 33, 50, 61]].into_iter().enumerate() {
        let mut rng = Rng(100 + n as u64);
        let f = |x: Vec<f64>| -> Vec<f32> { x.into_iter().map(|v| v as f32).collect() };
        let (q, k, v) = (f(rng.vec(b * sq * h * d)), f(rng.vec(b * sk * h * d)), f(rng.vec(b * sk * h * d)));
        let (mut o_parts, mut lse_parts) = (Vec::new(), Vec::new());
        let mut lo = 0;
        for &hi in &cuts {
            let len = hi - lo;
            let strides = [sk * h * d, h * d, d, 1];
            let mut o = vec![f32::NAN; b * sq * h * d];
            let mut lse = vec![f32::NAN; b * h * sq];
            Forward::new()
                .run_with_lse(
                    &Tensor::new(&q, [b, sq, h, d]).unwrap(),
                    &Tensor::with_strides(&k[lo * h * d..], [b, len, h, d], strides).unwrap(),
                    &Tensor::with_strides(&v[lo * h * d..], [b, len, h, d], strides).unwrap(),
                    &mut TensorMut::new(&mut o, [b, sq, h, d]).unwrap(),
                    &mut TensorMut::new(&mut lse, [b, h, sq]).unwrap(),
                )
                .unwrap();
            o_parts.push(o);
            lse_parts.push(lse);
            lo = hi;
        }
        let parts: Vec<Tensor<'_, f32>> = o_parts.iter().map(|o| Tensor::new(o, [b, sq, h, d]).unwrap()).collect();
        let lparts: Vec<Tensor<'_, f32, 3>> = lse_parts.iter().map(|l| Tensor::new(l, [b, h, sq]).unwrap()).collect();
        let mut out = vec![f32::NAN; b * sq * h * d];
        let mut lse = vec![f32::NAN; b * h * sq];
        combine(
            &parts,
            &lparts,
            &mut TensorMut::new(&mut out, [b, sq, h, d]).unwrap(),
            Some(&mut TensorMut::new(&mut lse, [b, h, sq]).unwrap()),
        )
        .unwrap();
        let (o_ref, lse_ref) = attention_range(&q, &k, &v, [b, sq, sk, h, d], (0, sk));
        let big_o = o_parts.iter().flatten().fold(0f64, |a, &x| a.max(x.abs() as f64));
        let lambda = lse_parts.iter().flatten().fold(0f64, |a, &x| a.max(x.abs() as f64));
        for (g, w) in out.iter().zip(&o_ref) {
            let bound = ulp32(big_o) * (1.0 + 4.0 * ulp32(lambda) / ulp32(1.0)) + ulp32(*w) + 1e-12;
            assert!((*g as f64 - w).abs() <= bound, "parts {cuts:?}: {g} vs {w}");
        }
        for (g, w) in lse.iter().zip(&lse_ref) {
            assert!((*g as f64 - w).abs() <= 3.0 * ulp32(lambda) + 1e-12, "parts {cuts:?}: LSE {g} vs {w}");
        }
    }
}

#[test]
fn combine_skips_parts_without_keys_and_rounds_once() {
    // Parts with -inf rows whose O is NaN (never read), a row where every part is -inf (O = 0, LSE = -inf). The
    // merge is computed in double: an f32 O and the LSE are within half an ulp of the f64 merge.
    let shape = [2, 5, 3, 16];
    let [b, s, h, d] = shape;
    let mut rng = Rng(110);
    let mut o_parts: Vec<Vec<f32>> =
        (0..3).map(|_| rng.vec(b * s * h * d).into_iter().map(|x| x as f32).collect()).collect();
    let mut lse_parts: Vec<Vec<f32>> =
        (0..3).map(|_| rng.vec(b * h * s).into_iter().map(|x| (3.0 * x) as f32).collect()).collect();
    for (p, lp) in lse_parts.iter_mut().enumerate() {
        for (li, l) in lp.iter_mut().enumerate() {
            let (bb, hh, ss) = (li / (h * s), li / s % h, li % s);
            if (li + p) % 4 == 0 || (bb == 1 && hh == 2) {
                *l = f32::NEG_INFINITY;
                let oi = ((bb * s + ss) * h + hh) * d;
                o_parts[p][oi..oi + d].fill(f32::NAN);
            }
        }
    }
    let w = |x: &Vec<f32>| -> Vec<f64> { x.iter().map(|&v| v as f64).collect() };
    let (o_ref, lse_ref) =
        combine_ref(&o_parts.iter().map(w).collect::<Vec<_>>(), &lse_parts.iter().map(w).collect::<Vec<_>>(), shape);
    let parts: Vec<Tensor<'_, f32>> = o_parts.iter().map(|o| Tensor::new(o, shape).unwrap()).collect();
    let lparts: Vec<Tensor<'_, f32, 3>> = lse_parts.iter().map(|l| Tensor::new(l, [b, h, s]).unwrap()).collect();

    let mut out = vec![f32::NAN; b * s * h * d];
    let mut lse = vec![f32::NAN; b * h * s];
    combine(
        &parts,
        &lparts,
        &mut TensorMut::new(&mut out, shape).unwrap(),
        Some(&mut TensorMut::new(&mut lse, [b, h, s]).unwrap()),
    )
    .unwrap();
    for (g, w) in out.iter().zip(&o_ref).chain(lse.iter().zip(&lse_ref)) {
        assert!(!g.is_nan());
        if w.is_finite() {
            assert!((*g as f64 - w).abs() <= ulp32(*w) / 2.0 + 1e-12, "{g} vs {w}");
        } else {
            assert_eq!(*g as f64, *w);
        }
    }
    let (bb, hh) = (1, 2); // no part saw a key of batch 1, head 2; row 0:
    let empty = ((bb * s * h + hh) * d, (bb * h + hh) * s);
    assert!(out[empty.0..empty.0 + d].iter().all(|&x| x == 0.0) && lse[empty.1] == f32::NEG_INFINITY);

    // 16-bit outputs are stored through f32 (libflash/cpu/convert.h: the store takes a float), so the double
    // result is rounded twice: within half an ulp of the dtype plus half an ulp of f32.
    let mut out16 = vec![f16::NAN; b * s * h * d];
    combine(&parts, &lparts, &mut TensorMut::new(&mut out16, shape).unwrap(), None).unwrap();
    for (g, w) in out16.iter().zip(&o_ref) {
        let bound = ulp_of(*w, 10, -14) / 2.0 + ulp32(*w) / 2.0 + 1e-12;
        assert!((g.to_f64() - w).abs() <= bound, "{g} vs {w}");
    }
    let mut out_bf = vec![bf16::NAN; b * s * h * d];
    combine(&parts, &lparts, &mut TensorMut::new(&mut out_bf, shape).unwrap(), None).unwrap();
    for (g, w) in out_bf.iter().zip(&o_ref) {
        let bound = ulp_of(*w, 7, -126) / 2.0 + ulp32(*w) / 2.0 + 1e-12;
        assert!((g.to_f64() - w).abs() <= bound, "{g} vs {w}");
    }
}

#[test]
fn combine_refusals() {
    let shape = [1, 3, 2, 16];
    let o = vec![0.5f32; 96];
    let l = vec![0.0f32; 6];
    let part = || Tensor::new(&o, shape).unwrap();
    let lpart = || Tensor::new(&l, [1, 2, 3]).unwrap();
    let mut out = vec![0f32; 96];
    let e = combine(&[part(), part()], &[lpart()], &mut TensorMut::new(&mut out, shape).unwrap(), None).unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::InvalidArgument, "o_parts has 2 parts but lse_parts has 1"));
    let e = combine::<f32, f32>(&[], &[], &mut TensorMut::new(&mut out, shape).unwrap(), None).unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::InvalidArgument, "num_parts is 0 but must be >= 1"));
    let short = Tensor::new(&o[..64], [1, 2, 2, 16]).unwrap();
    let e = combine(&[part(), short], &[lpart(), lpart()], &mut TensorMut::new(&mut out, shape).unwrap(), None)
        .unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::BadShape, "o_parts[1].shape[1] is 2 but o.shape[1] is 3"));
    let e = combine(
        &[part()],
        &[Tensor::new(&l[..4], [1, 2, 2]).unwrap()],
        &mut TensorMut::new(&mut out, shape).unwrap(),
        None,
    )
    .unwrap_err();
    assert_eq!(e.message(), "lse_parts[0].shape[2] is 2 but o.shape[1] is 3");
    let h: Vec<f16> = o.iter().map(|&x| f16::from_f32(x)).collect();
    let e = combine_raw(
        &[raw(&o, shape), raw(&h, shape)],
        &[raw3(&l), raw3(&l)],
        &raw(&out, shape),
        None,
        Stream::legacy_default(),
    )
    .unwrap_err();
    assert_eq!(
        (e.kind(), e.message()),
        (ErrorKind::DtypeMismatch, "o_parts[1].dtype is fp16 but o_parts[0].dtype is fp32")
    );
    let e = combine_raw(&[raw(&o, shape)], &[raw3(&l)], &raw(&o, shape), None, Stream::legacy_default()).unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::InvalidArgument, "o overlaps o_parts[0] in memory"));
    let lh: Vec<f16> = l.iter().map(|&x| f16::from_f32(x)).collect();
    let e = combine_raw(
        &[raw(&o, shape)],
        &[RawTensor::from(&Tensor::new(&lh, [1, 2, 3]).unwrap())],
        &raw(&out, shape),
        None,
        Stream::legacy_default(),
    )
    .unwrap_err();
    assert_eq!((e.kind(), e.message()), (ErrorKind::DtypeMismatch, "lse_parts[0].dtype is fp16 but must be fp32"));
    let _ = sys::FLASH_OK;
}

fn raw3(data: &[f32]) -> RawTensor {
    RawTensor::from(&Tensor::new(data, [1, 2, 3]).unwrap())
}
