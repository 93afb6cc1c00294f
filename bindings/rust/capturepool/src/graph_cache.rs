//! Graph caches: graphs of one pool kept by the caller's key under a byte
//! budget (`cpool_graph_cache`).
use std::sync::Arc;

use capturepool_sys as sys;

use crate::error::{Error, Result, Status};
use crate::ffi_safety::{EvictFn, RawGraphCache};
use crate::{CaptureMode, CapturePool, CapturedGraph, Stream};

/// A cache's bounds (`cpool_graph_cache_options`); `Default` is no bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphCacheOptions {
    /// Bound on the pool's `graph_reserved_bytes` after each launch, in
    /// bytes (physical, as `PoolStats` counts them); 0: none.
    pub max_bytes: u64,
    /// Bound on the graphs kept; 0: none.
    pub max_graphs: u32,
}

/// A cache's counters (`cpool_graph_cache_stats`): `graphs` kept now,
/// `hits`, `misses`, `evictions`, and `graph_bytes`, the pool's
/// `graph_reserved_bytes` now.
pub type GraphCacheStats = sys::cpool_graph_cache_stats;

/// Graphs of one pool kept by the caller's key (a batch size, a shape
/// hash): [`launch`](GraphCache::launch) launches the key's graph, capturing
/// it first on a miss, then evicts the least recently launched other graphs
/// until `max_bytes` and `max_graphs` hold (include/capturepool.h states
/// the promises; docs/GUIDE.md, "Graph cache").
///
/// Dropping it ends the cache: `on_evict` runs for every graph kept, then
/// the graphs go. It holds its pool.
///
/// `Send + Sync`: the C cache is safe to call from several threads, and the
/// `on_evict` closure is `Send`; it runs on whichever thread's call evicts,
/// one call at a time.
///
/// Panics never unwind through the C library: a panic of the body discards
/// the capture (nothing is kept, evicted or counted) and is resumed once
/// the C call returned. A panic of `on_evict` is caught there; the eviction
/// goes on as if it had returned (the graph leaves, the next ones are
/// evicted, the launch runs), and the first such panic is resumed once the
/// C call returned, with the cache's state and counters those of a
/// completed call. In `drop` it is resumed too, unless the thread is
/// already panicking (then it is reported on stderr).
///
/// ```no_run
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use capturepool::*;
///
/// # fn main() -> capturepool::Result<()> {
/// let device = Device::open(Backend::Auto, 0)?;
/// let stream = &Stream::new(&device)?;
/// let pool = Arc::new(CapturePool::on(&device)?);
/// let outputs: Arc<Mutex<HashMap<u64, DeviceBuffer<f32>>>> = Arc::default();
/// let kept = Arc::clone(&outputs);
/// let options = GraphCacheOptions { max_bytes: 512 << 20, max_graphs: 0 };
/// let cache = GraphCache::with_on_evict(&pool, options, move |batch, _graph| {
///     kept.lock().unwrap().remove(&batch); // frees the evicted graph's output
/// })?;
/// let batch = 8;
/// let hit = cache.launch(batch, stream, |s| {
///     let out = pool.alloc::<f32>(batch as usize * 1024, s)?; // kept by the graph
///     out.memset(0, s)?;
///     outputs.lock().unwrap().insert(batch, out);
///     Ok(())
/// })?;
/// assert!(!hit);
/// # Ok(())
/// # }
/// ```
pub struct GraphCache {
    raw: RawGraphCache,
    pool: Arc<CapturePool>,
}

impl GraphCache {
    /// A cache of graphs captured into `pool`, with no `on_evict`: an
    /// evicted graph's outputs (allocations it did not free) stay live
    /// until their owner frees them.
    pub fn new(pool: &Arc<CapturePool>, options: GraphCacheOptions) -> Result<GraphCache> {
        GraphCache::create(pool, options, None)
    }

    /// A cache whose `on_evict(key, graph)` runs as a graph leaves it
    /// (evicted, or the cache dropped), before the cache's reference goes:
    /// where the caller frees that graph's outputs. `graph` holds a
    /// reference of its own (it knows its pool, not its stream: launch it
    /// with `launch_on`).
    ///
    /// `on_evict` may not launch or evict on this cache
    /// (`InvalidArgument`); it may use other caches and free memory. Where
    /// two threads miss one key at once, the graph of the later capture goes
    /// to `on_evict` while the key stays kept (counted as a miss, not an
    /// eviction): tell the graphs apart by `id()` where that matters.
    pub fn with_on_evict<F>(pool: &Arc<CapturePool>, options: GraphCacheOptions, on_evict: F) -> Result<GraphCache>
    where
        F: FnMut(u64, CapturedGraph) + Send + 'static,
    {
        let mut on_evict = on_evict;
        let owner = Arc::clone(pool);
        let hook: EvictFn = Box::new(move |key, raw| on_evict(key, CapturedGraph::kept(raw, Arc::clone(&owner))));
        GraphCache::create(pool, options, Some(hook))
    }

    fn create(pool: &Arc<CapturePool>, options: GraphCacheOptions, hook: Option<EvictFn>) -> Result<GraphCache> {
        let raw = RawGraphCache::create(&pool.raw, options.max_bytes, options.max_graphs, hook)?;
        Ok(GraphCache { raw, pool: Arc::clone(pool) })
    }

    /// Launches the graph kept under `key` on `stream`; on a miss, first
    /// captures `body` (global capture mode) and keeps it. `Ok(true)` for
    /// a hit. A body's `Err` discards the capture and is returned.
    /// Threads that may capture at the same time must use
    /// [`launch_with_mode`](GraphCache::launch_with_mode) with
    /// `CaptureMode::ThreadLocal` (CUDA's rule: a global-mode capture
    /// makes the other threads' instantiates fail).
    pub fn launch<F>(&self, key: u64, stream: &Stream, body: F) -> Result<bool>
    where
        F: FnOnce(&Stream) -> Result<()>,
    {
        self.launch_with_mode(key, stream, CaptureMode::Global, body)
    }

    /// `launch`, capturing in `mode`.
    pub fn launch_with_mode<F>(&self, key: u64, stream: &Stream, mode: CaptureMode, body: F) -> Result<bool>
    where
        F: FnOnce(&Stream) -> Result<()>,
    {
        let mut body = Some(body);
        self.raw.launch(key, stream, mode.code(), |s| match body.take() {
            Some(f) => f(s),
            None => Err(Error::refused(Status::InvalidArgument, "GraphCache::launch: the body ran twice")),
        })
    }

    /// The graph kept under `key`, with a reference of its own; `None` if
    /// none. Not a launch: the order of eviction and the counters stay.
    pub fn get(&self, key: u64) -> Result<Option<CapturedGraph>> {
        Ok(self.raw.get(key)?.map(|raw| CapturedGraph::kept(raw, Arc::clone(&self.pool))))
    }

    /// Evicts the graph kept under `key` (`on_evict` first); `Ok` also
    /// where none is.
    pub fn evict(&self, key: u64) -> Result<()> {
        self.raw.evict(key)
    }

    /// The cache's counters now.
    pub fn stats(&self) -> Result<GraphCacheStats> {
        self.raw.stats()
    }

    /// The pool's `graph_reserved_bytes` with one more graph that allocates
    /// `output_bytes` of outputs (first) and then `scratch_bytes` of
    /// scratch it frees before its capture ends: what one more key would
    /// cost, to plan keys against `max_bytes` (exact to within a page while
    /// no launch of the pool's graphs runs). Changes nothing.
    pub fn predict_bytes(&self, scratch_bytes: u64, output_bytes: u64) -> Result<u64> {
        self.raw.predict_bytes(scratch_bytes, output_bytes)
    }

    /// The pool its graphs are captured into.
    pub fn pool(&self) -> &Arc<CapturePool> {
        &self.pool
    }
}

impl std::fmt::Debug for GraphCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("GraphCache");
        if let Ok(st) = self.stats() {
            d.field("graphs", &st.graphs).field("graph_bytes", &st.graph_bytes);
        }
        d.finish()
    }
}
