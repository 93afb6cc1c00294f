//! Every `Err` path the crate has: each returns the C status (or the one C
//! gives for the same misuse) with a message, and leaves things usable.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use capturepool::*;
use common::*;

fn is_err_with(r: Result<impl std::fmt::Debug>, status: Status) -> Error {
    let e = r.expect_err("an error");
    assert_eq!(e.status, status, "{e}");
    e
}

#[test]
fn error_is_a_std_error_with_status_and_message() {
    let pool = CapturePool::new();
    let (_dev, stream) = setup();
    pool.seal();
    let e = is_err_with(pool.alloc::<u8>(64, &stream), Status::Sealed);
    assert!(e.message.contains("cpool_alloc"), "message from cpool_last_error: {}", e.message);
    let boxed: Box<dyn std::error::Error> = Box::new(e.clone());
    assert!(boxed.to_string().contains("CPOOL_ERR_SEALED"));
    assert_eq!(e.status.code(), 3);
    assert_eq!(e.status.to_string(), "pool is sealed");
}

#[test]
fn sealed_pool_refuses_allocation_until_unsealed() {
    let (dev, stream) = setup();
    let pool = CapturePool::on(&dev).unwrap();
    pool.seal();
    is_err_with(pool.alloc::<f32>(16, &stream), Status::Sealed);
    is_err_with(pool.alloc_output::<f32>(16, &stream), Status::Sealed);
    // Also under capture: a sealed pool is accepted at begin, serves nothing.
    let pool = Arc::new(pool);
    let guard = GraphCaptureGuard::with_pool(&stream, &pool).unwrap();
    is_err_with(pool.alloc::<f32>(16, &stream), Status::Sealed);
    drop(guard);
    pool.unseal();
    assert_eq!(pool.alloc::<f32>(16, &stream).unwrap().len(), 16);
}

#[test]
fn zero_length_allocation_is_invalid() {
    let (_dev, stream) = setup();
    let pool = CapturePool::new();
    is_err_with(pool.alloc::<f32>(0, &stream), Status::InvalidArgument);
    is_err_with(pool.alloc::<u64>(usize::MAX, &stream), Status::OutOfMemory);
}

#[test]
fn suspended_pool_refuses_allocations_and_launches() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    if !pool.grows_in_place() {
        is_err_with(pool.suspend(SuspendMode::KeepContents), Status::Unsupported);
        return;
    }
    let buf = pool.alloc::<u32>(256, &stream).unwrap();
    buf.copy_from_host(&[7u32; 256], &stream).unwrap();
    let graph = capture(&stream, Some(&pool), CaptureMode::Global, |s| {
        let tmp = pool.alloc::<u32>(256, s)?;
        tmp.copy_from(&buf, s)?;
        buf.copy_from(&tmp, s)
    })
    .unwrap();
    pool.suspend(SuspendMode::KeepContents).unwrap();
    assert!(pool.is_suspended());
    pool.suspend(SuspendMode::KeepContents).unwrap(); // a second suspend changes nothing
    is_err_with(pool.alloc::<u32>(4, &stream), Status::Suspended);
    is_err_with(graph.launch(), Status::Suspended);
    is_err_with(buf.memset(0, &stream), Status::Suspended);
    is_err_with(GraphCaptureGuard::with_pool(&stream, &pool), Status::Suspended);
    assert_eq!(pool.stats().unwrap().reserved_bytes, 0);
    pool.resume().unwrap();
    assert!(!pool.is_suspended());
    graph.launch().unwrap();
    assert_eq!(buf.to_vec(&stream).unwrap(), vec![7u32; 256], "kept contents came back");
}

#[test]
fn plain_segments_cannot_suspend() {
    let dev = device();
    let pool = CapturePool::with_options(&dev, PoolOptions { plain_segments: true, ..Default::default() }).unwrap();
    assert!(!pool.grows_in_place());
    is_err_with(pool.suspend(SuspendMode::Discard), Status::Unsupported);
}

#[test]
fn bad_pool_options_are_invalid() {
    let dev = device();
    let opts = PoolOptions { reserve_bytes: 8 << 20, max_reserved_bytes: 2 << 20, ..Default::default() };
    is_err_with(CapturePool::with_options(&dev, opts), Status::InvalidArgument);
}

#[test]
fn capture_errors() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    // End without a begin.
    is_err_with(end_capture_with_pool(&stream, Arc::clone(&pool)), Status::NotCapturing);
    // Begin twice.
    begin_capture_with_pool(&pool, &stream).unwrap();
    assert_eq!(stream.capture_state().unwrap(), CaptureState::Active);
    is_err_with(begin_capture_with_pool(&pool, &stream), Status::AlreadyCapturing);
    // A synchronize breaks the capture; its end reports it, the stream is usable.
    is_err_with(stream.synchronize(), Status::CaptureInvalidated);
    assert_eq!(stream.capture_state().unwrap(), CaptureState::Invalidated);
    is_err_with(end_capture_with_pool(&stream, Arc::clone(&pool)), Status::CaptureInvalidated);
    assert_eq!(stream.capture_state().unwrap(), CaptureState::None);
    stream.synchronize().unwrap();
}

#[test]
fn host_copies_and_eager_host_functions_are_refused_under_capture() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let buf = pool.alloc::<f32>(8, &stream).unwrap();
    let guard = GraphCaptureGuard::with_pool(&stream, &pool).unwrap();
    is_err_with(buf.to_vec(&stream), Status::InvalidArgument);
    is_err_with(buf.copy_from_host(&[0.0; 8], &stream), Status::InvalidArgument);
    is_err_with(stream.launch_host(|| {}), Status::InvalidArgument);
    drop(guard);
    assert_eq!(stream.capture_state().unwrap(), CaptureState::None);
    assert_eq!(buf.to_vec(&stream).unwrap().len(), 8);
}

#[test]
fn mismatched_copies_are_invalid() {
    let (_dev, stream) = setup();
    let pool = CapturePool::new();
    let a = pool.alloc::<f32>(8, &stream).unwrap();
    let b = pool.alloc::<f32>(9, &stream).unwrap();
    is_err_with(a.copy_from(&b, &stream), Status::InvalidArgument);
    is_err_with(a.copy_from_host(&[1.0; 3], &stream), Status::InvalidArgument);
}

#[test]
fn a_graph_whose_stream_was_destroyed() {
    let dev = device();
    let pool = Arc::new(CapturePool::on(&dev).unwrap());
    let stream = Stream::new(&dev).unwrap();
    begin_capture_with_pool(&pool, &stream).unwrap();
    let graph = end_capture_with_pool(&stream, Arc::clone(&pool)).unwrap();
    drop(stream);
    let e = is_err_with(graph.launch(), Status::InvalidArgument);
    assert!(e.message.contains("destroyed"), "{e}");
    is_err_with(graph.upload(), Status::InvalidArgument);
    let other = Stream::new(&dev).unwrap();
    graph.launch_on(&other).unwrap();
    graph.upload_on(&other).unwrap();
    assert_eq!(graph.num_replays(), 1);
}

#[test]
fn launch_on_a_capturing_stream_is_invalid() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let graph = capture(&stream, Some(&pool), CaptureMode::Global, |_| Ok(())).unwrap();
    let guard = GraphCaptureGuard::new(&stream, None, CaptureMode::Relaxed).unwrap();
    is_err_with(graph.launch(), Status::InvalidArgument);
    drop(guard);
    graph.launch().unwrap();
}

#[test]
fn a_failing_capture_body_discards_the_capture() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let e = capture(&stream, Some(&pool), CaptureMode::Global, |s| {
        pool.alloc::<u8>(64, s)?;
        pool.seal();
        pool.alloc::<u8>(64, s).map(drop)
    })
    .unwrap_err();
    assert_eq!(e.status, Status::Sealed);
    assert!(e.message.contains("cpool_alloc"), "the body's own message: {e}");
    assert_eq!(stream.capture_state().unwrap(), CaptureState::None);
    pool.unseal();
    // A body's own error passes through unchanged.
    let e = capture(&stream, Some(&pool), CaptureMode::Global, |_| {
        Err(Error { status: Status::Unsupported, message: "mine".into() })
    })
    .unwrap_err();
    assert_eq!(e, Error { status: Status::Unsupported, message: "mine".into() });
    stream.synchronize().unwrap();
}

#[test]
fn a_panicking_capture_body_resumes_after_the_capture_is_discarded() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = capture(&stream, Some(&pool), CaptureMode::Global, |_| panic!("in the body"));
    }));
    assert!(r.is_err());
    assert_eq!(stream.capture_state().unwrap(), CaptureState::None);
    stream.synchronize().unwrap();
}

#[test]
fn guard_discards_a_capture_left_by_an_error() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    fn step(stream: &Stream, pool: &Arc<CapturePool>) -> Result<CapturedGraph> {
        let guard = GraphCaptureGuard::with_pool(stream, pool)?;
        pool.seal();
        let _buf = pool.alloc::<f32>(4, stream)?; // fails: the guard discards
        guard.end()
    }
    is_err_with(step(&stream, &pool), Status::Sealed);
    assert_eq!(stream.capture_state().unwrap(), CaptureState::None);
    pool.unseal();
    let guard = GraphCaptureGuard::with_pool(&stream, &pool).unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    guard.launch_host(move || {
        h.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    let graph = guard.end().unwrap();
    graph.launch().unwrap();
    graph.launch().unwrap();
    stream.synchronize().unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // Without a pool a captured host function has no keeper.
    let guard = GraphCaptureGuard::new(&stream, None, CaptureMode::Global).unwrap();
    is_err_with(guard.launch_host(|| {}), Status::InvalidArgument);
}

#[test]
fn devices_that_do_not_exist() {
    is_err_with(Device::open(Backend::Host, -1), Status::InvalidArgument);
    assert!(Device::open(Backend::Host, 1).is_err());
    assert_eq!(Device::open(Backend::Host, 0).unwrap().backend(), Backend::Host);
    if device().backend() == Backend::Host {
        // No usable GPU here (AUTO fell back to the host backend).
        is_err_with(Device::open(Backend::Cuda, 0), Status::NoDevice);
    }
}

#[test]
fn snapshot_to_a_path_that_cannot_be_written() {
    let pool = CapturePool::new();
    is_err_with(pool.write_snapshot("/nonexistent-folder/x/snapshot.json"), Status::Io);
    is_err_with(pool.write_snapshot("bad\0path"), Status::InvalidArgument);
}

#[test]
fn panics_in_callbacks_stop_at_the_library() {
    let (_dev, stream) = setup();
    stream.launch_host(|| panic!("host function panic (expected by the test)")).unwrap();
    stream.synchronize().unwrap();
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("drop panic (expected by the test)");
        }
    }
    let log = log();
    let pool = CapturePool::new();
    pool.record_buffer(PanicsOnDrop);
    pool.record_buffer(Tracked { id: 1, log: Arc::clone(&log) });
    pool.clear_buffers();
    assert_eq!(logged(&log), vec![1], "the drops after a panicking one still run");
}

#[test]
fn launch_after_its_stream_is_dropped_is_refused() {
    let (dev, stream) = setup();
    let pool = Arc::new(CapturePool::on(&dev).unwrap());
    let graph = capture(&stream, Some(&pool), CaptureMode::Global, |s| pool.alloc::<u32>(256, s)?.memset(0, s)).unwrap();
    graph.launch().unwrap();
    stream.synchronize().unwrap();
    drop(stream);
    let e = is_err_with(graph.launch(), Status::InvalidArgument);
    assert!(e.message.contains("destroyed"), "{}", e.message);
    // Launched on a live stream, it still runs.
    let other = Stream::new(&dev).unwrap();
    graph.launch_on(&other).unwrap();
    other.synchronize().unwrap();
    assert_eq!(graph.num_replays(), 2);
}
