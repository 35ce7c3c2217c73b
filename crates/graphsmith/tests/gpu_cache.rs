//! GPU tests: the bucketed executable cache (padding, shared scratch, budget with LRU eviction,
//! eager fallback, oversize policy, refresh after a weight swap).

mod common;

use std::collections::BTreeSet;

use common::{assert_same, inputs, Gpu};
use graphsmith::{
    args, CacheConfig, CaptureMode, DeviceBuffer, ErrorKind, GraphCache, Kernel, LaunchConfig,
    Oversize, Path, Scope, Stream, UpdatePolicy, Workload,
};
use graphsmith_workloads::PROJ_KERNEL;

const D: usize = 32;
const MAX_BATCH: usize = 32;

/// Two projections per row: h = W1 x, y = W2 h, one kernel per row and layer, so each bucket
/// has its own topology. `h` lives in shared scratch; `pad_bytes_per_row` of private memory per
/// bucket row makes bucket costs known for the budget tests.
struct Mlp {
    proj: Kernel,
    x: DeviceBuffer<f32>,
    w: [DeviceBuffer<f32>; 2],
    y: DeviceBuffer<f32>,
    pad_floats_per_row: usize,
    fail_above: Option<usize>,
}

impl Workload<usize> for Mlp {
    fn issue(
        &mut self,
        stream: &Stream,
        rows: &usize,
        scope: &mut Scope<'_>,
    ) -> graphsmith::Result<()> {
        let mut h = scope.scratch::<f32>("h", MAX_BATCH * D)?;
        if self.pad_floats_per_row > 0 {
            let _pad = scope.private::<f32>("pad", rows * self.pad_floats_per_row)?;
        }
        if self.fail_above.is_some_and(|limit| *rows > limit) {
            // A forbidden call inside the capture (it is fine eagerly).
            stream.synchronize()?;
        }
        let cfg = LaunchConfig::for_elements(D as u32);
        let d = D as i32;
        for r in 0..*rows {
            let row = r * D..(r + 1) * D;
            stream.launch(
                &format!("l1-row{r}"),
                &self.proj,
                cfg,
                args![
                    self.x.slice(row.clone()),
                    &self.w[0],
                    h.slice_mut(row.clone()),
                    d,
                    d
                ],
            )?;
            stream.launch(
                &format!("l2-row{r}"),
                &self.proj,
                cfg,
                args![
                    h.slice(row.clone()),
                    &self.w[1],
                    self.y.slice_mut(row),
                    d,
                    d
                ],
            )?;
        }
        Ok(())
    }
}

fn host_mlp(x: &[f32], w1: &[f32], w2: &[f32], rows: usize) -> Vec<f32> {
    let mv = |w: &[f32], v: &[f32]| -> Vec<f32> {
        (0..D)
            .map(|r| (0..D).fold(0.0f32, |acc, c| acc + w[r * D + c] * v[c]))
            .collect()
    };
    (0..rows)
        .flat_map(|r| mv(w2, &mv(w1, &x[r * D..(r + 1) * D])))
        .collect()
}

fn mlp(gpu: &Gpu, w1: &[f32], w2: &[f32], pad: usize) -> Mlp {
    Mlp {
        proj: gpu.kernel(PROJ_KERNEL),
        x: gpu.poisoned("x", MAX_BATCH * D),
        w: [gpu.buffer("w1", w1), gpu.buffer("w2", w2)],
        y: gpu.poisoned("y", MAX_BATCH * D),
        pad_floats_per_row: pad,
        fail_above: None,
    }
}

fn config(budget: u64) -> CacheConfig<usize> {
    CacheConfig {
        buckets: vec![1, 2, 4, 8, 16, 32],
        budget_bytes: budget,
        warmup_runs: 1,
        mode: CaptureMode::Global,
        oversize: Oversize::Error,
    }
}

/// Writes `rows` rows of input, padded with zeros up to the bucket, and poisons the output.
fn write_input(stream: &Stream, work: &mut Mlp, x: &[f32]) -> graphsmith::Result<()> {
    let mut padded = x.to_vec();
    padded.resize(MAX_BATCH * D, 0.0);
    stream.upload(&mut work.x, &padded)?;
    stream.upload(&mut work.y, &vec![common::POISON; MAX_BATCH * D])
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_bucket_matches_eager_execution_on_the_unpadded_input() {
    let gpu = Gpu::new();
    let (w1, w2) = (inputs(D * D, 1), inputs(D * D, 2));
    let mut cache = GraphCache::new(&gpu.ctx, config(u64::MAX), mlp(&gpu, &w1, &w2, 0)).unwrap();
    for rows in 1..=MAX_BATCH {
        let x = inputs(rows * D, 100 + rows as u32);
        let dispatch = cache
            .run_with(&rows, |s, w, _| write_input(s, w, &x))
            .unwrap();
        assert_eq!(dispatch.path, Path::Graph);
        assert_eq!(dispatch.bucket, rows.next_power_of_two());
        let (stream, work) = cache.parts();
        let got = stream.download(&work.y).unwrap();
        assert_same(
            &format!("rows {rows}"),
            &got[..rows * D],
            &host_mlp(&x, &w1, &w2, rows),
        );
    }
    let s = cache.stats();
    assert_eq!(s.captures, 6);
    assert_eq!(
        s.hits,
        32 - 5,
        "every request after a bucket's first is a hit"
    );
    assert!(s.padded_work > s.useful_work);
    println!("{s:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ten_thousand_random_requests_stay_in_budget_and_never_recapture_a_held_bucket() {
    let gpu = Gpu::new();
    let (w1, w2) = (inputs(D * D, 3), inputs(D * D, 4));
    // Each bucket row owns 1 MiB of private memory: bucket b costs b MiB (plus what its
    // instantiation takes). The budget holds the largest bucket and a few small ones.
    let pad = (1 << 20) / 4;
    let budget = 48u64 << 20;
    let mut cache = GraphCache::new(&gpu.ctx, config(budget), mlp(&gpu, &w1, &w2, pad)).unwrap();
    let mut rng = 12345u64;
    let mut evictions_seen = 0;
    for i in 0..10_000 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let rows = 1 + (rng >> 33) as usize % MAX_BATCH;
        let bucket = cache.bucket_for(&rows).unwrap();
        let held_before: BTreeSet<usize> = cache.held_buckets().into_iter().collect();
        let captures_before = cache.stats().captures;
        let x = inputs(rows * D, i);
        let check = i % 500 == 0;
        cache
            .run_with(
                &rows,
                |s, w, _| if check { write_input(s, w, &x) } else { Ok(()) },
            )
            .unwrap();
        let captured = cache.stats().captures - captures_before;
        if held_before.contains(&bucket) {
            assert_eq!(
                captured, 0,
                "request {i}: bucket {bucket} was held but captured again"
            );
        } else {
            assert_eq!(
                captured, 1,
                "request {i}: bucket {bucket} was not held and must be captured"
            );
        }
        assert!(
            cache.held_bytes() <= budget,
            "request {i}: {} bytes held, budget {budget}",
            cache.held_bytes()
        );
        if check {
            let (stream, work) = cache.parts();
            let got = stream.download(&work.y).unwrap();
            assert_same(
                &format!("request {i} ({rows} rows)"),
                &got[..rows * D],
                &host_mlp(&x, &w1, &w2, rows),
            );
        }
        evictions_seen = cache.stats().evictions;
    }
    println!(
        "{:?}, held {} bytes of {budget}",
        cache.stats(),
        cache.held_bytes()
    );
    assert!(evictions_seen > 0, "the budget must have forced evictions");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_bucket_that_cannot_be_captured_runs_eagerly_with_its_reason() {
    let gpu = Gpu::new();
    let (w1, w2) = (inputs(D * D, 5), inputs(D * D, 6));
    let mut work = mlp(&gpu, &w1, &w2, 0);
    work.fail_above = Some(8); // buckets 16 and 32 synchronize inside their capture
                               // The largest bucket cannot be captured: a configuration error.
    let err = GraphCache::new(&gpu.ctx, config(u64::MAX), work)
        .err()
        .unwrap();
    println!("{err}");
    assert!(matches!(err.kind, ErrorKind::InvalidInput { .. }), "{err}");

    let mut work = mlp(&gpu, &w1, &w2, 0);
    work.fail_above = Some(8);
    let mut cfg = config(u64::MAX);
    cfg.buckets = vec![1, 2, 4, 8, 16];
    cfg.buckets.retain(|&b| b <= 8);
    let mut cache = GraphCache::new(&gpu.ctx, cfg, work).unwrap();
    // Now oversize requests: refused by policy Error.
    let err = cache.run(&9).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::InvalidInput { .. }), "{err}");

    let mut work = mlp(&gpu, &w1, &w2, 0);
    work.fail_above = Some(8);
    let mut cfg = config(u64::MAX);
    cfg.buckets = vec![4, 16, 8];
    cfg.oversize = Oversize::Eager;
    // Largest (16) fails to capture -> configuration error again; use largest that works.
    assert!(GraphCache::new(&gpu.ctx, cfg.clone(), work).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fallback_bucket_and_oversize_requests_run_eagerly_and_correctly() {
    let gpu = Gpu::new();
    let (w1, w2) = (inputs(D * D, 7), inputs(D * D, 8));
    let mut work = mlp(&gpu, &w1, &w2, 0);
    work.fail_above = Some(4); // bucket 8 cannot be captured; 16 is the largest and must be...
    work.fail_above = None;
    let mut cfg = config(u64::MAX);
    cfg.buckets = vec![4, 8, 16];
    cfg.oversize = Oversize::Eager;
    let mut cache = GraphCache::new(&gpu.ctx, cfg, work).unwrap();
    // Make bucket 8 fail from now on (it is not captured yet).
    cache.parts().1.fail_above = Some(4);
    let x = inputs(6 * D, 9);
    let d = cache.run_with(&6, |s, w, _| write_input(s, w, &x)).unwrap();
    let Path::Eager { reason } = &d.path else {
        panic!("{d:?}")
    };
    println!("bucket 8 runs eagerly: {reason}");
    assert!(cache.fallback_reason(&8).is_some());
    let got = cache.stream().download(&cache.work().y).unwrap();
    assert_same("eager fallback", &got[..6 * D], &host_mlp(&x, &w1, &w2, 6));
    // Oversize, eager by policy, unpadded.
    cache.parts().1.fail_above = None;
    let x = inputs(20 * D, 10);
    let d = cache
        .run_with(&20, |s, w, _| write_input(s, w, &x))
        .unwrap();
    assert_eq!(d.bucket, 20);
    assert!(matches!(d.path, Path::Eager { .. }));
    let got = cache.stream().download(&cache.work().y).unwrap();
    assert_same(
        "oversize eager",
        &got[..20 * D],
        &host_mlp(&x, &w1, &w2, 20),
    );
    assert_eq!(cache.stats().fallbacks, 1);
    assert_eq!(cache.stats().eager_runs, 2);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn budget_too_small_for_one_bucket_is_a_configuration_error() {
    let gpu = Gpu::new();
    let (w1, w2) = (inputs(D * D, 11), inputs(D * D, 12));
    let err = GraphCache::new(
        &gpu.ctx,
        config(1 << 20),
        mlp(&gpu, &w1, &w2, (1 << 20) / 4),
    )
    .err()
    .unwrap();
    println!("{err}");
    let ErrorKind::InvalidInput { reason } = &err.kind else {
        panic!("{err}")
    };
    assert!(reason.contains("too small for one bucket"), "{reason}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn refresh_after_a_weight_swap_updates_in_place() {
    let gpu = Gpu::new();
    let (w1, w2) = (inputs(D * D, 13), inputs(D * D, 14));
    let (v1, v2) = (inputs(D * D, 15), inputs(D * D, 16));
    let mut cache = GraphCache::new(&gpu.ctx, config(u64::MAX), mlp(&gpu, &w1, &w2, 0)).unwrap();
    let x = inputs(3 * D, 17);
    cache.run_with(&3, |s, w, _| write_input(s, w, &x)).unwrap();
    // Swap the weights: new buffers, so the captured pointers change.
    {
        let (stream, work) = cache.parts();
        let mut a = gpu.ctx.alloc::<f32>("v1", D * D).unwrap();
        let mut b = gpu.ctx.alloc::<f32>("v2", D * D).unwrap();
        stream.upload(&mut a, &v1).unwrap();
        stream.upload(&mut b, &v2).unwrap();
        work.w = [a, b];
    }
    cache.refresh(UpdatePolicy::InPlace).unwrap();
    let s = cache.stats();
    assert_eq!((s.updates, s.reinstantiations), (2, 0), "{s:?}");
    cache.run_with(&3, |s, w, _| write_input(s, w, &x)).unwrap();
    let got = cache.stream().download(&cache.work().y).unwrap();
    assert_same("after swap", &got[..3 * D], &host_mlp(&x, &v1, &v2, 3));
}
