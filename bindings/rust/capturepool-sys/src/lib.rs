//! Raw declarations of the capturepool C API, one for one with
//! `include/capturepool.h` (the section numbers below are the header's).
//!
//! Written by hand and kept in step with the header by the test
//! `tests/header_match.rs`, which parses the header and checks that every
//! function is declared here with the same name and number of arguments, and
//! that every struct has the same fields in the same order.
//!
//! The header's comments are the documentation of each call. C enums are
//! plain integers here (`c_uint`, as the C compilers of the supported
//! platforms lay them out), so that a value outside the Rust side's list is
//! never undefined behaviour; the constants carry the header's values.
//!
//! `build.rs` links the library: the one in `CAPTUREPOOL_LIB_DIR` when that
//! is set, else one it builds with the project's CMake.
#![allow(non_camel_case_types)]
#![no_std]

use core::ffi::{c_char, c_int, c_uint, c_void};

// ---- 1. Library ------------------------------------------------------------

pub const CPOOL_VERSION_MAJOR: c_uint = 0;
pub const CPOOL_VERSION_MINOR: c_uint = 2;
pub const CPOOL_VERSION_PATCH: c_uint = 0;
pub const CPOOL_VERSION_NUMBER: c_uint =
    CPOOL_VERSION_MAJOR * 10000 + CPOOL_VERSION_MINOR * 100 + CPOOL_VERSION_PATCH;

/// `cpool_status`: values from the header's `CPOOL_STATUS_MAP`.
pub type cpool_status = c_uint;
pub const CPOOL_OK: cpool_status = 0;
pub const CPOOL_ERR_INVALID_ARGUMENT: cpool_status = 1;
pub const CPOOL_ERR_OUT_OF_MEMORY: cpool_status = 2;
pub const CPOOL_ERR_SEALED: cpool_status = 3;
pub const CPOOL_ERR_NOT_CAPTURING: cpool_status = 4;
pub const CPOOL_ERR_ALREADY_CAPTURING: cpool_status = 5;
pub const CPOOL_ERR_CAPTURE_INVALIDATED: cpool_status = 6;
pub const CPOOL_ERR_STALE_GRAPH: cpool_status = 7;
pub const CPOOL_ERR_NO_DEVICE: cpool_status = 8;
pub const CPOOL_ERR_BACKEND: cpool_status = 9;
pub const CPOOL_ERR_UNSUPPORTED: cpool_status = 10;
pub const CPOOL_ERR_NOT_READY: cpool_status = 11;
pub const CPOOL_ERR_OUTPUT_LIVE: cpool_status = 12;
pub const CPOOL_ERR_IO: cpool_status = 13;
pub const CPOOL_ERR_SUSPENDED: cpool_status = 14;

// ---- 2. Devices --------------------------------------------------------------

pub type cpool_backend = c_uint;
pub const CPOOL_BACKEND_AUTO: cpool_backend = 0;
pub const CPOOL_BACKEND_CUDA: cpool_backend = 1;
pub const CPOOL_BACKEND_HOST: cpool_backend = 2;

/// Opaque: `cpool_device_open` / `cpool_device_close`.
#[repr(C)]
pub struct cpool_device {
    _opaque: [u8; 0],
}

// ---- 3. Streams --------------------------------------------------------------

/// Opaque: `cpool_stream_create` or `cpool_stream_wrap` / `cpool_stream_destroy`.
#[repr(C)]
pub struct cpool_stream {
    _opaque: [u8; 0],
}

// ---- 4. Events ---------------------------------------------------------------

/// Opaque: `cpool_event_create` / `cpool_event_destroy`.
#[repr(C)]
pub struct cpool_event {
    _opaque: [u8; 0],
}

// ---- 5. Pools ----------------------------------------------------------------

/// Opaque: `cpool_pool_create` / the last `cpool_pool_release`.
#[repr(C)]
pub struct cpool_pool {
    _opaque: [u8; 0],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct cpool_pool_options {
    pub struct_size: usize,
    pub reserve_bytes: u64,
    pub max_reserved_bytes: u64,
    pub plain_segments: bool,
}

impl cpool_pool_options {
    /// `CPOOL_POOL_OPTIONS_INIT`.
    pub const INIT: cpool_pool_options = cpool_pool_options {
        struct_size: core::mem::size_of::<cpool_pool_options>(),
        reserve_bytes: 0,
        max_reserved_bytes: 0,
        plain_segments: false,
    };
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct cpool_pool_stats {
    pub struct_size: usize,
    pub reserved_bytes: u64,
    pub reserved_bytes_peak: u64,
    pub allocated_bytes: u64,
    pub allocated_bytes_peak: u64,
    pub graph_reserved_bytes: u64,
    pub alloc_count: u64,
    pub free_count: u64,
    pub segment_count: u64,
    pub cached_bytes: u64,
    pub graph_count: u64,
    pub host_kept_bytes: u64,
    pub host_reserved_bytes: u64,
}

impl cpool_pool_stats {
    /// `CPOOL_POOL_STATS_INIT`.
    pub const INIT: cpool_pool_stats = cpool_pool_stats {
        struct_size: core::mem::size_of::<cpool_pool_stats>(),
        reserved_bytes: 0,
        reserved_bytes_peak: 0,
        allocated_bytes: 0,
        allocated_bytes_peak: 0,
        graph_reserved_bytes: 0,
        alloc_count: 0,
        free_count: 0,
        segment_count: 0,
        cached_bytes: 0,
        graph_count: 0,
        host_kept_bytes: 0,
        host_reserved_bytes: 0,
    };
}

pub type cpool_suspend_mode = c_uint;
pub const CPOOL_SUSPEND_KEEP_CONTENTS: cpool_suspend_mode = 0;
pub const CPOOL_SUSPEND_DISCARD: cpool_suspend_mode = 1;

// ---- 6. Capture and graphs ---------------------------------------------------

pub type cpool_capture_mode = c_uint;
pub const CPOOL_CAPTURE_GLOBAL: cpool_capture_mode = 0;
pub const CPOOL_CAPTURE_THREAD_LOCAL: cpool_capture_mode = 1;
pub const CPOOL_CAPTURE_RELAXED: cpool_capture_mode = 2;

pub type cpool_capture_state = c_uint;
pub const CPOOL_CAPTURE_NONE: cpool_capture_state = 0;
pub const CPOOL_CAPTURE_ACTIVE: cpool_capture_state = 1;
pub const CPOOL_CAPTURE_INVALIDATED: cpool_capture_state = 2;

/// Opaque: `cpool_capture_end`, `cpool_capture` or `cpool_graphed_call` /
/// the last `cpool_graph_release`.
#[repr(C)]
pub struct cpool_graph {
    _opaque: [u8; 0],
}

pub type cpool_capture_fn = Option<unsafe extern "C" fn(s: *mut cpool_stream, ctx: *mut c_void) -> cpool_status>;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct cpool_graph_stats {
    pub struct_size: usize,
    pub write_bytes: u64,
    pub shared_write_bytes: u64,
    pub live_output_bytes: u64,
    pub live_outputs: u64,
    pub pool_count: u64,
    pub own_bytes: u64,
}

impl cpool_graph_stats {
    /// `CPOOL_GRAPH_STATS_INIT`.
    pub const INIT: cpool_graph_stats = cpool_graph_stats {
        struct_size: core::mem::size_of::<cpool_graph_stats>(),
        write_bytes: 0,
        shared_write_bytes: 0,
        live_output_bytes: 0,
        live_outputs: 0,
        pool_count: 0,
        own_bytes: 0,
    };
}

// ---- 9. Graph cache ------------------------------------------------------------

/// Opaque: `cpool_graph_cache_create` / `cpool_graph_cache_destroy`.
#[repr(C)]
pub struct cpool_graph_cache {
    _opaque: [u8; 0],
}

/// Called as a graph leaves a cache.
pub type cpool_graph_cache_evict_fn = Option<unsafe extern "C" fn(key: u64, graph: *mut cpool_graph, user: *mut c_void)>;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cpool_graph_cache_options {
    pub struct_size: usize,
    pub max_bytes: u64,
    pub max_graphs: u32,
    pub on_evict: cpool_graph_cache_evict_fn,
    pub user: *mut c_void,
}

impl cpool_graph_cache_options {
    /// `CPOOL_GRAPH_CACHE_OPTIONS_INIT`.
    pub const INIT: cpool_graph_cache_options = cpool_graph_cache_options {
        struct_size: core::mem::size_of::<cpool_graph_cache_options>(),
        max_bytes: 0,
        max_graphs: 0,
        on_evict: None,
        user: core::ptr::null_mut(),
    };
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct cpool_graph_cache_stats {
    pub struct_size: usize,
    pub graphs: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub graph_bytes: u64,
}

impl cpool_graph_cache_stats {
    /// `CPOOL_GRAPH_CACHE_STATS_INIT`.
    pub const INIT: cpool_graph_cache_stats = cpool_graph_cache_stats {
        struct_size: core::mem::size_of::<cpool_graph_cache_stats>(),
        graphs: 0,
        hits: 0,
        misses: 0,
        evictions: 0,
        graph_bytes: 0,
    };
}

// ---- 7. Parameter blocks -----------------------------------------------------

/// Opaque: `cpool_param_create`; it ends with its pool.
#[repr(C)]
pub struct cpool_param {
    _opaque: [u8; 0],
}

/// A host function enqueued by `cpool_launch_host`.
pub type cpool_host_fn = Option<unsafe extern "C" fn(arg: *mut c_void)>;
/// A drop handed to `cpool_pool_record`.
pub type cpool_drop_fn = Option<unsafe extern "C" fn(object: *mut c_void)>;

extern "C" {
    // 1. Library
    pub fn cpool_version_string() -> *const c_char;
    pub fn cpool_version() -> c_uint;
    pub fn cpool_status_string(s: cpool_status) -> *const c_char;
    pub fn cpool_last_error() -> *const c_char;
    pub fn cpool_wait_deferred();

    // 2. Devices
    pub fn cpool_device_open(backend: cpool_backend, ordinal: c_int, out: *mut *mut cpool_device) -> cpool_status;
    pub fn cpool_device_close(dev: *mut cpool_device);
    pub fn cpool_device_backend(dev: *const cpool_device) -> cpool_backend;

    // 3. Streams
    pub fn cpool_stream_create(dev: *mut cpool_device, out: *mut *mut cpool_stream) -> cpool_status;
    pub fn cpool_stream_wrap(dev: *mut cpool_device, cuda_stream: *mut c_void, out: *mut *mut cpool_stream)
        -> cpool_status;
    pub fn cpool_stream_native(s: *const cpool_stream) -> *mut c_void;
    pub fn cpool_stream_synchronize(s: *mut cpool_stream) -> cpool_status;
    pub fn cpool_stream_destroy(s: *mut cpool_stream);
    pub fn cpool_launch_host(s: *mut cpool_stream, fn_: cpool_host_fn, arg: *mut c_void) -> cpool_status;
    pub fn cpool_memcpy_async(s: *mut cpool_stream, dst: *mut c_void, src: *const c_void, bytes: usize)
        -> cpool_status;
    pub fn cpool_memset_async(s: *mut cpool_stream, dst: *mut c_void, value: c_int, bytes: usize) -> cpool_status;

    // 4. Events
    pub fn cpool_event_create(dev: *mut cpool_device, out: *mut *mut cpool_event) -> cpool_status;
    pub fn cpool_event_destroy(e: *mut cpool_event);
    pub fn cpool_event_record(e: *mut cpool_event, s: *mut cpool_stream) -> cpool_status;
    pub fn cpool_stream_wait_event(s: *mut cpool_stream, e: *mut cpool_event) -> cpool_status;
    pub fn cpool_event_query(e: *mut cpool_event) -> cpool_status;
    pub fn cpool_event_synchronize(e: *mut cpool_event) -> cpool_status;
    pub fn cpool_event_elapsed_ms(start: *mut cpool_event, end: *mut cpool_event, ms_out: *mut f32) -> cpool_status;

    // 5. Pools
    pub fn cpool_pool_create(dev: *mut cpool_device, opts: *const cpool_pool_options, out: *mut *mut cpool_pool)
        -> cpool_status;
    pub fn cpool_pool_retain(pool: *mut cpool_pool) -> *mut cpool_pool;
    pub fn cpool_pool_release(pool: *mut cpool_pool);
    pub fn cpool_pool_seal(pool: *mut cpool_pool);
    pub fn cpool_pool_unseal(pool: *mut cpool_pool);
    pub fn cpool_pool_is_sealed(pool: *const cpool_pool) -> bool;
    pub fn cpool_pool_grows_in_place(pool: *const cpool_pool) -> bool;
    pub fn cpool_pool_record(pool: *mut cpool_pool, object: *mut c_void, drop: cpool_drop_fn, index_out: *mut usize)
        -> cpool_status;
    pub fn cpool_pool_buffer_count(pool: *const cpool_pool) -> usize;
    pub fn cpool_pool_clear_buffers(pool: *mut cpool_pool);
    pub fn cpool_alloc(pool: *mut cpool_pool, bytes: usize, s: *mut cpool_stream, ptr_out: *mut *mut c_void)
        -> cpool_status;
    pub fn cpool_alloc_output(pool: *mut cpool_pool, bytes: usize, s: *mut cpool_stream, ptr_out: *mut *mut c_void)
        -> cpool_status;
    pub fn cpool_free(pool: *mut cpool_pool, ptr: *mut c_void, s: *mut cpool_stream) -> cpool_status;
    pub fn cpool_pool_get_stats(pool: *const cpool_pool, out: *mut cpool_pool_stats) -> cpool_status;
    pub fn cpool_pool_trim(pool: *mut cpool_pool) -> cpool_status;
    pub fn cpool_pool_suspend(pool: *mut cpool_pool, mode: cpool_suspend_mode) -> cpool_status;
    pub fn cpool_pool_resume(pool: *mut cpool_pool) -> cpool_status;
    pub fn cpool_pool_is_suspended(pool: *const cpool_pool) -> bool;

    // 6. Capture and graphs
    pub fn cpool_capture_begin(s: *mut cpool_stream, pool: *mut cpool_pool, mode: cpool_capture_mode) -> cpool_status;
    pub fn cpool_capture_end(s: *mut cpool_stream, graph_out: *mut *mut cpool_graph) -> cpool_status;
    pub fn cpool_capture_status(s: *mut cpool_stream, out: *mut cpool_capture_state) -> cpool_status;
    pub fn cpool_capture_attach(s: *mut cpool_stream, pool: *mut cpool_pool) -> cpool_status;
    pub fn cpool_capture_detach(s: *mut cpool_stream, hold_out: *mut *mut cpool_graph) -> cpool_status;
    pub fn cpool_capture_note_scratch(
        s: *mut cpool_stream,
        pool: *mut cpool_pool,
        block: *mut c_void,
        offset: usize,
        bytes: usize,
    ) -> cpool_status;
    pub fn cpool_capture(
        s: *mut cpool_stream,
        pool: *mut cpool_pool,
        mode: cpool_capture_mode,
        body: cpool_capture_fn,
        ctx: *mut c_void,
        graph_out: *mut *mut cpool_graph,
    ) -> cpool_status;
    pub fn cpool_graphed_call(
        s: *mut cpool_stream,
        pool: *mut cpool_pool,
        mode: cpool_capture_mode,
        warmup_runs: c_int,
        body: cpool_capture_fn,
        ctx: *mut c_void,
        out: *mut *mut cpool_graph,
    ) -> cpool_status;
    pub fn cpool_graph_launch(g: *mut cpool_graph, s: *mut cpool_stream) -> cpool_status;
    pub fn cpool_graph_upload(g: *mut cpool_graph, s: *mut cpool_stream) -> cpool_status;
    pub fn cpool_graph_id(g: *const cpool_graph) -> u64;
    pub fn cpool_graph_replays(g: *const cpool_graph) -> u64;
    pub fn cpool_graph_get_stats(g: *const cpool_graph, out: *mut cpool_graph_stats) -> cpool_status;
    pub fn cpool_graph_pool(g: *const cpool_graph) -> *mut cpool_pool;
    pub fn cpool_graph_pool_buffer_count(g: *const cpool_graph) -> usize;
    pub fn cpool_graph_native(g: *const cpool_graph) -> *mut c_void;
    pub fn cpool_graph_retain(g: *mut cpool_graph) -> *mut cpool_graph;
    pub fn cpool_graph_release(g: *mut cpool_graph);
    pub fn cpool_graph_update(g: *mut cpool_graph, s: *mut cpool_stream, body: cpool_capture_fn, ctx: *mut c_void)
        -> cpool_status;
    pub fn cpool_graph_dump_dot(g: *const cpool_graph, path: *const c_char) -> cpool_status;

    // 7. Parameter blocks
    pub fn cpool_param_create(pool: *mut cpool_pool, bytes: usize, out: *mut *mut cpool_param) -> cpool_status;
    pub fn cpool_param_device_ptr(p: *const cpool_param) -> *mut c_void;
    pub fn cpool_param_set(p: *mut cpool_param, value: *const c_void, bytes: usize, s: *mut cpool_stream)
        -> cpool_status;

    // 8. Snapshots
    pub fn cpool_pool_write_snapshot(pool: *const cpool_pool, path: *const c_char) -> cpool_status;

    // 9. Graph cache
    pub fn cpool_graph_cache_create(
        pool: *mut cpool_pool,
        opts: *const cpool_graph_cache_options,
        out: *mut *mut cpool_graph_cache,
    ) -> cpool_status;
    pub fn cpool_graph_cache_destroy(cache: *mut cpool_graph_cache);
    pub fn cpool_graph_cache_launch(
        cache: *mut cpool_graph_cache,
        key: u64,
        s: *mut cpool_stream,
        mode: cpool_capture_mode,
        body: cpool_capture_fn,
        ctx: *mut c_void,
        hit_out: *mut bool,
    ) -> cpool_status;
    pub fn cpool_graph_cache_get(cache: *mut cpool_graph_cache, key: u64, graph_out: *mut *mut cpool_graph)
        -> cpool_status;
    pub fn cpool_graph_cache_evict(cache: *mut cpool_graph_cache, key: u64) -> cpool_status;
    pub fn cpool_graph_cache_get_stats(cache: *const cpool_graph_cache, out: *mut cpool_graph_cache_stats)
        -> cpool_status;
    pub fn cpool_graph_cache_predict_bytes(
        cache: *mut cpool_graph_cache,
        scratch_bytes: u64,
        output_bytes: u64,
        bytes_out: *mut u64,
    ) -> cpool_status;
}
