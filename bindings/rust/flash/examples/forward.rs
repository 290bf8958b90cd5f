//! Forward attention on the CPU with libflash, checked against a plain f64 softmax attention.
//!
//!   cargo run --example forward -- [batch seqlen_q seqlen_k heads head_dim] [--causal] [--bf16]
//!
//! The same code drives a GPU by building `flash::RawTensor::cuda` views over device memory and calling
//! `Forward::run_raw` with the stream the memory belongs to.
use std::process::ExitCode;
use std::time::Instant;

use flash::half::bf16;
use flash::{Device, Forward, Tensor, TensorMut};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let causal = args.iter().any(|a| a == "--causal");
    let use_bf16 = args.iter().any(|a| a == "--bf16");
    let dims: Vec<usize> = args.iter().filter(|a| !a.starts_with("--")).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let [b, sq, sk, h, d] = match dims.as_slice() {
        [] => [2, 256, 256, 4, 64],
        &[b, sq, sk, h, d] => [b, sq, sk, h, d],
        _ => return Err("expected 5 sizes: batch seqlen_q seqlen_k heads head_dim".into()),
    };

    println!("libflash {} ({})", flash::version_string(), flash::build_info());
    let cpu = flash::device_info(Device::Cpu)?;
    println!("cpu: {} ({} threads); cuda devices: {}", cpu.name, cpu.multiprocessors, flash::cuda_device_count()?);

    // Deterministic inputs in [-1, 1).
    let fill = |n: usize, seed: u64| -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    };
    let (q, k, v) = (fill(b * sq * h * d, 1), fill(b * sk * h * d, 2), fill(b * sk * h * d, 3));
    let (qs, kvs) = ([b, sq, h, d], [b, sk, h, d]);
    let options = Forward::new().causal(causal);

    let start = Instant::now();
    let (o, used): (Vec<f64>, _) = if use_bf16 {
        let cast = |x: &[f32]| x.iter().map(|&y| bf16::from_f32(y)).collect::<Vec<_>>();
        let (q, k, v) = (cast(&q), cast(&k), cast(&v));
        let mut o = vec![bf16::ZERO; q.len()];
        let used = options.run(
            &Tensor::new(&q, qs)?,
            &Tensor::new(&k, kvs)?,
            &Tensor::new(&v, kvs)?,
            &mut TensorMut::new(&mut o, qs)?,
        )?;
        (o.iter().map(|x| x.to_f64()).collect(), used)
    } else {
        let mut o = vec![0f32; q.len()];
        let used = options.run(
            &Tensor::new(&q, qs)?,
            &Tensor::new(&k, kvs)?,
            &Tensor::new(&v, kvs)?,
            &mut TensorMut::new(&mut o, qs)?,
        )?;
        (o.iter().map(|&x| x as f64).collect(), used)
    };
    let elapsed = start.elapsed();

    // Reference for batch 0, head 0 (bottom-right causal alignment, the default).
    let mut worst = 0f64;
    for i in 0..sq {
        let qi = &q[i * h * d..][..d];
        let visible = |j: usize| !causal || j as i64 <= i as i64 + sk as i64 - sq as i64;
        let scores: Vec<(usize, f64)> = (0..sk)
            .filter(|&j| visible(j))
            .map(|j| {
                (
                    j,
                    qi.iter().zip(&k[j * h * d..][..d]).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()
                        / (d as f64).sqrt(),
                )
            })
            .collect();
        let max = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = scores.iter().map(|s| (s.1 - max).exp()).sum();
        for c in 0..d {
            let want = if scores.is_empty() {
                0.0
            } else {
                scores.iter().map(|&(j, s)| (s - max).exp() / sum * v[j * h * d + c] as f64).sum()
            };
            worst = worst.max((o[i * h * d + c] - want).abs());
        }
    }
    println!(
        "forward [b={b}, sq={sq}, sk={sk}, h={h}, d={d}] {} causal={causal}: algorithm {used}, {:.2} ms, max |O - ref| (b0, h0) = {worst:.2e}",
        if use_bf16 { "bf16" } else { "fp32" },
        elapsed.as_secs_f64() * 1e3
    );
    let tol = if use_bf16 { 2e-2 } else { 1e-4 };
    if worst > tol {
        return Err(format!("error {worst:.2e} above {tol:.0e}").into());
    }
    Ok(())
}
