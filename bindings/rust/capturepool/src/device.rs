//! Devices: a CUDA device, or the CPU for the host backend.
use std::sync::Arc;

use capturepool_sys as sys;

use crate::error::Result;
use crate::ffi_safety::RawDevice;

/// Which runtime a device runs on (`cpool_backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// CUDA where a GPU and a driver are usable, the host backend otherwise
    /// (`CPOOL_BACKEND` in the environment overrides it).
    Auto,
    Cuda,
    Host,
}

impl Backend {
    pub(crate) fn code(self) -> sys::cpool_backend {
        match self {
            Backend::Auto => sys::CPOOL_BACKEND_AUTO,
            Backend::Cuda => sys::CPOOL_BACKEND_CUDA,
            Backend::Host => sys::CPOOL_BACKEND_HOST,
        }
    }
}

/// An open device (`cpool_device_open` / `cpool_device_close`). Clones share
/// one reference; streams and pools made on it keep it alive by themselves.
#[derive(Clone)]
pub struct Device {
    pub(crate) raw: Arc<RawDevice>,
}

impl Device {
    /// Opens device `ordinal` of `backend` (the host backend has ordinal 0).
    pub fn open(backend: Backend, ordinal: i32) -> Result<Device> {
        Ok(Device { raw: Arc::new(RawDevice::open(backend.code(), ordinal)?) })
    }

    /// The default device: `Device::open(Backend::Auto, 0)`.
    pub fn default_device() -> Result<Device> {
        Device::open(Backend::Auto, 0)
    }

    /// The backend it runs on: `Cuda` or `Host`, never `Auto`.
    pub fn backend(&self) -> Backend {
        match self.raw.backend() {
            sys::CPOOL_BACKEND_CUDA => Backend::Cuda,
            sys::CPOOL_BACKEND_HOST => Backend::Host,
            _ => Backend::Auto,
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("backend", &self.backend()).finish()
    }
}
