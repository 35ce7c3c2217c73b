//! A cache of executables per shape bucket: a request uses the smallest captured
//! bucket it fits in (padding the rest), buckets are captured largest first after warm-up runs
//! and share scratch memory, a memory budget evicts the least recently used bucket, and a bucket
//! that cannot be captured runs eagerly with its reason kept.
//!
//! Dispatch (which bucket, or eager) is kept apart from capture and replay, as in vLLM.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use crate::context::CaptureMode;
use crate::context::Context;
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::exec::Exec;
use crate::exec::{UpdateOutcome, UpdatePolicy};
use crate::memory::{Allocation, DeviceBuffer, Element};
use crate::stream::Stream;

/// The shape a request is bucketed by: a batch size, or (batch, sequence length), or your own.
pub trait ShapeKey: Clone + Ord + Debug {
    /// Whether a request of this shape can run in `bucket` (padded).
    fn fits_in(&self, bucket: &Self) -> bool;
    /// How much work the shape stands for (padded vs useful work is reported in these units).
    fn work(&self) -> u64;
}

impl ShapeKey for usize {
    fn fits_in(&self, bucket: &Self) -> bool {
        self <= bucket
    }
    fn work(&self) -> u64 {
        *self as u64
    }
}

impl ShapeKey for (usize, usize) {
    fn fits_in(&self, bucket: &Self) -> bool {
        self.0 <= bucket.0 && self.1 <= bucket.1
    }
    fn work(&self) -> u64 {
        self.0 as u64 * self.1 as u64
    }
}

/// The work a cache captures per bucket. Static inputs and outputs live in the implementor,
/// sized for the largest bucket.
pub trait Workload<K> {
    /// Issues the work for `shape` on `stream`. Called for warm-up runs (eagerly), under capture,
    /// and for eager runs; it must issue the same operations each time for the same shape.
    /// Scratch memory comes from `scope`, so that all buckets share it.
    fn issue(&mut self, stream: &Stream, shape: &K, scope: &mut Scope<'_>) -> Result<()>;
}

/// Numbered memory slots: the n-th request of a run gets the n-th slot, allocated on first use
/// (during a warm-up run, never under capture) and grown when a request is larger.
#[derive(Default)]
struct Slots {
    slots: Vec<Arc<Allocation>>,
}

impl Slots {
    fn bytes(&self) -> u64 {
        self.slots.iter().map(|a| a.bytes as u64).sum()
    }
}

/// Memory for one run of a [`Workload`]: shared scratch (one set for all buckets) and memory
/// private to the bucket being run.
pub struct Scope<'a> {
    ctx: &'a Context,
    shared: &'a mut Slots,
    private: &'a mut Slots,
    next_shared: usize,
    next_private: usize,
}

impl Scope<'_> {
    #[track_caller]
    fn take<T: Element>(
        ctx: &Context,
        slots: &mut Slots,
        next: &mut usize,
        label: &str,
        len: usize,
    ) -> Result<DeviceBuffer<T>> {
        let i = *next;
        *next += 1;
        // A slot is reused only when it holds `len` elements; a size that overflows never fits,
        // so `alloc` refuses it with a typed error.
        let fits = len
            .checked_mul(std::mem::size_of::<T>())
            .is_some_and(|bytes| slots.slots.get(i).is_some_and(|a| a.bytes >= bytes));
        if !fits {
            let fresh = ctx.alloc::<T>(label, len)?;
            if i < slots.slots.len() {
                slots.slots[i] = fresh.alloc.clone();
            } else {
                slots.slots.push(fresh.alloc.clone());
            }
        }
        Ok(DeviceBuffer::over(slots.slots[i].clone(), len))
    }

    /// Scratch memory shared by all buckets (buckets run one at a time on the cache's stream).
    #[track_caller]
    pub fn scratch<T: Element>(&mut self, label: &str, len: usize) -> Result<DeviceBuffer<T>> {
        Self::take(self.ctx, self.shared, &mut self.next_shared, label, len)
    }

    /// Memory owned by this bucket alone, counted in its share of the memory budget.
    #[track_caller]
    pub fn private<T: Element>(&mut self, label: &str, len: usize) -> Result<DeviceBuffer<T>> {
        Self::take(self.ctx, self.private, &mut self.next_private, label, len)
    }
}

/// What to do with a request larger than the largest bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Oversize {
    /// Refuse it with an error.
    Error,
    /// Run it eagerly, unpadded.
    Eager,
}

/// How a cache is set up.
#[derive(Clone, Debug)]
pub struct CacheConfig<K> {
    /// Capture sizes, e.g. 1, 2, 4, 8, 16, ...
    pub buckets: Vec<K>,
    /// Device memory the cache may hold: shared scratch plus each held bucket's private memory
    /// and the device memory its instantiation took.
    pub budget_bytes: u64,
    /// Eager runs of a bucket before it is captured (at least 1: it sizes the scratch memory).
    pub warmup_runs: usize,
    pub mode: CaptureMode,
    pub oversize: Oversize,
}

/// Counters of a cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub requests: u64,
    /// Requests served by a held executable.
    pub hits: u64,
    pub captures: u64,
    pub evictions: u64,
    /// Whole-graph updates applied in place by [`GraphCache::refresh`].
    pub updates: u64,
    /// Executables rebuilt by [`GraphCache::refresh`] because an update was impossible.
    pub reinstantiations: u64,
    /// Buckets that could not be captured and run eagerly.
    pub fallbacks: u64,
    /// Requests run eagerly (fallback buckets and oversize requests).
    pub eager_runs: u64,
    /// Sum of the requests' work, and of the work of the buckets that ran them.
    pub useful_work: u64,
    pub padded_work: u64,
}

/// How one request ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Path {
    /// Replayed the bucket's executable.
    Graph,
    /// Ran eagerly, for this reason.
    Eager { reason: String },
}

/// Where a request went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch<K> {
    /// The bucket it ran in (the request itself when oversize and eager).
    pub bucket: K,
    pub path: Path,
}

enum Entry {
    Held {
        exec: Box<Exec>,
        private: Slots,
        cost: u64,
        last_used: u64,
    },
    Eager {
        reason: Error,
    },
}

/// Executables per shape bucket. See the module docs.
pub struct GraphCache<K: ShapeKey, W: Workload<K>> {
    ctx: Context,
    stream: Stream,
    work: W,
    config: CacheConfig<K>,
    shared: Slots,
    entries: BTreeMap<K, Entry>,
    clock: u64,
    stats: CacheStats,
}

fn cache_object() -> ObjectRef {
    ObjectRef::new(ObjectKind::Graph, "graph-cache")
}

impl<K: ShapeKey, W: Workload<K>> GraphCache<K, W> {
    /// Sets up the cache and captures the largest bucket at once, so that a budget too small
    /// for one bucket is an error here, not at the first request.
    #[track_caller]
    pub fn new(ctx: &Context, config: CacheConfig<K>, work: W) -> Result<Self> {
        let at = SourceLine::caller();
        let op = "GraphCache::new";
        let bad =
            |reason: String| Error::new(ErrorKind::InvalidInput { reason }, cache_object(), op, at);
        let mut config = config;
        config.buckets.sort();
        config.buckets.dedup();
        let Some(largest) = config.buckets.iter().max_by_key(|b| b.work()).cloned() else {
            return Err(bad("no buckets given".into()));
        };
        if config.warmup_runs == 0 {
            return Err(bad(
                "warmup_runs must be at least 1: the first run sizes the scratch memory".into(),
            ));
        }
        let stream = ctx.stream("graph-cache")?;
        let mut cache = GraphCache {
            ctx: ctx.clone(),
            stream,
            work,
            config,
            shared: Slots::default(),
            entries: BTreeMap::new(),
            clock: 0,
            stats: CacheStats::default(),
        };
        cache.prepare(&largest)?;
        if let Some(Entry::Eager { reason }) = cache.entries.get(&largest) {
            return Err(bad(format!(
                "the largest bucket {largest:?} cannot be captured: {reason}"
            )));
        }
        let held = cache.held_bytes();
        if held > cache.config.budget_bytes {
            return Err(bad(format!(
                "the memory budget of {} bytes is too small for one bucket: bucket {largest:?} needs {held} bytes (shared scratch {} + its own {})",
                cache.config.budget_bytes,
                cache.shared.bytes(),
                held - cache.shared.bytes()
            )));
        }
        Ok(cache)
    }

    /// The smallest bucket (by work) that `key` fits in.
    pub fn bucket_for(&self, key: &K) -> Option<K> {
        self.config
            .buckets
            .iter()
            .filter(|b| key.fits_in(b))
            .min_by_key(|b| b.work())
            .cloned()
    }

    /// Runs a request: its bucket's executable, capturing the bucket first if it is not held.
    #[track_caller]
    pub fn run(&mut self, key: &K) -> Result<Dispatch<K>> {
        self.run_with(key, |_, _, _| Ok(()))
    }

    /// Like [`GraphCache::run`], calling `prepare(stream, work, bucket)` first (e.g. to write and
    /// pad the static inputs for the chosen bucket).
    #[track_caller]
    pub fn run_with(
        &mut self,
        key: &K,
        prepare: impl FnOnce(&Stream, &mut W, &K) -> Result<()>,
    ) -> Result<Dispatch<K>> {
        let at = SourceLine::caller();
        self.stats.requests += 1;
        self.clock += 1;
        let Some(bucket) = self.bucket_for(key) else {
            return match self.config.oversize {
                Oversize::Error => Err(Error::new(
                    ErrorKind::InvalidInput {
                        reason: format!(
                            "request {key:?} is larger than every bucket (largest {:?})",
                            self.config.buckets.last()
                        ),
                    },
                    cache_object(),
                    "GraphCache::run",
                    at,
                )),
                Oversize::Eager => {
                    prepare(&self.stream, &mut self.work, key)?;
                    self.run_eagerly(key, key)?;
                    Ok(Dispatch {
                        bucket: key.clone(),
                        path: Path::Eager {
                            reason: "larger than every bucket".into(),
                        },
                    })
                }
            };
        };
        self.stats.useful_work += key.work();
        self.stats.padded_work += bucket.work();
        if self.entries.contains_key(&bucket) {
            if matches!(self.entries.get(&bucket), Some(Entry::Held { .. })) {
                self.stats.hits += 1;
            }
        } else {
            self.prepare(&bucket)?;
        }
        prepare(&self.stream, &mut self.work, &bucket)?;
        let clock = self.clock;
        match self.entries.get_mut(&bucket) {
            Some(Entry::Held {
                exec, last_used, ..
            }) => {
                *last_used = clock;
                exec.launch(&self.stream)?;
                Ok(Dispatch {
                    bucket,
                    path: Path::Graph,
                })
            }
            Some(Entry::Eager { reason }) => {
                let reason = reason.to_string();
                self.run_eagerly(key, &bucket)?;
                Ok(Dispatch {
                    bucket,
                    path: Path::Eager { reason },
                })
            }
            None => unreachable!("prepare() leaves an entry for the bucket"),
        }
    }

    fn run_eagerly(&mut self, _key: &K, shape: &K) -> Result<()> {
        self.stats.eager_runs += 1;
        let mut private = Slots::default();
        let mut scope = Scope {
            ctx: &self.ctx,
            shared: &mut self.shared,
            private: &mut private,
            next_shared: 0,
            next_private: 0,
        };
        self.work.issue(&self.stream, shape, &mut scope)
    }

    /// Warms up, captures and instantiates `bucket`, then evicts least recently used buckets
    /// until the cache fits its budget. A capture failure leaves an eager entry with its reason.
    fn prepare(&mut self, bucket: &K) -> Result<()> {
        let mut private = Slots::default();
        for _ in 0..self.config.warmup_runs {
            let mut scope = Scope {
                ctx: &self.ctx,
                shared: &mut self.shared,
                private: &mut private,
                next_shared: 0,
                next_private: 0,
            };
            self.work.issue(&self.stream, bucket, &mut scope)?;
        }
        self.stream.synchronize()?;
        let (free_before, _) = self.ctx.memory_info()?;
        let label = format!("bucket-{bucket:?}");
        let captured = self
            .capture(bucket, &label, &mut private)
            .and_then(|graph| {
                let mut exec = graph.into_exec()?;
                exec.upload(&self.stream)?;
                Ok(exec)
            });
        let exec = match captured {
            Ok(exec) => exec,
            Err(reason) => {
                self.stats.fallbacks += 1;
                self.entries.insert(bucket.clone(), Entry::Eager { reason });
                return Ok(());
            }
        };
        self.stream.synchronize()?;
        let (free_after, _) = self.ctx.memory_info()?;
        let cost = private.bytes() + free_before.saturating_sub(free_after) as u64;
        self.stats.captures += 1;
        self.entries.insert(
            bucket.clone(),
            Entry::Held {
                exec: Box::new(exec),
                private,
                cost,
                last_used: self.clock,
            },
        );
        self.evict_for(bucket);
        Ok(())
    }

    fn capture(&mut self, bucket: &K, label: &str, private: &mut Slots) -> Result<crate::Graph> {
        self.stream.begin_capture(self.config.mode, label)?;
        let mut scope = Scope {
            ctx: &self.ctx,
            shared: &mut self.shared,
            private,
            next_shared: 0,
            next_private: 0,
        };
        let issued = self.work.issue(&self.stream, bucket, &mut scope);
        let ended = self.stream.end_capture();
        issued?;
        ended
    }

    /// Evicts least recently used held buckets (never `keep`) while over budget.
    fn evict_for(&mut self, keep: &K) {
        while self.held_bytes() > self.config.budget_bytes {
            let victim = self
                .entries
                .iter()
                .filter_map(|(k, e)| match e {
                    Entry::Held { last_used, .. } if k != keep => Some((*last_used, k.clone())),
                    _ => None,
                })
                .min();
            match victim {
                Some((_, k)) => {
                    self.entries.remove(&k);
                    self.stats.evictions += 1;
                }
                None => break,
            }
        }
    }

    /// Re-captures every held bucket from the workload's current state (e.g. after it switched
    /// to new weights) and updates each executable in place, or per `policy`.
    #[track_caller]
    pub fn refresh(&mut self, policy: UpdatePolicy) -> Result<()> {
        let buckets: Vec<K> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Held { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        for bucket in buckets {
            let Some(Entry::Held {
                mut exec,
                mut private,
                cost,
                last_used,
            }) = self.entries.remove(&bucket)
            else {
                continue;
            };
            let label = format!("bucket-{bucket:?}");
            let result = self
                .capture(&bucket, &label, &mut private)
                .and_then(|graph| exec.update(&graph, policy));
            match result {
                Ok(UpdateOutcome::Updated) => self.stats.updates += 1,
                Ok(UpdateOutcome::Reinstantiated { .. }) => self.stats.reinstantiations += 1,
                Err(e) => {
                    self.entries.insert(
                        bucket,
                        Entry::Held {
                            exec,
                            private,
                            cost,
                            last_used,
                        },
                    );
                    return Err(e);
                }
            }
            self.entries.insert(
                bucket,
                Entry::Held {
                    exec,
                    private,
                    cost,
                    last_used,
                },
            );
        }
        Ok(())
    }

    /// Device memory held: shared scratch plus every held bucket's cost.
    pub fn held_bytes(&self) -> u64 {
        self.shared.bytes()
            + self
                .entries
                .values()
                .map(|e| {
                    if let Entry::Held { cost, .. } = e {
                        *cost
                    } else {
                        0
                    }
                })
                .sum::<u64>()
    }
    /// Buckets with a held executable.
    pub fn held_buckets(&self) -> Vec<K> {
        self.entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Held { .. }))
            .map(|(k, _)| k.clone())
            .collect()
    }
    /// Why a bucket runs eagerly, if it does.
    pub fn fallback_reason(&self, bucket: &K) -> Option<&Error> {
        match self.entries.get(bucket) {
            Some(Entry::Eager { reason }) => Some(reason),
            _ => None,
        }
    }
    /// The held executable of a bucket.
    pub fn exec(&self, bucket: &K) -> Option<&Exec> {
        match self.entries.get(bucket) {
            Some(Entry::Held { exec, .. }) => Some(exec),
            _ => None,
        }
    }
    /// The held executable of a bucket, to change it in place (e.g. [`Exec::relocate`]).
    pub fn exec_mut(&mut self, bucket: &K) -> Option<&mut Exec> {
        match self.entries.get_mut(bucket) {
            Some(Entry::Held { exec, .. }) => Some(exec),
            _ => None,
        }
    }
    pub fn stats(&self) -> CacheStats {
        self.stats
    }
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
    pub fn work(&self) -> &W {
        &self.work
    }
    /// The stream and the workload together (to write inputs or read outputs).
    pub fn parts(&mut self) -> (&Stream, &mut W) {
        (&self.stream, &mut self.work)
    }
    pub fn config(&self) -> &CacheConfig<K> {
        &self.config
    }
}
