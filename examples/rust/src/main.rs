//! examples/demo.c in Rust, smaller: a "step" of dependent stream work whose
//! intermediates are allocated from a capture pool inside the step, run
//! eagerly K times, captured once, replayed K times from the same starting
//! state, and checked to give bitwise the same state.
//!
//! The step, on a state x of n floats, is host functions that stand in for
//! kernels: they read and write pool memory through raw pointers, so the
//! example opens the host backend, where pool memory is host memory. On
//! CUDA pool memory is device memory, which a host function cannot touch: a
//! program launches kernels on `stream.native()` instead, as examples/demo.c
//! does on the GPU (cargo builds no kernels here). The step:
//!
//!   t1 = x * 1.5 + 0.25       (t1 allocated in the step)
//!   t2 = relu(t1 - 1)         (t2 allocated, t1 freed)
//!   x  = 0.5 * x + 0.5 * tanh(t2)   (t2 freed)
//!
//! Usage: cargo run --release -p capturepool-demo [-- --n ELEMENTS --steps K]
//! Exit status 0 when the replays match the eager run.
use std::sync::Arc;
use std::time::Instant;

use capturepool::*;

/// A host function over pool addresses (host memory: the example runs on
/// the host backend).
fn map2(stream: &Stream, pool: &CapturePool, out: usize, a: usize, b: usize, n: usize, f: fn(f32, f32) -> f32) -> Result<()> {
    let op = move || {
        // The addresses are pool memory that the stream's order keeps alive
        // while this runs; on the host backend it is plain host memory.
        let (out, a, b) = (out as *mut f32, a as *const f32, b as *const f32);
        for i in 0..n {
            let v = f(raw_memory::load(a, i), raw_memory::load(b, i));
            raw_memory::store(out, i, v);
        }
    };
    if stream.capture_state()? == CaptureState::None {
        stream.launch_host(op)
    } else {
        stream.launch_host_recorded(pool, op)
    }
}

/// Loads and stores at raw addresses, as a kernel does; kept apart so that
/// the rest of the example is plain safe Rust over the crate's API.
mod raw_memory {
    pub fn load(p: *const f32, i: usize) -> f32 {
        // SAFETY: p points to n floats of a live pool block of the host
        // backend (host memory; main opens no other) and i < n (map2).
        unsafe { p.add(i).read() }
    }
    pub fn store(p: *mut f32, i: usize, v: f32) {
        // SAFETY: as load; the stream runs one op at a time.
        unsafe { p.add(i).write(v) }
    }
}

fn step(stream: &Stream, pool: &CapturePool, x: &DeviceBuffer<f32>) -> Result<()> {
    let n = x.len();
    let t1 = pool.alloc::<f32>(n, stream)?;
    map2(stream, pool, t1.device_ptr(), x.device_ptr(), x.device_ptr(), n, |x, _| x * 1.5 + 0.25)?;
    let t2 = pool.alloc::<f32>(n, stream)?;
    map2(stream, pool, t2.device_ptr(), t1.device_ptr(), t1.device_ptr(), n, |t, _| (t - 1.0).max(0.0))?;
    drop(t1);
    map2(stream, pool, x.device_ptr(), x.device_ptr(), t2.device_ptr(), n, |x, t| 0.5 * x + 0.5 * t.tanh())?;
    Ok(())
}

fn main() -> Result<()> {
    let mut n = 4096usize;
    let mut steps = 50usize;
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).and_then(|v| v.parse().ok());
        match (args[i].as_str(), value) {
            ("--n", Some(v)) => n = v,
            ("--steps", Some(v)) => steps = v,
            _ => {
                eprintln!("usage: capturepool-demo [--n ELEMENTS] [--steps K]");
                std::process::exit(2);
            }
        }
        i += 2;
    }

    // The host backend whatever the machine: the step's host functions
    // dereference pool memory, which on CUDA is device memory (a host
    // function touching it there faults).
    let device = Device::open(Backend::Host, 0)?;
    let stream = Stream::new(&device)?;
    let pool = Arc::new(CapturePool::on(&device)?);
    println!("capturepool {} ({:?} backend), n = {n} floats, {steps} steps", version(), device.backend());
    println!(
        "host backend on purpose: host functions stand in for kernels here; on CUDA a program launches \
         kernels on stream.native() (examples/demo.c runs its step on the GPU)"
    );

    let x0: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 250.0 - 2.0).collect();
    let x = pool.alloc::<f32>(n, &stream)?;

    x.copy_from_host(&x0, &stream)?;
    let t = Instant::now();
    for _ in 0..steps {
        step(&stream, &pool, &x)?;
    }
    stream.synchronize()?;
    let eager_s = t.elapsed().as_secs_f64();
    let eager = x.to_vec(&stream)?;

    x.copy_from_host(&x0, &stream)?;
    let graph = capture(&stream, Some(&pool), CaptureMode::Global, |s| step(s, &pool, &x))?;
    let t = Instant::now();
    for _ in 0..steps {
        graph.launch()?;
    }
    stream.synchronize()?;
    let graph_s = t.elapsed().as_secs_f64();
    let replayed = x.to_vec(&stream)?;

    let st = pool.stats()?;
    println!(
        "eager {:.1} us/step, graph {:.1} us/step; pool: {} B reserved, {} B for graphs, {} allocations",
        eager_s * 1e6 / steps as f64,
        graph_s * 1e6 / steps as f64,
        st.reserved_bytes,
        st.graph_reserved_bytes,
        st.alloc_count
    );
    let same = eager.iter().zip(&replayed).all(|(a, b)| a.to_bits() == b.to_bits());
    println!("{} replays: {}", graph.num_replays(), if same { "bitwise equal to eager: OK" } else { "DIFFER: FAIL" });
    // The graph's reference to the pool may go on the library's thread:
    // wait for that teardown before the process ends.
    drop((graph, x, pool));
    wait_deferred();
    if !same {
        return Err(Error { status: Status::Backend, message: "the replays differ from the eager run".into() });
    }
    Ok(())
}
