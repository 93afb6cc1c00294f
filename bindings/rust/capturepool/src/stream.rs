//! Streams: in-order queues of work on a device.
use std::ffi::c_void;
use std::sync::Arc;

use crate::error::Result;
use crate::ffi_safety::{self, NotSync, RawStream};
use crate::{CapturePool, CaptureState, Device};

/// A stream of its own on a device (`cpool_stream_create`), destroyed when
/// it is dropped, once the buffers freed on it are gone too.
///
/// `Send` but not `Sync`: CUDA ties a capture to the thread that began it
/// (outside `CaptureMode::Relaxed`), so a stream is used from one thread at
/// a time. Graphs launch on it from any thread (`CapturedGraph::launch`).
pub struct Stream {
    pub(crate) raw: Arc<RawStream>,
    pub(crate) not_sync: NotSync,
}

impl Stream {
    /// Creates a stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        Ok(Stream { raw: Arc::new(RawStream::create(&device.raw)?), not_sync: NotSync::default() })
    }

    /// Waits until the work enqueued so far has finished. In a capture it
    /// breaks the capture (`CaptureInvalidated`), as on CUDA.
    pub fn synchronize(&self) -> Result<()> {
        self.raw.synchronize()
    }

    /// The `cudaStream_t` behind it; null on the host backend.
    pub fn native(&self) -> *mut c_void {
        self.raw.native()
    }

    /// The C handle, borrowed (for calls of `capturepool::sys`); valid while
    /// the stream lives.
    pub fn as_raw(&self) -> *mut capturepool_sys::cpool_stream {
        self.raw.ptr()
    }

    /// Whether the stream captures (`cpool_capture_status`).
    pub fn capture_state(&self) -> Result<CaptureState> {
        self.raw.capture_state()
    }

    /// Enqueues `f` to run once, in stream order, on a thread of the
    /// runtime. Refused while the stream captures (a captured host function
    /// runs at every replay: use [`Stream::launch_host_recorded`]). A panic
    /// in `f` is stopped at the stream and reported on stderr.
    pub fn launch_host<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<()> {
        ffi_safety::launch_host_once(&self.raw, f)
    }

    /// Enqueues `f` in stream order, also under capture (then it runs at
    /// every replay). `f` is recorded in `pool` (`CapturePool::record_buffer`),
    /// which keeps it alive until a clear or the pool's end; a graph that
    /// captured it is stale after a clear, so it never runs a dropped `f`.
    pub fn launch_host_recorded<F: Fn() + Send + Sync + 'static>(&self, pool: &CapturePool, f: F) -> Result<()> {
        ffi_safety::launch_host_recorded(&self.raw, &pool.raw, f)
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("native", &self.native()).finish()
    }
}
