//! Every `unsafe` of this crate, in one place: the calls into the C library
//! and the callbacks it calls back, behind safe functions and owning handle
//! types. The rest of the crate builds its API on these and has no `unsafe`.
//!
//! What makes the calls sound, once for all (each block names the rule it
//! leans on):
//!
//! - (H) Handles. Every `Raw*` type below owns one reference of a live C
//!   handle from the moment its constructor succeeded until its `Drop`,
//!   which is the one place that ends it. A `NonNull` of such a type is
//!   therefore live for every call made through `&self`.
//! - (T) Threads. The C header makes devices, pools and graphs fully
//!   thread-safe, and streams safe to enqueue on from any thread (calls land
//!   whole); what must not race is a destroy or a graph update, which take
//!   the handle by value (`Drop`) or by `&mut`. That is why the `Raw*`
//!   handles are `Send + Sync`; the public `Stream` adds `!Sync` on top for
//!   CUDA's per-thread capture rules.
//! - (C) Checked handles. The library recognises a handle that is dead or of
//!   the wrong type at every call and returns CPOOL_ERR_INVALID_ARGUMENT: a
//!   stale handle is an error, never undefined behaviour.
//! - (M) Device memory. Pointers into device memory are only ever handed to
//!   the library's own stream calls; Rust never reads or writes through
//!   them. Host memory handed to a copy lives until the copy has finished:
//!   the copy is followed by a synchronize, and is refused under capture
//!   (a captured copy would read the host memory again at every replay).
//! - (P) Panics. Callbacks catch every panic (`catch_unwind`) before
//!   returning to C: a panic never unwinds through a C frame.
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, PoisonError};

use capturepool_sys as sys;

use crate::error::{Error, Result, Status};
use crate::{CaptureState, DeviceBuffer, Stream};

// ---- library ------------------------------------------------------------------

/// `cpool_last_error()` of this thread, copied.
pub(crate) fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated string that stays valid
    // until this thread's next failing call; it is copied at once.
    unsafe { CStr::from_ptr(sys::cpool_last_error()) }.to_string_lossy().into_owned()
}

/// Turns a C status into a `Result`, taking the failure's text.
pub(crate) fn check(status: sys::cpool_status) -> Result<()> {
    if status == sys::CPOOL_OK {
        Ok(())
    } else {
        Err(Error { status: Status::from_code(status), message: last_error() })
    }
}

pub(crate) fn status_string(code: u32) -> &'static str {
    // SAFETY: cpool_status_string returns static text for any value (the
    // header: "Never NULL, also for values outside the enum").
    let text = unsafe { CStr::from_ptr(sys::cpool_status_string(code)) };
    text.to_str().unwrap_or("unknown status")
}

pub(crate) fn version_string() -> &'static str {
    // SAFETY: static text of the library.
    let text = unsafe { CStr::from_ptr(sys::cpool_version_string()) };
    text.to_str().unwrap_or("")
}

pub(crate) fn wait_deferred() {
    // SAFETY: no arguments; callable from any thread (the header).
    unsafe { sys::cpool_wait_deferred() }
}

fn path_cstring(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::refused(Status::InvalidArgument, format!("{}: a path with a NUL byte", path.display())))
}

// ---- devices ----------------------------------------------------------------

/// One reference of an open `cpool_device`.
pub(crate) struct RawDevice(NonNull<sys::cpool_device>);

// SAFETY: (T) devices are thread-safe; the reference is closed once, in Drop.
unsafe impl Send for RawDevice {}
unsafe impl Sync for RawDevice {}

impl RawDevice {
    pub(crate) fn open(backend: sys::cpool_backend, ordinal: i32) -> Result<RawDevice> {
        let mut out = ptr::null_mut();
        // SAFETY: out is a valid out-pointer; on failure nothing is created.
        check(unsafe { sys::cpool_device_open(backend, ordinal, &mut out) })?;
        Ok(RawDevice(NonNull::new(out).expect("cpool_device_open returned OK and NULL")))
    }

    pub(crate) fn backend(&self) -> sys::cpool_backend {
        // SAFETY: (H) live handle.
        unsafe { sys::cpool_device_backend(self.0.as_ptr()) }
    }
}

impl Drop for RawDevice {
    fn drop(&mut self) {
        // SAFETY: (H) the reference this value owns, closed once.
        unsafe { sys::cpool_device_close(self.0.as_ptr()) }
    }
}

// ---- streams ----------------------------------------------------------------

/// A `cpool_stream` of this crate's, destroyed when the last `Arc` of it
/// goes (the `Stream` and the buffers freed on it share it).
pub(crate) struct RawStream(NonNull<sys::cpool_stream>);

// SAFETY: (T) any thread may enqueue on a stream; the destroy is in Drop,
// which an Arc runs once, after every other user is gone.
unsafe impl Send for RawStream {}
unsafe impl Sync for RawStream {}

/// A stream's handle without a reference: it may outlive the stream, and a
/// call with it is then refused (C). A graph keeps one of its capture
/// stream, so that a launch takes no reference count (two atomic
/// operations a launch: about 2% of a GPU launch's CPU time).
#[derive(Clone, Copy)]
pub(crate) struct StreamHandle(NonNull<sys::cpool_stream>);

// SAFETY: (C) a handle is checked at every call, from any thread: it is a
// number to pass, never dereferenced here.
unsafe impl Send for StreamHandle {}
unsafe impl Sync for StreamHandle {}

impl RawStream {
    pub(crate) fn handle(&self) -> StreamHandle {
        StreamHandle(self.0)
    }

    pub(crate) fn create(dev: &RawDevice) -> Result<RawStream> {
        let mut out = ptr::null_mut();
        // SAFETY: (H) live device; valid out-pointer.
        check(unsafe { sys::cpool_stream_create(dev.0.as_ptr(), &mut out) })?;
        Ok(RawStream(NonNull::new(out).expect("cpool_stream_create returned OK and NULL")))
    }

    pub(crate) fn ptr(&self) -> *mut sys::cpool_stream {
        self.0.as_ptr()
    }

    pub(crate) fn native(&self) -> *mut c_void {
        // SAFETY: (H) live stream; the value is only returned.
        unsafe { sys::cpool_stream_native(self.ptr()) }
    }

    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: (H) live stream.
        check(unsafe { sys::cpool_stream_synchronize(self.ptr()) })
    }

    pub(crate) fn capture_state(&self) -> Result<CaptureState> {
        let mut state = sys::CPOOL_CAPTURE_NONE;
        // SAFETY: (H) live stream; valid out-pointer.
        check(unsafe { sys::cpool_capture_status(self.ptr(), &mut state) })?;
        Ok(match state {
            sys::CPOOL_CAPTURE_ACTIVE => CaptureState::Active,
            sys::CPOOL_CAPTURE_INVALIDATED => CaptureState::Invalidated,
            _ => CaptureState::None,
        })
    }

    /// Refuses (as C refuses a synchronize in a capture) where `s` captures:
    /// for the calls that hand the library host memory.
    fn refuse_under_capture(&self, what: &str) -> Result<()> {
        match self.capture_state()? {
            CaptureState::None => Ok(()),
            _ => Err(Error::refused(
                Status::InvalidArgument,
                format!("{what}: the stream is capturing, and a captured copy would read host memory at every replay"),
            )),
        }
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: (H)(T) the last Arc: no other call with this stream can run.
        unsafe { sys::cpool_stream_destroy(self.ptr()) }
    }
}

impl Stream {
    /// Wraps an existing `cudaStream_t` of `device` (borrowed: it is never
    /// destroyed by this crate).
    ///
    /// # Safety
    /// `native` must be a CUDA stream of `device` (or null, the legacy
    /// default stream) that outlives the returned `Stream` and every buffer
    /// allocated on it. The host backend refuses with `Unsupported`.
    pub unsafe fn wrap(device: &crate::Device, native: *mut c_void) -> Result<Stream> {
        let mut out = ptr::null_mut();
        // SAFETY: (H) live device; the caller vouches for `native`.
        check(unsafe { sys::cpool_stream_wrap(device.raw.0.as_ptr(), native, &mut out) })?;
        let raw = RawStream(NonNull::new(out).expect("cpool_stream_wrap returned OK and NULL"));
        Ok(Stream { raw: Arc::new(raw), not_sync: PhantomData })
    }
}

/// The host function of an eager `launch_host`: runs the boxed closure once
/// and frees it.
unsafe extern "C" fn run_once<F: FnOnce() + Send + 'static>(arg: *mut c_void) {
    // SAFETY: `arg` is the Box<F> leaked by launch_host_once, handed to the
    // library for exactly one run: an eager (uncaptured) host function runs
    // once. (P) a panic is caught here.
    let f = unsafe { Box::from_raw(arg.cast::<F>()) };
    if panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
        eprintln!("capturepool: a host function panicked; the panic was stopped at the stream");
    }
}

/// The host function of a recorded launch: calls the closure the pool keeps.
unsafe extern "C" fn run_shared<F: Fn() + Send + Sync + 'static>(arg: *mut c_void) {
    // SAFETY: `arg` is a Box<F> recorded in a pool (drop_boxed::<F>); the
    // pool drops it only after every launch of its graphs and the stream
    // work of the device finished, and a graph captured before that drop is
    // stale (never launched again): the closure is alive here. F: Sync, as
    // replays may run on several threads. (P) a panic is caught here.
    let f = unsafe { &*arg.cast::<F>() };
    if panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
        eprintln!("capturepool: a host function panicked; the panic was stopped at the stream");
    }
}

/// The drop a pool calls for a recorded Box<B>.
unsafe extern "C" fn drop_boxed<B>(object: *mut c_void) {
    // SAFETY: `object` is the Box<B> leaked by record; the pool calls this
    // exactly once (the header). (P) a panicking Drop is caught here.
    let boxed = unsafe { Box::from_raw(object.cast::<B>()) };
    if panic::catch_unwind(AssertUnwindSafe(move || drop(boxed))).is_err() {
        eprintln!("capturepool: a recorded buffer's drop panicked; the panic was stopped at the pool");
    }
}

pub(crate) fn launch_host_once<F: FnOnce() + Send + 'static>(stream: &RawStream, f: F) -> Result<()> {
    match stream.capture_state()? {
        CaptureState::None => {}
        _ => {
            return Err(Error::refused(
                Status::InvalidArgument,
                "Stream::launch_host: the stream is capturing; a captured host function runs at every replay: \
                 use launch_host_recorded with the capture's pool",
            ))
        }
    }
    let arg = Box::into_raw(Box::new(f)).cast::<c_void>();
    // SAFETY: (H) live stream; run_once::<F> matches `arg`'s type.
    let status = unsafe { sys::cpool_launch_host(stream.ptr(), Some(run_once::<F>), arg) };
    if status != sys::CPOOL_OK {
        // SAFETY: on failure nothing was enqueued (the header): the box is
        // still ours.
        drop(unsafe { Box::from_raw(arg.cast::<F>()) });
    }
    check(status)
}

pub(crate) fn launch_host_recorded<F: Fn() + Send + Sync + 'static>(
    stream: &RawStream,
    pool: &RawPool,
    f: F,
) -> Result<()> {
    let arg = Box::into_raw(Box::new(f)).cast::<c_void>();
    // SAFETY: (H) live pool; drop_boxed::<F> frees `arg` once.
    let status = unsafe { sys::cpool_pool_record(pool.ptr(), arg, Some(drop_boxed::<F>), ptr::null_mut()) };
    if status != sys::CPOOL_OK {
        // SAFETY: on failure the pool does not call drop: the box is ours.
        drop(unsafe { Box::from_raw(arg.cast::<F>()) });
        return check(status);
    }
    // SAFETY: (H) live stream; the pool keeps `arg` alive (see run_shared).
    check(unsafe { sys::cpool_launch_host(stream.ptr(), Some(run_shared::<F>), arg) })
}

// ---- pools ----------------------------------------------------------------------

/// One reference of a `cpool_pool`; Clone retains, Drop releases.
pub(crate) struct RawPool(NonNull<sys::cpool_pool>);

// SAFETY: (T) every pool function is thread-safe.
unsafe impl Send for RawPool {}
unsafe impl Sync for RawPool {}

impl Clone for RawPool {
    fn clone(&self) -> RawPool {
        // SAFETY: (H) live pool; the new reference is owned by the clone.
        let p = unsafe { sys::cpool_pool_retain(self.ptr()) };
        RawPool(NonNull::new(p).expect("cpool_pool_retain of a live pool returned NULL"))
    }
}

impl Drop for RawPool {
    fn drop(&mut self) {
        // SAFETY: (H) the reference this value owns, released once.
        unsafe { sys::cpool_pool_release(self.ptr()) }
    }
}

impl RawPool {
    pub(crate) fn create(dev: &RawDevice, opts: &sys::cpool_pool_options) -> Result<RawPool> {
        let mut out = ptr::null_mut();
        // SAFETY: (H) live device; opts is a full, initialised struct.
        check(unsafe { sys::cpool_pool_create(dev.0.as_ptr(), opts, &mut out) })?;
        Ok(RawPool(NonNull::new(out).expect("cpool_pool_create returned OK and NULL")))
    }

    fn ptr(&self) -> *mut sys::cpool_pool {
        self.0.as_ptr()
    }

    pub(crate) fn seal(&self) {
        // SAFETY: (H)
        unsafe { sys::cpool_pool_seal(self.ptr()) }
    }

    pub(crate) fn unseal(&self) {
        // SAFETY: (H)
        unsafe { sys::cpool_pool_unseal(self.ptr()) }
    }

    pub(crate) fn is_sealed(&self) -> bool {
        // SAFETY: (H)
        unsafe { sys::cpool_pool_is_sealed(self.ptr()) }
    }

    pub(crate) fn is_suspended(&self) -> bool {
        // SAFETY: (H)
        unsafe { sys::cpool_pool_is_suspended(self.ptr()) }
    }

    pub(crate) fn grows_in_place(&self) -> bool {
        // SAFETY: (H)
        unsafe { sys::cpool_pool_grows_in_place(self.ptr()) }
    }

    pub(crate) fn buffer_count(&self) -> usize {
        // SAFETY: (H)
        unsafe { sys::cpool_pool_buffer_count(self.ptr()) }
    }

    pub(crate) fn clear_buffers(&self) {
        // SAFETY: (H); the drops it runs are drop_boxed, which catch panics.
        unsafe { sys::cpool_pool_clear_buffers(self.ptr()) }
    }

    /// Hands `object` to the pool, which drops it at a clear or its end.
    pub(crate) fn record<B: Send + Sync + 'static>(&self, object: B) -> Result<usize> {
        let arg = Box::into_raw(Box::new(object)).cast::<c_void>();
        let mut index = 0usize;
        // SAFETY: (H) live pool; drop_boxed::<B> matches `arg`'s type and is
        // called once, on whatever thread the pool drops on (B: Send + Sync).
        let status = unsafe { sys::cpool_pool_record(self.ptr(), arg, Some(drop_boxed::<B>), &mut index) };
        if status != sys::CPOOL_OK {
            // SAFETY: on failure the pool does not call drop: the box is ours.
            drop(unsafe { Box::from_raw(arg.cast::<B>()) });
        }
        check(status).map(|()| index)
    }

    pub(crate) fn stats(&self) -> Result<sys::cpool_pool_stats> {
        let mut st = sys::cpool_pool_stats::INIT;
        // SAFETY: (H) live pool; struct_size set to the full struct.
        check(unsafe { sys::cpool_pool_get_stats(self.ptr(), &mut st) })?;
        Ok(st)
    }

    pub(crate) fn trim(&self) -> Result<()> {
        // SAFETY: (H)
        check(unsafe { sys::cpool_pool_trim(self.ptr()) })
    }

    pub(crate) fn suspend(&self, mode: sys::cpool_suspend_mode) -> Result<()> {
        // SAFETY: (H)
        check(unsafe { sys::cpool_pool_suspend(self.ptr(), mode) })
    }

    pub(crate) fn resume(&self) -> Result<()> {
        // SAFETY: (H)
        check(unsafe { sys::cpool_pool_resume(self.ptr()) })
    }

    pub(crate) fn write_snapshot(&self, path: &Path) -> Result<()> {
        let path = path_cstring(path)?;
        // SAFETY: (H) live pool; a NUL-terminated path.
        check(unsafe { sys::cpool_pool_write_snapshot(self.ptr(), path.as_ptr()) })
    }
}

// ---- device memory ----------------------------------------------------------------

/// Element types of device buffers: plain data, valid for every bit
/// pattern, so that bytes copied back from the device are always a valid
/// value.
///
/// # Safety
/// Implement it only for `Copy` types without padding, pointers or
/// invariants (every bit pattern of its size is a valid value).
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

// SAFETY: primitive numbers: every bit pattern is a value, no padding.
unsafe impl Pod for u8 {}
unsafe impl Pod for i8 {}
unsafe impl Pod for u16 {}
unsafe impl Pod for i16 {}
unsafe impl Pod for u32 {}
unsafe impl Pod for i32 {}
unsafe impl Pod for u64 {}
unsafe impl Pod for i64 {}
unsafe impl Pod for f32 {}
unsafe impl Pod for f64 {}
unsafe impl Pod for usize {}
unsafe impl Pod for isize {}

/// One block of pool memory: the pool reference and the stream it is freed
/// on are held for as long as the block is.
pub(crate) struct Allocation {
    pool: RawPool,
    stream: Arc<RawStream>,
    ptr: NonNull<c_void>,
    bytes: usize,
}

// SAFETY: (T)(M) the pointer is device memory that Rust never dereferences;
// pools and streams are thread-safe.
unsafe impl Send for Allocation {}
unsafe impl Sync for Allocation {}

impl Allocation {
    pub(crate) fn new(pool: &RawPool, stream: &Arc<RawStream>, bytes: usize, output: bool) -> Result<Allocation> {
        let mut out = ptr::null_mut();
        // SAFETY: (H) live pool and stream; valid out-pointer.
        let status = unsafe {
            if output {
                sys::cpool_alloc_output(pool.ptr(), bytes, stream.ptr(), &mut out)
            } else {
                sys::cpool_alloc(pool.ptr(), bytes, stream.ptr(), &mut out)
            }
        };
        check(status)?;
        Ok(Allocation {
            pool: pool.clone(),
            stream: Arc::clone(stream),
            ptr: NonNull::new(out).expect("cpool_alloc returned OK and NULL"),
            bytes,
        })
    }

    pub(crate) fn address(&self) -> *mut c_void {
        self.ptr.as_ptr()
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: (H) live pool and stream (held by this value); the block was
        // handed out by this pool and is freed once, stream ordered on the
        // stream it was allocated on. A refusal (the pool being torn down
        // with its memory) leaves nothing to do.
        let _ = unsafe { sys::cpool_free(self.pool.ptr(), self.ptr.as_ptr(), self.stream.ptr()) };
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Enqueues a fill of every byte of the buffer with `byte` on `stream`
    /// (captured like any stream work).
    pub fn memset(&self, byte: u8, stream: &Stream) -> Result<()> {
        // SAFETY: (M) the whole block, held alive by self; (H) live stream.
        check(unsafe {
            sys::cpool_memset_async(stream.raw.ptr(), self.alloc.address(), byte as i32, self.alloc.bytes)
        })
    }

    /// Enqueues a copy of `src` into this buffer on `stream` (captured like
    /// any stream work). Both must have the same length.
    pub fn copy_from(&self, src: &DeviceBuffer<T>, stream: &Stream) -> Result<()> {
        if src.len != self.len {
            return Err(Error::refused(
                Status::InvalidArgument,
                format!("DeviceBuffer::copy_from: {} elements into {}", src.len, self.len),
            ));
        }
        // SAFETY: (M) both blocks held alive by the buffers, same size.
        check(unsafe {
            sys::cpool_memcpy_async(
                stream.raw.ptr(),
                self.alloc.address(),
                src.alloc.address(),
                self.len * std::mem::size_of::<T>(),
            )
        })
    }

    /// Copies `src` from host memory into the buffer and waits for it.
    /// Refused while `stream` captures.
    pub fn copy_from_host(&self, src: &[T], stream: &Stream) -> Result<()> {
        if src.len() != self.len {
            return Err(Error::refused(
                Status::InvalidArgument,
                format!("DeviceBuffer::copy_from_host: {} elements into {}", src.len(), self.len),
            ));
        }
        stream.raw.refuse_under_capture("DeviceBuffer::copy_from_host")?;
        // A copy of its own that the library reads: should the wait fail, the
        // copy may still be pending, and this copy is then never freed.
        let staging: Vec<T> = src.to_vec();
        // SAFETY: (M) `staging` lives until the synchronize below returned
        // (leaked if it fails).
        check(unsafe {
            sys::cpool_memcpy_async(
                stream.raw.ptr(),
                self.alloc.address(),
                staging.as_ptr().cast(),
                std::mem::size_of_val(src),
            )
        })?;
        if let Err(e) = stream.raw.synchronize() {
            std::mem::forget(staging);
            return Err(e);
        }
        Ok(())
    }

    /// Copies the buffer to host memory and waits for it. Refused while
    /// `stream` captures.
    pub fn to_vec(&self, stream: &Stream) -> Result<Vec<T>> {
        stream.raw.refuse_under_capture("DeviceBuffer::to_vec")?;
        let mut out: Vec<MaybeUninit<T>> = Vec::with_capacity(self.len);
        // SAFETY: (M) `out` has room for len elements and is kept until the
        // synchronize below has returned (leaked if it fails).
        check(unsafe {
            sys::cpool_memcpy_async(
                stream.raw.ptr(),
                out.as_mut_ptr().cast(),
                self.alloc.address(),
                self.len * std::mem::size_of::<T>(),
            )
        })?;
        if let Err(e) = stream.raw.synchronize() {
            // The copy may still write into `out`: never free it.
            std::mem::forget(out);
            return Err(e);
        }
        // SAFETY: the copy wrote all len elements; T: Pod, so any bytes are a
        // valid T.
        unsafe { out.set_len(self.len) };
        Ok(out.into_iter().map(|v| unsafe { v.assume_init() }).collect())
    }
}

// ---- capture and graphs ---------------------------------------------------------

/// One reference of a `cpool_graph`; Drop releases it.
pub(crate) struct RawGraph(NonNull<sys::cpool_graph>);

// SAFETY: (T) graphs are thread-safe but for update, which takes &mut.
unsafe impl Send for RawGraph {}
unsafe impl Sync for RawGraph {}

impl Drop for RawGraph {
    fn drop(&mut self) {
        // SAFETY: (H) the reference this value owns, released once; the
        // drops the release may run are drop_boxed, which catch panics.
        unsafe { sys::cpool_graph_release(self.0.as_ptr()) }
    }
}

impl RawGraph {
    pub(crate) fn ptr(&self) -> *mut sys::cpool_graph {
        self.0.as_ptr()
    }

    fn from_out(out: *mut sys::cpool_graph) -> RawGraph {
        RawGraph(NonNull::new(out).expect("a capture returned OK and no graph"))
    }

    /// One more reference of a graph the library hands a callback.
    fn retain(graph: *mut sys::cpool_graph) -> Option<RawGraph> {
        // SAFETY: (C) a graph handed to on_evict is live for the call (the
        // cache's reference goes after it); a dead one would be NULL here.
        NonNull::new(unsafe { sys::cpool_graph_retain(graph) }).map(RawGraph)
    }

    pub(crate) fn launch(&self, stream: &RawStream) -> Result<()> {
        // SAFETY: (H) live graph and stream.
        check(unsafe { sys::cpool_graph_launch(self.0.as_ptr(), stream.ptr()) })
    }

    /// A launch on a stream known only by its handle, which may be dead by
    /// now (its `Stream` dropped): the library then refuses it.
    pub(crate) fn launch_on_handle(&self, stream: StreamHandle) -> Result<()> {
        // SAFETY: (H) live graph; (C) a dead stream handle is refused, never
        // used.
        check(unsafe { sys::cpool_graph_launch(self.0.as_ptr(), stream.0.as_ptr()) })
    }

    pub(crate) fn upload(&self, stream: &RawStream) -> Result<()> {
        // SAFETY: (H) live graph and stream.
        check(unsafe { sys::cpool_graph_upload(self.0.as_ptr(), stream.ptr()) })
    }

    pub(crate) fn replays(&self) -> u64 {
        // SAFETY: (H)
        unsafe { sys::cpool_graph_replays(self.0.as_ptr()) }
    }

    pub(crate) fn id(&self) -> u64 {
        // SAFETY: (H)
        unsafe { sys::cpool_graph_id(self.0.as_ptr()) }
    }

    pub(crate) fn pool_buffer_count(&self) -> usize {
        // SAFETY: (H)
        unsafe { sys::cpool_graph_pool_buffer_count(self.0.as_ptr()) }
    }

    pub(crate) fn stats(&self) -> Result<sys::cpool_graph_stats> {
        let mut st = sys::cpool_graph_stats::INIT;
        // SAFETY: (H) live graph; struct_size set to the full struct.
        check(unsafe { sys::cpool_graph_get_stats(self.0.as_ptr(), &mut st) })?;
        Ok(st)
    }

    pub(crate) fn dump_dot(&self, path: &Path) -> Result<()> {
        let path = path_cstring(path)?;
        // SAFETY: (H) live graph; NUL-terminated path.
        check(unsafe { sys::cpool_graph_dump_dot(self.0.as_ptr(), path.as_ptr()) })
    }

    pub(crate) fn update<F: FnMut(&Stream) -> Result<()>>(&mut self, stream: &Stream, body: F) -> Result<()> {
        let mut ctx = Body::new(stream, body);
        // SAFETY: (H) live graph and stream; &mut self: no other call with
        // this graph races the update; ctx outlives the call.
        let status = unsafe {
            sys::cpool_graph_update(self.0.as_ptr(), stream.raw.ptr(), Some(Body::<F>::call), ctx.as_arg())
        };
        ctx.finish(status)
    }
}

pub(crate) fn capture_begin(stream: &RawStream, pool: Option<&RawPool>, mode: sys::cpool_capture_mode) -> Result<()> {
    let pool = pool.map_or(ptr::null_mut(), RawPool::ptr);
    // SAFETY: (H) live stream and pool (or NULL: no pool).
    check(unsafe { sys::cpool_capture_begin(stream.ptr(), pool, mode) })
}

pub(crate) fn capture_end(stream: &RawStream) -> Result<RawGraph> {
    let mut out = ptr::null_mut();
    // SAFETY: (H) live stream; valid out-pointer.
    check(unsafe { sys::cpool_capture_end(stream.ptr(), &mut out) })?;
    Ok(RawGraph::from_out(out))
}

/// A Rust closure handed to a C capture as `ctx`: it is called with the
/// capture's `Stream`, its error kept, a panic caught and resumed once the
/// C call has returned.
struct Body<'s, F> {
    stream: &'s Stream,
    f: F,
    error: Option<Error>,
    panic: Option<Box<dyn std::any::Any + Send>>,
}

impl<'s, F: FnMut(&Stream) -> Result<()>> Body<'s, F> {
    fn new(stream: &'s Stream, f: F) -> Self {
        Body { stream, f, error: None, panic: None }
    }

    fn as_arg(&mut self) -> *mut c_void {
        (self as *mut Self).cast()
    }

    unsafe extern "C" fn call(_s: *mut sys::cpool_stream, ctx: *mut c_void) -> sys::cpool_status {
        // SAFETY: ctx is the &mut Body handed to the C call that is running
        // now (as_arg), on this thread: the library calls the body from
        // the capturing call itself. (P) panics are caught here.
        let body = unsafe { &mut *ctx.cast::<Self>() };
        let stream = body.stream;
        match panic::catch_unwind(AssertUnwindSafe(|| (body.f)(stream))) {
            Ok(Ok(())) => sys::CPOOL_OK,
            Ok(Err(e)) => {
                let code = e.status.code();
                body.error = Some(e);
                code
            }
            Err(payload) => {
                body.panic = Some(payload);
                sys::CPOOL_ERR_INVALID_ARGUMENT
            }
        }
    }

    /// The call's outcome: a panic of the body resumed, its own error as it
    /// made it, or the C status.
    fn finish(self, status: sys::cpool_status) -> Result<()> {
        if let Some(payload) = self.panic {
            panic::resume_unwind(payload);
        }
        match (status, self.error) {
            (sys::CPOOL_OK, _) => Ok(()),
            (code, Some(e)) if e.status.code() == code => Err(e),
            (code, _) => check(code),
        }
    }
}

pub(crate) fn capture_scoped<F: FnMut(&Stream) -> Result<()>>(
    stream: &Stream,
    pool: Option<&RawPool>,
    mode: sys::cpool_capture_mode,
    body: F,
) -> Result<RawGraph> {
    let pool = pool.map_or(ptr::null_mut(), RawPool::ptr);
    let mut ctx = Body::new(stream, body);
    let mut out = ptr::null_mut();
    // SAFETY: (H) live stream and pool; ctx outlives the call.
    let status =
        unsafe { sys::cpool_capture(stream.raw.ptr(), pool, mode, Some(Body::<F>::call), ctx.as_arg(), &mut out) };
    ctx.finish(status)?;
    Ok(RawGraph::from_out(out))
}

pub(crate) fn graphed_call<F: FnMut(&Stream) -> Result<()>>(
    stream: &Stream,
    pool: &RawPool,
    mode: sys::cpool_capture_mode,
    warmup_runs: i32,
    body: F,
) -> Result<RawGraph> {
    let mut ctx = Body::new(stream, body);
    let mut out = ptr::null_mut();
    // SAFETY: (H) live stream and pool; ctx outlives the call.
    let status = unsafe {
        sys::cpool_graphed_call(
            stream.raw.ptr(),
            pool.ptr(),
            mode,
            warmup_runs,
            Some(Body::<F>::call),
            ctx.as_arg(),
            &mut out,
        )
    };
    ctx.finish(status)?;
    Ok(RawGraph::from_out(out))
}

// ---- graph caches -----------------------------------------------------------------

/// What a cache calls as a graph leaves it: the key and a reference of the
/// graph's own.
pub(crate) type EvictFn = Box<dyn FnMut(u64, RawGraph) + Send>;

/// on_evict's `user`: boxed, so its address stays while the cache lives.
/// The Mutex gives the FnMut to one eviction at a time (two threads' calls
/// may evict at once).
struct EvictHook(Mutex<EvictFn>);

/// A panic out of on_evict, kept for the call of its cache that runs on
/// this thread, innermost last.
type Payload = Box<dyn Any + Send>;

thread_local! {
    /// The calls of caches with a hook that run on this thread (launch,
    /// evict, the end): the hook, and the first panic of its on_evict in
    /// that call. The library runs on_evict inside the call that evicts,
    /// on its thread; nested where on_evict calls another cache.
    static EVICT_FRAMES: RefCell<Vec<(usize, Option<Payload>)>> = const { RefCell::new(Vec::new()) };
    /// The hooks whose closure runs on this thread now.
    static EVICT_RUNNING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A call of a cache on this thread (EVICT_FRAMES), left in Drop also
/// where the call unwinds.
struct EvictFrame {
    hook: usize,
    depth: usize,
}

impl EvictFrame {
    fn enter(hook: usize) -> EvictFrame {
        let depth = EVICT_FRAMES.with(|f| {
            let mut f = f.borrow_mut();
            f.push((hook, None));
            f.len()
        });
        EvictFrame { hook, depth }
    }

    /// Leaves the call: the first panic of on_evict in it, if any.
    fn leave(self) -> Option<Payload> {
        let payload = EVICT_FRAMES.with(|f| {
            let mut f = f.borrow_mut();
            debug_assert!(f.len() == self.depth && f[self.depth - 1].0 == self.hook, "cache calls nest");
            f.truncate(self.depth);
            f.pop().and_then(|(_, p)| p)
        });
        std::mem::forget(self);
        payload
    }
}

impl Drop for EvictFrame {
    fn drop(&mut self) {
        EVICT_FRAMES.with(|f| f.borrow_mut().truncate(self.depth - 1));
    }
}

type EvictHookFn = unsafe extern "C" fn(u64, *mut sys::cpool_graph, *mut c_void);

/// The on_evict of every cache with a closure.
unsafe extern "C" fn evict_hook(key: u64, graph: *mut sys::cpool_graph, user: *mut c_void) {
    // SAFETY: `user` is the EvictHook boxed by RawGraphCache::create, freed
    // only after cpool_graph_cache_destroy returned (field order of
    // RawGraphCache), and the library calls on_evict only inside calls of a
    // live cache. (P) a panic is caught here.
    let hook = unsafe { &*user.cast::<EvictHook>() };
    let id = user as usize;
    EVICT_RUNNING.with(|r| r.borrow_mut().push(id));
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        if let Some(graph) = RawGraph::retain(graph) {
            let mut f = hook.0.lock().unwrap_or_else(PoisonError::into_inner);
            (*f)(key, graph)
        }
    }));
    EVICT_RUNNING.with(|r| r.borrow_mut().pop());
    let Err(payload) = result else { return };
    // The innermost call of this cache keeps the first panic, to resume it
    // once the C call returned.
    let unkept = EVICT_FRAMES.with(|f| {
        let mut f = f.borrow_mut();
        match f.iter_mut().rev().find(|(h, _)| *h == id) {
            Some((_, slot @ None)) => {
                *slot = Some(payload);
                None
            }
            Some((_, Some(_))) => None, // a later panic of the same call: the first one is resumed
            None => Some(payload),
        }
    });
    if unkept.is_some() {
        eprintln!("capturepool: a GraphCache's on_evict panicked outside a call of the cache; the panic was stopped");
    }
}

/// A `cpool_graph_cache`, destroyed in Drop; then its hook goes.
pub(crate) struct RawGraphCache {
    ptr: NonNull<sys::cpool_graph_cache>,
    // Declared after ptr, dropped after Drop::drop destroyed the cache.
    hook: Option<Box<EvictHook>>,
}

// SAFETY: (T) the C cache is safe to call from several threads; the destroy
// is in Drop. The hook is a Mutex of a Send closure, so calling it from
// whichever thread evicts is sound.
unsafe impl Send for RawGraphCache {}
unsafe impl Sync for RawGraphCache {}

impl RawGraphCache {
    pub(crate) fn create(
        pool: &RawPool,
        max_bytes: u64,
        max_graphs: u32,
        on_evict: Option<EvictFn>,
    ) -> Result<RawGraphCache> {
        let hook = on_evict.map(|f| Box::new(EvictHook(Mutex::new(f))));
        let opts = sys::cpool_graph_cache_options {
            max_bytes,
            max_graphs,
            on_evict: hook.as_ref().map(|_| evict_hook as EvictHookFn),
            user: hook.as_ref().map_or(ptr::null_mut(), |h| (&**h as *const EvictHook).cast_mut().cast()),
            ..sys::cpool_graph_cache_options::INIT
        };
        let mut out = ptr::null_mut();
        // SAFETY: (H) live pool; opts a full, initialised struct whose user
        // outlives the cache (the box is dropped after the destroy).
        check(unsafe { sys::cpool_graph_cache_create(pool.ptr(), &opts, &mut out) })?;
        Ok(RawGraphCache { ptr: NonNull::new(out).expect("cpool_graph_cache_create returned OK and NULL"), hook })
    }

    fn ptr(&self) -> *mut sys::cpool_graph_cache {
        self.ptr.as_ptr()
    }

    fn hook_id(&self) -> Option<usize> {
        self.hook.as_ref().map(|h| &**h as *const EvictHook as usize)
    }

    /// Refuses a call that may evict from inside this cache's own on_evict
    /// on this thread: the closure is borrowed there.
    fn refuse_in_hook(&self, what: &str) -> Result<()> {
        let Some(id) = self.hook_id() else { return Ok(()) };
        if EVICT_RUNNING.with(|r| r.borrow().contains(&id)) {
            return Err(Error::refused(
                Status::InvalidArgument,
                format!("{what}: called from the cache's own on_evict, which may not evict again"),
            ));
        }
        Ok(())
    }

    /// Runs a C call that may evict; a panic of on_evict in it is returned.
    fn evicting<R>(&self, call: impl FnOnce() -> R) -> (R, Option<Payload>) {
        match self.hook_id() {
            Some(id) => {
                let frame = EvictFrame::enter(id);
                let r = call();
                (r, frame.leave())
            }
            None => (call(), None),
        }
    }

    pub(crate) fn launch<F: FnMut(&Stream) -> Result<()>>(
        &self,
        key: u64,
        stream: &Stream,
        mode: sys::cpool_capture_mode,
        body: F,
    ) -> Result<bool> {
        self.refuse_in_hook("GraphCache::launch")?;
        let mut ctx = Body::new(stream, body);
        let mut hit = false;
        // SAFETY: (H) live cache and stream; ctx outlives the call, which
        // calls the body (if at all) on this thread before it returns.
        let (status, evict_panic) = self.evicting(|| unsafe {
            let body: sys::cpool_capture_fn = Some(Body::<F>::call);
            sys::cpool_graph_cache_launch(self.ptr(), key, stream.raw.ptr(), mode, body, ctx.as_arg(), &mut hit)
        });
        // A failed body kept, evicted nothing: its panic or error goes first.
        if let (Some(payload), None) = (evict_panic, &ctx.panic) {
            panic::resume_unwind(payload);
        }
        ctx.finish(status)?;
        Ok(hit)
    }

    pub(crate) fn get(&self, key: u64) -> Result<Option<RawGraph>> {
        let mut out = ptr::null_mut();
        // SAFETY: (H) live cache; valid out-pointer; the reference handed
        // out is the caller's, owned by the RawGraph.
        check(unsafe { sys::cpool_graph_cache_get(self.ptr(), key, &mut out) })?;
        Ok(NonNull::new(out).map(RawGraph))
    }

    pub(crate) fn evict(&self, key: u64) -> Result<()> {
        self.refuse_in_hook("GraphCache::evict")?;
        // SAFETY: (H) live cache.
        let (status, evict_panic) = self.evicting(|| unsafe { sys::cpool_graph_cache_evict(self.ptr(), key) });
        if let Some(payload) = evict_panic {
            panic::resume_unwind(payload);
        }
        check(status)
    }

    pub(crate) fn stats(&self) -> Result<sys::cpool_graph_cache_stats> {
        let mut st = sys::cpool_graph_cache_stats::INIT;
        // SAFETY: (H) live cache; struct_size set to the full struct.
        check(unsafe { sys::cpool_graph_cache_get_stats(self.ptr(), &mut st) })?;
        Ok(st)
    }

    pub(crate) fn predict_bytes(&self, scratch_bytes: u64, output_bytes: u64) -> Result<u64> {
        let mut bytes = 0u64;
        // SAFETY: (H) live cache; valid out-pointer.
        check(unsafe { sys::cpool_graph_cache_predict_bytes(self.ptr(), scratch_bytes, output_bytes, &mut bytes) })?;
        Ok(bytes)
    }
}

impl Drop for RawGraphCache {
    fn drop(&mut self) {
        // SAFETY: (H)(T) the handle this value owns, destroyed once; no other
        // call of it can run (Drop has it by value). on_evict runs for every
        // graph kept, on this thread, before the destroy returns.
        let ((), evict_panic) = self.evicting(|| unsafe { sys::cpool_graph_cache_destroy(self.ptr()) });
        if let Some(payload) = evict_panic {
            if std::thread::panicking() {
                eprintln!(
                    "capturepool: a GraphCache's on_evict panicked while the cache was dropped in a panic; \
                     the panic was stopped"
                );
            } else {
                panic::resume_unwind(payload);
            }
        }
    }
}

/// A marker that makes a type `!Sync` (and keeps it `Send`).
pub(crate) type NotSync = PhantomData<Cell<()>>;
