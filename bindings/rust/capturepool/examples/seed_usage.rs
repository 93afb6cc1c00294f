//! The seed's usage (ferrotorch's CapturePool page), as written there, with
//! its buffer allocation (`alloc_zeros_f32(1024, &device)`) replaced by this
//! crate's own, and its "launch kernels" line by stream work on the buffers.
//! Run: cargo run --example seed_usage
use capturepool::*;

fn run() -> Result<bool> {
    let device = Device::open(Backend::Auto, 0)?;
    let stream = &Stream::new(&device)?;
    let buffers = CapturePool::on(&device)?; // where the buffers come from

    use std::sync::Arc;
    let pool = Arc::new(CapturePool::new());

    // Allocate every buffer the captured kernels will read or
    // write, and register each one with the pool so it stays alive
    // for the graph's lifetime.
    let buf_a = buffers.alloc_zeros::<f32>(1024, stream)?;
    let buf_b = buffers.alloc_zeros::<f32>(1024, stream)?;
    pool.record_buffer(buf_a.try_clone()?);
    pool.record_buffer(buf_b.try_clone()?);

    pool.seal();
    begin_capture_with_pool(&pool, stream)?;
    // ... launch kernels using buf_a and buf_b ...
    buf_a.memset(0x2a, stream)?;
    buf_b.copy_from(&buf_a, stream)?;
    let graph = end_capture_with_pool(stream, Arc::clone(&pool))?;
    // Dropping `pool` here is safe — the graph holds its own Arc.
    drop(pool);

    graph.launch()?;
    let b = buf_b.to_vec(stream)?;
    let ok = b.iter().all(|v| v.to_bits() == 0x2a2a_2a2a);
    println!(
        "captured a fill of a and a copy a -> b with a sealed pool owning both; {} launch: b {}",
        graph.num_replays(),
        if ok { "holds the pattern: OK" } else { "is wrong: FAIL" }
    );
    drop(graph); // the last reference to the pool: its two buffer handles go, in order
    wait_deferred();
    Ok(ok)
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("seed_usage: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
