//! Typed device memory from a pool.
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::Result;
use crate::ffi_safety::{Allocation, Pod};

/// `len` elements of `T` in a pool's device memory (`CapturePool::alloc`).
///
/// It holds its pool and the stream it was allocated on, so it cannot
/// outlive either, and frees itself (`cpool_free`, stream ordered on that
/// stream) when the last handle of it goes: `try_clone` makes another
/// handle of the same memory, e.g. one to register with a pool
/// (`record_buffer`) while this one is used.
///
/// Device memory is only reached through stream work (`memset`,
/// `copy_from`, host functions and kernels given `device_ptr`); ordering
/// that work between streams is the caller's, as in CUDA.
pub struct DeviceBuffer<T: Pod> {
    pub(crate) alloc: Arc<Allocation>,
    pub(crate) len: usize,
    pub(crate) elem: PhantomData<T>,
}

impl<T: Pod> DeviceBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address, for kernels and host functions (a `usize`, so
    /// that a closure may carry it across threads).
    pub fn device_ptr(&self) -> usize {
        self.alloc.address() as usize
    }

    /// Another handle of the same device memory (never fails; a `Result`
    /// as the seed's `try_clone`).
    pub fn try_clone(&self) -> Result<Self> {
        Ok(DeviceBuffer { alloc: Arc::clone(&self.alloc), len: self.len, elem: PhantomData })
    }
}

impl<T: Pod> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer").field("ptr", &self.device_ptr()).field("len", &self.len).finish()
    }
}
