//! Capture and graphs: the seed's `begin_capture_with_pool`,
//! `end_capture_with_pool` and `CapturedGraph`, a scoped guard, and the
//! library's scoped capture and graphed calls.
use std::path::Path;
use std::sync::{Arc, Weak};

use capturepool_sys as sys;

use crate::error::{Error, Result, Status};
use crate::ffi_safety::{self, RawGraph, RawStream, StreamHandle};
use crate::{CapturePool, Stream};

/// How a capture treats unsafe calls on other threads (`cpool_capture_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMode {
    #[default]
    Global,
    ThreadLocal,
    Relaxed,
}

impl CaptureMode {
    pub(crate) fn code(self) -> sys::cpool_capture_mode {
        match self {
            CaptureMode::Global => sys::CPOOL_CAPTURE_GLOBAL,
            CaptureMode::ThreadLocal => sys::CPOOL_CAPTURE_THREAD_LOCAL,
            CaptureMode::Relaxed => sys::CPOOL_CAPTURE_RELAXED,
        }
    }
}

/// A stream's capture state (`cpool_capture_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureState {
    None,
    Active,
    Invalidated,
}

/// A graph's share of its pools' memory (`cpool_graph_stats`).
pub type GraphStats = sys::cpool_graph_stats;

/// Starts capturing the work enqueued on `stream` into a graph, bound to
/// `pool` (global capture mode). A sealed pool is accepted: the capture can
/// then allocate nothing from it. End it with [`end_capture_with_pool`] on
/// the same thread.
pub fn begin_capture_with_pool(pool: &CapturePool, stream: &Stream) -> Result<()> {
    ffi_safety::capture_begin(&stream.raw, Some(&pool.raw), sys::CPOOL_CAPTURE_GLOBAL)
}

/// Ends the capture on `stream` and instantiates its graph, which holds the
/// pool (`Arc`, and its own reference of the C pool): the caller may drop its
/// `pool` right after.
pub fn end_capture_with_pool(stream: &Stream, pool: Arc<CapturePool>) -> Result<CapturedGraph> {
    let raw = ffi_safety::capture_end(&stream.raw)?;
    Ok(CapturedGraph::new(raw, stream, Some(pool)))
}

/// Scoped capture (`cpool_capture`): begins, runs `body` with the stream,
/// ends. If `body` returns an `Err` (or panics), the capture is discarded
/// and that error returned (the panic resumed); the stream is usable again.
pub fn capture<F>(stream: &Stream, pool: Option<&Arc<CapturePool>>, mode: CaptureMode, body: F) -> Result<CapturedGraph>
where
    F: FnOnce(&Stream) -> Result<()>,
{
    let mut body = Some(body);
    let raw = ffi_safety::capture_scoped(stream, pool.map(|p| &p.raw), mode.code(), |s| match body.take() {
        Some(f) => f(s),
        None => Err(Error::refused(Status::InvalidArgument, "capture: the body ran twice")),
    })?;
    Ok(CapturedGraph::new(raw, stream, pool.cloned()))
}

/// A graphed call (`cpool_graphed_call`): runs `body` eagerly `warmup_runs`
/// times on `stream`, then captures it once with `pool`; the last eager run
/// shows which allocations are outputs, so graphed calls into one pool
/// replay in any order while sharing their scratch.
pub fn graphed_call<F>(
    stream: &Stream,
    pool: &Arc<CapturePool>,
    mode: CaptureMode,
    warmup_runs: u32,
    body: F,
) -> Result<CapturedGraph>
where
    F: FnMut(&Stream) -> Result<()>,
{
    let warmup = i32::try_from(warmup_runs)
        .map_err(|_| Error::refused(Status::InvalidArgument, "graphed_call: warmup_runs above i32::MAX"))?;
    let raw = ffi_safety::graphed_call(stream, &pool.raw, mode.code(), warmup, body)?;
    Ok(CapturedGraph::new(raw, stream, Some(Arc::clone(pool))))
}

/// An instantiated graph (`cpool_graph`), released when dropped (its pool's
/// buffers go when that was the pool's last reference).
///
/// It remembers the stream it was captured on without keeping it alive:
/// `launch` and `upload` use that stream while it exists and return
/// `InvalidArgument` once it was dropped; `launch_on` takes any stream.
/// A graph handed out by a [`GraphCache`](crate::GraphCache) knows no such
/// stream (`launch` and `upload` return `InvalidArgument`): use `launch_on`.
pub struct CapturedGraph {
    raw: RawGraph,
    stream: Option<Weak<RawStream>>,
    /// The capture stream's handle, for a launch that takes no reference.
    stream_handle: Option<StreamHandle>,
    pool: Option<Arc<CapturePool>>,
}

impl CapturedGraph {
    fn new(raw: RawGraph, stream: &Stream, pool: Option<Arc<CapturePool>>) -> CapturedGraph {
        CapturedGraph {
            raw,
            stream: Some(Arc::downgrade(&stream.raw)),
            stream_handle: Some(stream.raw.handle()),
            pool,
        }
    }

    /// A graph of a cache's, captured into `pool` on a stream it does not know.
    pub(crate) fn kept(raw: RawGraph, pool: Arc<CapturePool>) -> CapturedGraph {
        CapturedGraph { raw, stream: None, stream_handle: None, pool: Some(pool) }
    }

    fn capture_stream(&self, what: &str) -> Result<Arc<RawStream>> {
        let Some(stream) = &self.stream else {
            return Err(Error::refused(
                Status::InvalidArgument,
                format!("CapturedGraph::{what}: a graph of a GraphCache knows no stream of its own: use {what}_on"),
            ));
        };
        stream.upgrade().ok_or_else(|| {
            Error::refused(Status::InvalidArgument, format!("CapturedGraph::{what}: the stream it was captured on is destroyed"))
        })
    }

    /// Launches the graph on the stream it was captured on.
    pub fn launch(&self) -> Result<()> {
        let Some(handle) = self.stream_handle else {
            return self.capture_stream("launch").map(|_| ());
        };
        // A stream dropped since is refused by the library; the error then
        // says which stream.
        self.raw.launch_on_handle(handle).map_err(|e| match self.capture_stream("launch") {
            Err(dead) => dead,
            Ok(_) => e,
        })
    }

    /// Uploads the graph ahead of its first launch, on the stream it was
    /// captured on (a no-op on the host backend).
    pub fn upload(&self) -> Result<()> {
        self.raw.upload(&*self.capture_stream("upload")?)
    }

    /// Launches the graph on `stream`.
    pub fn launch_on(&self, stream: &Stream) -> Result<()> {
        self.raw.launch(&stream.raw)
    }

    /// Uploads the graph on `stream`.
    pub fn upload_on(&self, stream: &Stream) -> Result<()> {
        self.raw.upload(&stream.raw)
    }

    /// Number of successful launches.
    pub fn num_replays(&self) -> u64 {
        self.raw.replays()
    }

    /// The graph's id, unique for the process's life.
    pub fn id(&self) -> u64 {
        self.raw.id()
    }

    /// The pool given at its capture, if any.
    pub fn pool(&self) -> Option<&Arc<CapturePool>> {
        self.pool.as_ref()
    }

    /// `buffer_count` of the pool it was captured with (0 without one).
    pub fn pool_buffer_count(&self) -> usize {
        self.raw.pool_buffer_count()
    }

    /// Its share of its pools' memory now.
    pub fn stats(&self) -> Result<GraphStats> {
        self.raw.stats()
    }

    /// Captures `body` again on `stream` and runs the new work from the next
    /// launch on (`cpool_graph_update`); on failure the graph is unchanged.
    pub fn update<F: FnMut(&Stream) -> Result<()>>(&mut self, stream: &Stream, body: F) -> Result<()> {
        self.raw.update(stream, body)
    }

    /// The C handle, borrowed (for calls of `capturepool::sys`); valid while
    /// the graph lives.
    pub fn as_raw(&self) -> *mut sys::cpool_graph {
        self.raw.ptr()
    }

    /// Writes the graph in Graphviz DOT to `path`.
    pub fn dump_dot(&self, path: impl AsRef<Path>) -> Result<()> {
        self.raw.dump_dot(path.as_ref())
    }
}

impl std::fmt::Debug for CapturedGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedGraph").field("id", &self.id()).field("replays", &self.num_replays()).finish()
    }
}

/// A capture in a scope: begun by `new`, ended by `end`; dropped without
/// `end` (an early return, `?`, a panic) it ends the capture and discards
/// the graph, leaving the stream usable.
///
/// It borrows the stream, so the stream outlives the capture, and is neither
/// `Send` nor `Sync`: a capture ends on the thread that began it.
pub struct GraphCaptureGuard<'s> {
    stream: &'s Stream,
    pool: Option<Arc<CapturePool>>,
    ended: bool,
}

impl<'s> GraphCaptureGuard<'s> {
    /// Begins a capture on `stream`, bound to `pool` if given.
    pub fn new(stream: &'s Stream, pool: Option<&Arc<CapturePool>>, mode: CaptureMode) -> Result<Self> {
        ffi_safety::capture_begin(&stream.raw, pool.map(|p| &p.raw), mode.code())?;
        Ok(GraphCaptureGuard { stream, pool: pool.cloned(), ended: false })
    }

    /// `new` with a pool, in global mode: `begin_capture_with_pool` in a scope.
    pub fn with_pool(stream: &'s Stream, pool: &Arc<CapturePool>) -> Result<Self> {
        GraphCaptureGuard::new(stream, Some(pool), CaptureMode::Global)
    }

    /// The stream being captured.
    pub fn stream(&self) -> &'s Stream {
        self.stream
    }

    /// Enqueues `f` in the capture, to run at every replay, kept alive by
    /// the capture's pool (`Stream::launch_host_recorded`); `InvalidArgument`
    /// for a capture without a pool.
    pub fn launch_host<F: Fn() + Send + Sync + 'static>(&self, f: F) -> Result<()> {
        match &self.pool {
            Some(pool) => self.stream.launch_host_recorded(pool, f),
            None => Err(Error::refused(
                Status::InvalidArgument,
                "GraphCaptureGuard::launch_host: a capture without a pool has nothing to keep the function alive",
            )),
        }
    }

    /// Ends the capture and instantiates its graph.
    pub fn end(mut self) -> Result<CapturedGraph> {
        self.ended = true;
        let raw = ffi_safety::capture_end(&self.stream.raw)?;
        Ok(CapturedGraph::new(raw, self.stream, self.pool.take()))
    }
}

impl Drop for GraphCaptureGuard<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // Discard: end the capture and release the graph, if one came.
            drop(ffi_safety::capture_end(&self.stream.raw));
        }
    }
}

impl std::fmt::Debug for GraphCaptureGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphCaptureGuard").field("stream", self.stream).field("ended", &self.ended).finish()
    }
}
