//! Capture pools: the seed's `CapturePool` on `cpool_pool`.
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use capturepool_sys as sys;

use crate::error::{Error, Result, Status};
use crate::ffi_safety::{Allocation, Pod, RawPool};
use crate::{Device, DeviceBuffer, Stream};

/// How a pool is made (`cpool_pool_options`); `Default` is every default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolOptions {
    /// Bytes reserved at creation (rounded up to 2 MiB); 0: none.
    pub reserve_bytes: u64,
    /// Upper bound on `reserved_bytes`; 0: none but the device's.
    pub max_reserved_bytes: u64,
    /// Plain segments instead of segments that grow in place.
    pub plain_segments: bool,
}

/// A pool's counters (`cpool_pool_stats`), fields named as in C.
pub type PoolStats = sys::cpool_pool_stats;

/// How `suspend` treats live blocks' bytes (`cpool_suspend_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SuspendMode {
    /// Live blocks' bytes go to host memory and come back at resume.
    #[default]
    KeepContents,
    /// Live blocks keep their addresses, not their bytes.
    Discard,
}

/// A dedicated memory pool for graph capture (`cpool_pool`).
///
/// As the seed's: a sealed flag (a sealed pool serves no allocation), and
/// buffer lifetime tracking (`record_buffer`): registered buffers are kept
/// alive by the pool itself, so they outlive every `CapturedGraph` that
/// holds the pool, and are dropped in registration order when the pool's
/// last reference goes: the last `Arc<CapturePool>`, or the last graph
/// captured with it, whichever is later. Besides, it allocates stream-ordered
/// device memory (`alloc`), counts (`stats`), and can give its memory back
/// and take it again (`suspend`, `resume`).
///
/// Thread-safe: `Send + Sync`, every method takes `&self`.
pub struct CapturePool {
    pub(crate) raw: RawPool,
}

impl CapturePool {
    /// Creates a new, unsealed pool on the default device
    /// (`Device::default_device()`).
    ///
    /// # Panics
    /// If no device can be opened or the pool cannot be made; see
    /// [`CapturePool::try_new`] for a `Result`.
    pub fn new() -> Self {
        match CapturePool::try_new() {
            Ok(pool) => pool,
            Err(e) => panic!("CapturePool::new: {e}"),
        }
    }

    /// `new`, with the failure as an `Err`.
    pub fn try_new() -> Result<Self> {
        CapturePool::on(&Device::default_device()?)
    }

    /// Creates a new, unsealed pool on `device`.
    pub fn on(device: &Device) -> Result<Self> {
        CapturePool::with_options(device, PoolOptions::default())
    }

    /// Creates a pool on `device` with `options`.
    pub fn with_options(device: &Device, options: PoolOptions) -> Result<Self> {
        let opts = sys::cpool_pool_options {
            reserve_bytes: options.reserve_bytes,
            max_reserved_bytes: options.max_reserved_bytes,
            plain_segments: options.plain_segments,
            ..sys::cpool_pool_options::INIT
        };
        Ok(CapturePool { raw: RawPool::create(&device.raw, &opts)? })
    }

    /// Seals the pool: it serves no allocation until `unseal` (`Sealed`).
    /// Recording and capturing still work.
    pub fn seal(&self) {
        self.raw.seal()
    }

    /// Lifts the seal.
    pub fn unseal(&self) {
        self.raw.unseal()
    }

    /// Whether the pool is sealed.
    pub fn is_capture_pool_sealed(&self) -> bool {
        self.raw.is_sealed()
    }

    /// Registers `buffer` with the pool, which keeps it alive for the
    /// lifetime of every graph holding the pool, and drops it, in
    /// registration order, at `clear_buffers` or when the pool's last
    /// reference goes. Returns its index (0, 1, ...; restarting after a
    /// clear). A panic in its `Drop` is stopped at the pool and reported.
    ///
    /// A `DeviceBuffer` recorded in the pool it came from holds that pool:
    /// the two keep each other until `clear_buffers` (a leak otherwise).
    ///
    /// # Panics
    /// If the pool cannot take the record (out of host memory); the buffer
    /// is then dropped. [`CapturePool::try_record_buffer`] returns it as an
    /// `Err`.
    pub fn record_buffer<B: Send + Sync + 'static>(&self, buffer: B) -> usize {
        match self.raw.record(buffer) {
            Ok(index) => index,
            Err(e) => panic!("CapturePool::record_buffer: {e}"),
        }
    }

    /// `record_buffer`, with the failure as an `Err`.
    pub fn try_record_buffer<B: Send + Sync + 'static>(&self, buffer: B) -> Result<usize> {
        self.raw.record(buffer)
    }

    /// Number of buffers registered since creation or the last clear.
    pub fn buffer_count(&self) -> usize {
        self.raw.buffer_count()
    }

    /// Drops every registered buffer now, in registration order, once the
    /// device has finished with them. The pool stays usable; graphs captured
    /// before are stale (`launch` returns `StaleGraph`).
    pub fn clear_buffers(&self) {
        self.raw.clear_buffers()
    }

    /// Allocates `len` elements, stream ordered on `stream` (usable by
    /// work enqueued there after this call; under capture, graph memory).
    /// Contents are undefined. The buffer holds the pool and the stream, and
    /// frees itself on that stream when dropped.
    pub fn alloc<T: Pod>(&self, len: usize, stream: &Stream) -> Result<DeviceBuffer<T>> {
        self.alloc_bytes(len, stream, false)
    }

    /// `alloc`, filled with zero bytes (a fill enqueued on `stream`).
    pub fn alloc_zeros<T: Pod>(&self, len: usize, stream: &Stream) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc(len, stream)?;
        buf.memset(0, stream)?;
        Ok(buf)
    }

    /// `alloc` for a graph's output (`cpool_alloc_output`): under capture it
    /// packs with the pool's other outputs.
    pub fn alloc_output<T: Pod>(&self, len: usize, stream: &Stream) -> Result<DeviceBuffer<T>> {
        self.alloc_bytes(len, stream, true)
    }

    fn alloc_bytes<T: Pod>(&self, len: usize, stream: &Stream, output: bool) -> Result<DeviceBuffer<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::refused(Status::OutOfMemory, format!("CapturePool::alloc: {len} elements overflow usize"))
        })?;
        let alloc = Allocation::new(&self.raw, &stream.raw, bytes, output)?;
        Ok(DeviceBuffer { alloc: Arc::new(alloc), len, elem: PhantomData })
    }

    /// The pool's counters now.
    pub fn stats(&self) -> Result<PoolStats> {
        self.raw.stats()
    }

    /// Gives cached, unused memory back to the device.
    pub fn trim(&self) -> Result<()> {
        self.raw.trim()
    }

    /// Gives every page back to the device, keeping the addresses; allocations
    /// and launches of graphs holding the pool return `Suspended` until
    /// `resume`.
    pub fn suspend(&self, mode: SuspendMode) -> Result<()> {
        self.raw.suspend(match mode {
            SuspendMode::KeepContents => sys::CPOOL_SUSPEND_KEEP_CONTENTS,
            SuspendMode::Discard => sys::CPOOL_SUSPEND_DISCARD,
        })
    }

    /// Maps the memory again at the same addresses.
    pub fn resume(&self) -> Result<()> {
        self.raw.resume()
    }

    /// Whether the pool is suspended.
    pub fn is_suspended(&self) -> bool {
        self.raw.is_suspended()
    }

    /// Whether its segments grow in place (and so it can be suspended).
    pub fn grows_in_place(&self) -> bool {
        self.raw.grows_in_place()
    }

    /// Writes a JSON picture of the pool's memory to `path`
    /// (docs/SNAPSHOT.md).
    pub fn write_snapshot(&self, path: impl AsRef<Path>) -> Result<()> {
        self.raw.write_snapshot(path.as_ref())
    }
}

impl Default for CapturePool {
    /// `CapturePool::new()`.
    fn default() -> Self {
        CapturePool::new()
    }
}

impl std::fmt::Debug for CapturePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturePool")
            .field("sealed", &self.is_capture_pool_sealed())
            .field("buffer_count", &self.buffer_count())
            .finish()
    }
}
