//! Errors: every failing call returns `Err(Error)`, carrying the C status and
//! `cpool_last_error()`'s text.
use std::fmt;

use capturepool_sys as sys;

/// A status of the C library (`cpool_status`), other than `CPOOL_OK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    InvalidArgument,
    OutOfMemory,
    Sealed,
    NotCapturing,
    AlreadyCapturing,
    CaptureInvalidated,
    StaleGraph,
    NoDevice,
    Backend,
    Unsupported,
    NotReady,
    OutputLive,
    Io,
    Suspended,
    /// A value this crate does not know (a newer library).
    Other(u32),
}

impl Status {
    pub(crate) fn from_code(code: u32) -> Status {
        match code {
            sys::CPOOL_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::CPOOL_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::CPOOL_ERR_SEALED => Status::Sealed,
            sys::CPOOL_ERR_NOT_CAPTURING => Status::NotCapturing,
            sys::CPOOL_ERR_ALREADY_CAPTURING => Status::AlreadyCapturing,
            sys::CPOOL_ERR_CAPTURE_INVALIDATED => Status::CaptureInvalidated,
            sys::CPOOL_ERR_STALE_GRAPH => Status::StaleGraph,
            sys::CPOOL_ERR_NO_DEVICE => Status::NoDevice,
            sys::CPOOL_ERR_BACKEND => Status::Backend,
            sys::CPOOL_ERR_UNSUPPORTED => Status::Unsupported,
            sys::CPOOL_ERR_NOT_READY => Status::NotReady,
            sys::CPOOL_ERR_OUTPUT_LIVE => Status::OutputLive,
            sys::CPOOL_ERR_IO => Status::Io,
            sys::CPOOL_ERR_SUSPENDED => Status::Suspended,
            other => Status::Other(other),
        }
    }

    /// The C value (`CPOOL_ERR_SEALED` is 3, ...).
    pub fn code(self) -> u32 {
        match self {
            Status::InvalidArgument => sys::CPOOL_ERR_INVALID_ARGUMENT,
            Status::OutOfMemory => sys::CPOOL_ERR_OUT_OF_MEMORY,
            Status::Sealed => sys::CPOOL_ERR_SEALED,
            Status::NotCapturing => sys::CPOOL_ERR_NOT_CAPTURING,
            Status::AlreadyCapturing => sys::CPOOL_ERR_ALREADY_CAPTURING,
            Status::CaptureInvalidated => sys::CPOOL_ERR_CAPTURE_INVALIDATED,
            Status::StaleGraph => sys::CPOOL_ERR_STALE_GRAPH,
            Status::NoDevice => sys::CPOOL_ERR_NO_DEVICE,
            Status::Backend => sys::CPOOL_ERR_BACKEND,
            Status::Unsupported => sys::CPOOL_ERR_UNSUPPORTED,
            Status::NotReady => sys::CPOOL_ERR_NOT_READY,
            Status::OutputLive => sys::CPOOL_ERR_OUTPUT_LIVE,
            Status::Io => sys::CPOOL_ERR_IO,
            Status::Suspended => sys::CPOOL_ERR_SUSPENDED,
            Status::Other(code) => code,
        }
    }

    /// The C name: "CPOOL_ERR_SEALED", ...
    pub fn name(self) -> &'static str {
        match self {
            Status::InvalidArgument => "CPOOL_ERR_INVALID_ARGUMENT",
            Status::OutOfMemory => "CPOOL_ERR_OUT_OF_MEMORY",
            Status::Sealed => "CPOOL_ERR_SEALED",
            Status::NotCapturing => "CPOOL_ERR_NOT_CAPTURING",
            Status::AlreadyCapturing => "CPOOL_ERR_ALREADY_CAPTURING",
            Status::CaptureInvalidated => "CPOOL_ERR_CAPTURE_INVALIDATED",
            Status::StaleGraph => "CPOOL_ERR_STALE_GRAPH",
            Status::NoDevice => "CPOOL_ERR_NO_DEVICE",
            Status::Backend => "CPOOL_ERR_BACKEND",
            Status::Unsupported => "CPOOL_ERR_UNSUPPORTED",
            Status::NotReady => "CPOOL_ERR_NOT_READY",
            Status::OutputLive => "CPOOL_ERR_OUTPUT_LIVE",
            Status::Io => "CPOOL_ERR_IO",
            Status::Suspended => "CPOOL_ERR_SUSPENDED",
            Status::Other(_) => "CPOOL_ERR_UNKNOWN",
        }
    }
}

impl fmt::Display for Status {
    /// `cpool_status_string`'s text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(crate::ffi_safety::status_string(self.code()))
    }
}

/// A failed call: the C status and the reason in words (for the library's
/// own failures, `cpool_last_error()` of the failing call; for the few
/// refusals this crate makes itself, its own text, with the status the C
/// library gives for the same misuse).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    /// A refusal made by this crate, with the status C gives such misuse.
    pub(crate) fn refused(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{} ({})", self.status, self.status.name())
        } else {
            write!(f, "{} ({})", self.message, self.status.name())
        }
    }
}

impl std::error::Error for Error {}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
