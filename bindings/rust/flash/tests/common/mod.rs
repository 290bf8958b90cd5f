//! An independent fp64 reference (naive softmax attention with every mask spelled out) and helpers.
#![allow(dead_code)]

use flash::Alignment;

/// splitmix64: fresh, reproducible inputs without a dependency.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.uniform()).collect()
    }
    pub fn bools(&mut self, n: usize, density: f64) -> Vec<bool> {
        (0..n).map(|_| (self.uniform() + 1.0) / 2.0 < density).collect()
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub b: usize,
    pub sq: usize,
    pub sk: usize,
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
}
impl Shape {
    pub fn q(&self) -> [usize; 4] {
        [self.b, self.sq, self.hq, self.d]
    }
    pub fn kv(&self) -> [usize; 4] {
        [self.b, self.sk, self.hkv, self.d]
    }
    pub fn lse(&self) -> [usize; 3] {
        [self.b, self.hq, self.sq]
    }
    pub fn q_len(&self) -> usize {
        self.b * self.sq * self.hq * self.d
    }
    pub fn kv_len(&self) -> usize {
        self.b * self.sk * self.hkv * self.d
    }
}

/// The mask as the reference understands it (mirrors the ABI's semantics, written independently).
#[derive(Clone, Debug, Default)]
pub struct Masking {
    pub scale: Option<f64>,
    pub causal: bool,
    pub top_left: bool,
    pub window_left: Option<u32>,
    pub window_right: Option<u32>,
    /// (block_m, block_n, [batch, heads, nq, nk] of the map, dense block map)
    pub blocks: Option<(usize, usize, [usize; 4], Vec<bool>)>,
}

impl Masking {
    pub fn alignment(&self) -> Alignment {
        if self.top_left {
            Alignment::TopLeft
        } else {
            Alignment::BottomRight
        }
    }

    pub fn visible(&self, s: &Shape, b: usize, h: usize, i: usize, j: usize) -> bool {
        let (i, j) = (i as i64, j as i64);
        let diag = if self.top_left { 0 } else { s.sk as i64 - s.sq as i64 };
        let right = if self.causal { Some(0) } else { self.window_right };
        if let Some(l) = self.window_left {
            if j < i + diag - l as i64 {
                return false;
            }
        }
        if let Some(r) = right {
            if j > i + diag + r as i64 {
                return false;
            }
        }
        if let Some((bm, bn, [mb, mh, nq, nk], map)) = &self.blocks {
            let bb = if *mb == 1 { 0 } else { b };
            let hh = if *mh == 1 { 0 } else { h };
            let (qb, kb) = (i as usize / bm, j as usize / bn);
            if !map[((bb * mh + hh) * nq + qb) * nk + kb] {
                return false;
            }
        }
        true
    }
}

/// O [b, sq, hq, d] and LSE [b, hq, sq] in f64 from contiguous q, k, v.
pub fn reference(s: &Shape, m: &Masking, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let scale = m.scale.unwrap_or(1.0 / (s.d as f64).sqrt());
    let mut o = vec![0.0; s.q_len()];
    let mut lse = vec![f64::NEG_INFINITY; s.b * s.hq * s.sq];
    let group = s.hq / s.hkv;
    for b in 0..s.b {
        for h in 0..s.hq {
            let hk = h / group;
            for i in 0..s.sq {
                let qi = &q[((b * s.sq + i) * s.hq + h) * s.d..][..s.d];
                let mut scores = Vec::new();
                for j in 0..s.sk {
                    if m.visible(s, b, h, i, j) {
                        let kj = &k[((b * s.sk + j) * s.hkv + hk) * s.d..][..s.d];
                        scores.push((j, scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>()));
                    }
                }
                if scores.is_empty() {
                    continue; // O = 0, LSE = -inf
                }
                let max = scores.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|x| (x.1 - max).exp()).sum();
                lse[(b * s.hq + h) * s.sq + i] = max + sum.ln();
                let oi = &mut o[((b * s.sq + i) * s.hq + h) * s.d..][..s.d];
                for (j, x) in &scores {
                    let p = (x - max).exp() / sum;
                    let vj = &v[((b * s.sk + j) * s.hkv + hk) * s.d..][..s.d];
                    for (od, vd) in oi.iter_mut().zip(vj) {
                        *od += p * vd;
                    }
                }
            }
        }
    }
    (o, lse)
}

/// Largest |got - want|, failing on NaN or an infinity in the wrong place.
pub fn max_abs_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let mut worst = 0.0f64;
    for (idx, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(!g.is_nan(), "NaN at {idx} (want {w})");
        if w.is_infinite() || g.is_infinite() {
            assert_eq!(g, w, "at {idx}");
            continue;
        }
        worst = worst.max((g - w).abs());
    }
    worst
}
