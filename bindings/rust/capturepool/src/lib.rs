//! Safe Rust bindings of capturepool: memory and lifetimes for captured
//! CUDA graphs, on the CUDA runtime or, without a GPU, on the library's host
//! backend.
//!
//! The seed's API, on the C library: a [`CapturePool`] keeps the buffers a
//! captured graph uses alive (`record_buffer`) and can be sealed;
//! [`begin_capture_with_pool`] and [`end_capture_with_pool`] capture a
//! stream's work into a [`CapturedGraph`] that holds the pool.
//!
//! ```no_run
//! use std::sync::Arc;
//! use capturepool::*;
//!
//! # fn main() -> capturepool::Result<()> {
//! let device = Device::open(Backend::Auto, 0)?;
//! let stream = &Stream::new(&device)?;
//! let buffers = CapturePool::on(&device)?;
//! let pool = Arc::new(CapturePool::on(&device)?);
//!
//! let buf_a = buffers.alloc_zeros::<f32>(1024, stream)?;
//! let buf_b = buffers.alloc_zeros::<f32>(1024, stream)?;
//! pool.record_buffer(buf_a.try_clone()?);
//! pool.record_buffer(buf_b.try_clone()?);
//!
//! pool.seal();
//! begin_capture_with_pool(&pool, stream)?;
//! buf_b.copy_from(&buf_a, stream)?;
//! let graph = end_capture_with_pool(stream, Arc::clone(&pool))?;
//! drop(pool); // safe: the graph holds its own reference
//! graph.launch()?;
//! # Ok(())
//! # }
//! ```
//!
//! A [`GraphCache`] keeps graphs of a pool by the caller's key (a batch
//! size) under a byte budget, capturing on a miss and evicting the least
//! recently launched.
//!
//! Every failing call returns [`Error`] (`status`, `message`); nothing
//! panics across the C library (callbacks catch panics). The C header,
//! include/capturepool.h, states each call's promises; docs/GUIDE.md
//! ("Rust") gives an overview.
mod buffer;
mod device;
mod error;
mod ffi_safety;
mod graph;
mod graph_cache;
mod pool;
mod stream;

pub use buffer::DeviceBuffer;
pub use device::{Backend, Device};
pub use error::{Error, Result, Status};
pub use ffi_safety::Pod;
pub use graph::{
    begin_capture_with_pool, capture, end_capture_with_pool, graphed_call, CaptureMode, CaptureState, CapturedGraph,
    GraphCaptureGuard, GraphStats,
};
pub use graph_cache::{GraphCache, GraphCacheOptions, GraphCacheStats};
pub use pool::{CapturePool, PoolOptions, PoolStats, SuspendMode};
pub use stream::Stream;

/// The raw C API (the `capturepool-sys` crate).
pub use capturepool_sys as sys;

/// Waits until every teardown handed to the library's thread has finished
/// (`cpool_wait_deferred`): the drops of a pool whose last reference a graph
/// held run there when its launches were still in flight.
pub fn wait_deferred() {
    ffi_safety::wait_deferred()
}

/// The version of the linked library, "MAJOR.MINOR.PATCH".
pub fn version() -> &'static str {
    ffi_safety::version_string()
}
