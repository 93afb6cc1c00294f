//! Allocation, statistics, snapshots, graphed calls and updates.
mod common;

use std::sync::Arc;

use capturepool::*;
use common::*;

#[test]
fn buffers_round_trip_and_free_themselves() {
    let (_dev, stream) = setup();
    let pool = CapturePool::new();
    let before = pool.stats().unwrap();
    {
        let buf = pool.alloc::<i32>(1000, &stream).unwrap();
        let data: Vec<i32> = (0..1000).collect();
        buf.copy_from_host(&data, &stream).unwrap();
        assert_eq!(buf.to_vec(&stream).unwrap(), data);
        let zeros = pool.alloc_zeros::<f64>(10, &stream).unwrap();
        assert_eq!(zeros.to_vec(&stream).unwrap(), vec![0.0; 10]);
        let st = pool.stats().unwrap();
        assert_eq!(st.allocated_bytes, before.allocated_bytes + 4000 + 80);
        assert_eq!(st.alloc_count, before.alloc_count + 2);
    }
    stream.synchronize().unwrap();
    let st = pool.stats().unwrap();
    assert_eq!(st.allocated_bytes, before.allocated_bytes);
    assert_eq!(st.free_count, 2);
    pool.trim().unwrap();
}

#[test]
fn a_buffer_holds_its_pool() {
    let (_dev, stream) = setup();
    let pool = CapturePool::new();
    let buf = pool.alloc::<u8>(100, &stream).unwrap();
    drop(pool);
    buf.memset(9, &stream).unwrap();
    assert_eq!(buf.to_vec(&stream).unwrap(), vec![9u8; 100]);
}

#[test]
fn captured_step_replays_like_eager() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let x = pool.alloc::<f32>(256, &stream).unwrap();
    let y = pool.alloc::<f32>(256, &stream).unwrap();
    let step = |s: &Stream| -> Result<()> {
        let t = pool.alloc::<f32>(256, s)?;
        t.memset(0x40, s)?;
        y.copy_from(&t, s)?;
        x.copy_from(&y, s)
    };
    x.copy_from_host(&[1.0; 256], &stream).unwrap();
    step(&stream).unwrap();
    let eager = x.to_vec(&stream).unwrap();
    x.copy_from_host(&[1.0; 256], &stream).unwrap();
    let graph = capture(&stream, Some(&pool), CaptureMode::Global, step).unwrap();
    assert_eq!(x.to_vec(&stream).unwrap(), vec![1.0; 256], "a capture runs nothing");
    graph.upload().unwrap();
    graph.launch().unwrap();
    assert_eq!(x.to_vec(&stream).unwrap(), eager);
    let st = graph.stats().unwrap();
    assert!(st.pool_count >= 1);
    assert!(pool.stats().unwrap().graph_count >= 1);
}

#[test]
fn graphed_calls_and_updates() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let out = pool.alloc::<u8>(64, &stream).unwrap();
    let mut runs = 0;
    let mut graph = graphed_call(&stream, &pool, CaptureMode::Global, 2, |s| {
        runs += 1;
        out.memset(1, s)
    })
    .unwrap();
    assert_eq!(runs, 3, "two eager runs and one capture");
    assert_eq!(out.to_vec(&stream).unwrap(), vec![1u8; 64]);
    out.memset(0, &stream).unwrap();
    graph.launch().unwrap();
    assert_eq!(out.to_vec(&stream).unwrap(), vec![1u8; 64]);
    graph.update(&stream, |s| out.memset(2, s)).unwrap();
    graph.launch().unwrap();
    assert_eq!(out.to_vec(&stream).unwrap(), vec![2u8; 64]);
    assert_eq!(graph.num_replays(), 2);
    let e = graph
        .update(&stream, |_| Err(Error { status: Status::Backend, message: "no".into() }))
        .unwrap_err();
    assert_eq!(e.status, Status::Backend);
    graph.launch().unwrap();
    assert_eq!(out.to_vec(&stream).unwrap(), vec![2u8; 64], "a failed update keeps the old work");
}

#[test]
fn snapshot_and_dot_files() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let _buf = pool.alloc::<f32>(1024, &stream).unwrap();
    let graph = capture(&stream, Some(&pool), CaptureMode::Global, |s| {
        pool.alloc::<f32>(512, s)?.memset(0, s)
    })
    .unwrap();
    let dir = std::env::temp_dir().join(format!("capturepool-rust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let snap = dir.join("snapshot.json");
    pool.write_snapshot(&snap).unwrap();
    let text = std::fs::read_to_string(&snap).unwrap();
    assert!(text.contains("\"stats\"") && text.contains("\"segments\""));
    let dot = dir.join("graph.dot");
    graph.dump_dot(&dot).unwrap();
    assert!(std::fs::read_to_string(&dot).unwrap().contains("digraph"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn version_matches_the_header() {
    assert_eq!(version(), "0.2.0");
}
