//! ferrotorch's own CapturePool tests, ported: the sealed flag, the buffer
//! count, registration-order drops, drops with the last Arc (or the last
//! graph), a clear while a graph holds the pool, and Default.
mod common;

use std::sync::Arc;

use capturepool::*;
use common::*;

#[test]
fn new_pool_is_unsealed() {
    let pool = CapturePool::new();
    assert!(!pool.is_capture_pool_sealed());
    assert_eq!(pool.buffer_count(), 0);
}

#[test]
fn seal_and_unseal_toggle_the_flag() {
    let pool = CapturePool::new();
    pool.seal();
    assert!(pool.is_capture_pool_sealed());
    pool.seal();
    assert!(pool.is_capture_pool_sealed());
    pool.unseal();
    assert!(!pool.is_capture_pool_sealed());
}

#[test]
fn default_is_a_new_unsealed_empty_pool() {
    let pool = CapturePool::default();
    assert!(!pool.is_capture_pool_sealed());
    assert_eq!(pool.buffer_count(), 0);
}

#[test]
fn record_buffer_returns_indices_and_counts() {
    let pool = CapturePool::new();
    assert_eq!(pool.record_buffer(vec![0f32; 16]), 0);
    assert_eq!(pool.record_buffer(Arc::new(1u64)), 1);
    assert_eq!(pool.record_buffer(String::from("workspace")), 2);
    assert_eq!(pool.buffer_count(), 3);
    pool.clear_buffers();
    assert_eq!(pool.buffer_count(), 0);
    assert_eq!(pool.record_buffer(()), 0, "indices restart after a clear");
    assert_eq!(pool.buffer_count(), 1);
}

#[test]
fn sealed_pool_still_records() {
    let pool = CapturePool::new();
    pool.seal();
    assert_eq!(pool.record_buffer(7u32), 0);
    assert_eq!(pool.buffer_count(), 1);
}

#[test]
fn buffers_drop_in_registration_order_with_the_last_arc() {
    let log = log();
    let pool = Arc::new(CapturePool::new());
    for id in 0..5 {
        pool.record_buffer(Tracked { id, log: Arc::clone(&log) });
    }
    let second = Arc::clone(&pool);
    drop(pool);
    assert!(logged(&log).is_empty(), "a reference is left: nothing dropped");
    drop(second);
    assert_eq!(logged(&log), vec![0, 1, 2, 3, 4]);
}

#[test]
fn clear_buffers_drops_in_registration_order() {
    let log = log();
    let pool = CapturePool::new();
    for id in 0..4 {
        pool.record_buffer(Tracked { id, log: Arc::clone(&log) });
    }
    pool.clear_buffers();
    assert_eq!(logged(&log), vec![0, 1, 2, 3]);
    assert_eq!(pool.buffer_count(), 0);
}

#[test]
fn the_graph_keeps_the_buffers_until_its_drop() {
    let (_dev, stream) = setup();
    let log = log();
    let pool = Arc::new(CapturePool::new());
    pool.record_buffer(Tracked { id: 0, log: Arc::clone(&log) });
    pool.record_buffer(Tracked { id: 1, log: Arc::clone(&log) });
    pool.seal();
    begin_capture_with_pool(&pool, &stream).unwrap();
    let graph = end_capture_with_pool(&stream, Arc::clone(&pool)).unwrap();
    drop(pool); // safe: the graph holds its own reference
    graph.launch().unwrap();
    assert_eq!(graph.pool_buffer_count(), 2);
    stream.synchronize().unwrap();
    assert!(logged(&log).is_empty(), "dropped while the graph lives");
    drop(graph);
    wait_deferred();
    assert_eq!(logged(&log), vec![0, 1]);
}

#[test]
fn graph_captured_without_its_arc_holds_the_c_pool() {
    // The graph's own reference is the C pool's: even where the Arc given at
    // the end is another pool, the captured pool's buffers live on.
    let (_dev, stream) = setup();
    let log = log();
    let pool = Arc::new(CapturePool::new());
    pool.record_buffer(Tracked { id: 9, log: Arc::clone(&log) });
    begin_capture_with_pool(&pool, &stream).unwrap();
    let graph = end_capture_with_pool(&stream, Arc::new(CapturePool::new())).unwrap();
    drop(pool);
    assert!(logged(&log).is_empty());
    drop(graph);
    wait_deferred();
    assert_eq!(logged(&log), vec![9]);
}

#[test]
fn clear_while_a_graph_holds_the_pool() {
    let (_dev, stream) = setup();
    let log = log();
    let pool = Arc::new(CapturePool::new());
    pool.record_buffer(Tracked { id: 0, log: Arc::clone(&log) });
    pool.record_buffer(Tracked { id: 1, log: Arc::clone(&log) });
    begin_capture_with_pool(&pool, &stream).unwrap();
    let graph = end_capture_with_pool(&stream, Arc::clone(&pool)).unwrap();
    graph.launch().unwrap();
    pool.clear_buffers();
    assert_eq!(logged(&log), vec![0, 1]);
    assert_eq!(pool.buffer_count(), 0);
    // The pool stays usable and takes new records.
    assert_eq!(pool.record_buffer(Tracked { id: 2, log: Arc::clone(&log) }), 0);
    // The graph would run on what the clear dropped: it is stale.
    let err = graph.launch().unwrap_err();
    assert_eq!(err.status, Status::StaleGraph);
    drop(graph);
    drop(pool);
    wait_deferred();
    assert_eq!(logged(&log), vec![0, 1, 2]);
}

#[test]
fn captured_graph_is_send() {
    fn send<T: Send>() {}
    fn sync<T: Send + Sync>() {}
    send::<CapturedGraph>();
    sync::<CapturePool>();
    sync::<Device>();
    send::<Stream>();
    send::<DeviceBuffer<f32>>();
}

#[test]
fn graph_launches_on_another_thread() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    begin_capture_with_pool(&pool, &stream).unwrap();
    let c = Arc::clone(&counter);
    stream
        .launch_host_recorded(&pool, move || {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
        .unwrap();
    let graph = end_capture_with_pool(&stream, Arc::clone(&pool)).unwrap();
    let graph = std::thread::spawn(move || {
        graph.launch().unwrap();
        graph.launch().unwrap();
        graph
    })
    .join()
    .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(counter.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(graph.num_replays(), 2);
}

/// The seed's usage, as written on its page, with its buffer allocation
/// (`alloc_zeros_f32(1024, &device)`) replaced by this crate's own.
#[test]
fn the_seeds_usage() -> Result<()> {
    let device = Device::open(Backend::Auto, 0)?;
    let stream = &Stream::new(&device)?;
    let buffers = CapturePool::on(&device)?;

    use std::sync::Arc;
    let pool = Arc::new(CapturePool::new());

    // Allocate every buffer the captured kernels will read or
    // write, and register each one with the pool so it stays alive
    // for the graph's lifetime.
    let mut buf_a = buffers.alloc_zeros::<f32>(1024, stream)?;
    let mut buf_b = buffers.alloc_zeros::<f32>(1024, stream)?;
    pool.record_buffer(buf_a.try_clone()?);
    pool.record_buffer(buf_b.try_clone()?);

    pool.seal();
    begin_capture_with_pool(&pool, stream)?;
    // ... launch kernels using buf_a and buf_b ...
    buf_a.memset(0x3f, stream)?;
    buf_b.copy_from(&buf_a, stream)?;
    let graph = end_capture_with_pool(stream, Arc::clone(&pool))?;
    // Dropping `pool` here is safe — the graph holds its own Arc.
    drop(pool);

    graph.launch()?;
    let b = buf_b.to_vec(stream)?;
    assert!(b.iter().all(|&v| v.to_bits() == 0x3f3f_3f3f));
    buf_a = buffers.alloc_zeros::<f32>(1, stream)?; // the first handle goes; the pool keeps the memory
    buf_b = buf_a.try_clone()?;
    assert_eq!(buf_b.len(), 1);
    graph.launch()?;
    assert_eq!(graph.num_replays(), 2);
    Ok(())
}
