//! The cost of launching through the Rust bindings (`CapturedGraph::launch`
//! and `launch_on`) next to the C call (`cpool_graph_launch` through
//! capturepool-sys) on the same graph, in alternating batches in one run;
//! prints each median per launch and the ratios. The graph is one small
//! fill, so the figures are the calls' own cost.
//! Usage: cargo run --release -p capturepool-bench -- [--smoke]
use std::time::Instant;

use capturepool::*;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (batch, repeats) = if smoke { (10, 3) } else { (2000, 15) };
    let device = Device::open(Backend::Auto, 0)?;
    let stream = Stream::new(&device)?;
    let pool = std::sync::Arc::new(CapturePool::on(&device)?);
    let buf = pool.alloc::<u8>(256, &stream)?;
    let graph = capture(&stream, Some(&pool), CaptureMode::Global, |s| buf.memset(1, s))?;
    graph.launch()?;
    stream.synchronize()?;

    let (mut launch, mut launch_on, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..repeats {
        for k in 0..3 {
            let which = (k + r) % 3; // the order rotates every repeat
            let t0 = Instant::now();
            for _ in 0..batch {
                match which {
                    0 => graph.launch()?,
                    1 => graph.launch_on(&stream)?,
                    _ => {
                        // SAFETY: both handles are live for the whole loop.
                        let st = unsafe { sys::cpool_graph_launch(graph.as_raw(), stream.as_raw()) };
                        assert_eq!(st, sys::CPOOL_OK);
                    }
                }
            }
            stream.synchronize()?;
            let us = t0.elapsed().as_secs_f64() * 1e6 / batch as f64;
            [&mut launch, &mut launch_on, &mut raw][which].push(us);
        }
    }
    let (a, b, c) = (median(launch), median(launch_on), median(raw));
    println!(
        "Rust launch: launch() {a:.3} us, launch_on() {b:.3} us, C {c:.3} us per launch (incl. the work); \
         ratios {:.3} and {:.3} ({:?} backend{})",
        a / c,
        b / c,
        device.backend(),
        if smoke { ", smoke run" } else { "" }
    );
    Ok(())
}
