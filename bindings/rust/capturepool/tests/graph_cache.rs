//! GraphCache: hits, misses and evictions counted; both bounds hold after
//! each launch with the kept graphs' outputs intact; on_evict once per
//! graph that leaves, where its output is freed; panics of the body and of
//! on_evict resumed after the C call with nothing kept that should not be;
//! the prediction of an empty pool's graph memory.
mod common;

use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use capturepool::*;
use common::*;

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

fn pattern_of(key: u64) -> u8 {
    (0x11 + key * 7) as u8
}

/// What a test's graphs share with its on_evict: each key's output (while
/// its graph is kept) and how often each key left.
#[derive(Default)]
struct Outputs {
    buffers: HashMap<u64, DeviceBuffer<u8>>,
    evicted: HashMap<u64, u32>,
    panic_on_evict: bool,
}

type Shared = Arc<Mutex<Outputs>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Outputs> {
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A cache whose on_evict counts the key and frees its output (the
/// buffer's drop, stream ordered).
fn cache_with_outputs(pool: &Arc<CapturePool>, max_bytes: u64, max_graphs: u32) -> (GraphCache, Shared) {
    let shared: Shared = Arc::default();
    let seen = Arc::clone(&shared);
    let cache = GraphCache::with_on_evict(pool, GraphCacheOptions { max_bytes, max_graphs }, move |key, graph| {
        assert!(graph.id() > 0);
        let mut s = lock(&seen);
        let expected = u64::from(s.buffers.contains_key(&key));
        assert_eq!(graph.stats().unwrap().live_outputs, expected, "key {key}: the graph's output is live");
        *s.evicted.entry(key).or_default() += 1;
        s.buffers.remove(&key);
        let panics = s.panic_on_evict;
        drop(s);
        if panics {
            panic!("on_evict {key}");
        }
    })
    .unwrap();
    (cache, shared)
}

/// The body of a key's graph: allocates its output, then scratch that it
/// fills and frees, and writes the key's byte into the output.
fn body(
    pool: &Arc<CapturePool>,
    shared: &Shared,
    key: u64,
    out_bytes: usize,
    scratch_bytes: usize,
) -> impl FnOnce(&Stream) -> Result<()> {
    let pool = Arc::clone(pool);
    let shared = Arc::clone(shared);
    move |s| {
        let out = pool.alloc::<u8>(out_bytes, s)?;
        let scratch = pool.alloc::<u8>(scratch_bytes, s)?;
        scratch.memset(0xEE, s)?;
        out.memset(pattern_of(key), s)?;
        drop(scratch);
        lock(&shared).buffers.insert(key, out);
        Ok(())
    }
}

fn small(pool: &Arc<CapturePool>, shared: &Shared, key: u64) -> impl FnOnce(&Stream) -> Result<()> {
    body(pool, shared, key, 64 * KIB, 256 * KIB)
}

/// After a synchronize: a key is kept exactly where its output is, and
/// every output holds its key's byte.
fn check_kept(cache: &GraphCache, shared: &Shared, stream: &Stream, keys: impl IntoIterator<Item = u64>) {
    stream.synchronize().unwrap();
    let s = lock(shared);
    for key in keys {
        let kept = cache.get(key).unwrap().is_some();
        assert_eq!(kept, s.buffers.contains_key(&key), "key {key}: kept and its output");
        if let Some(out) = s.buffers.get(&key) {
            let bytes = out.to_vec(stream).unwrap();
            assert!(bytes.iter().all(|&b| b == pattern_of(key)), "key {key}: its output lost its bytes");
        }
    }
}

fn output_bytes(shared: &Shared) -> u64 {
    lock(shared).buffers.values().map(|b| b.len() as u64).sum()
}

fn evicted(shared: &Shared) -> HashMap<u64, u32> {
    lock(shared).evicted.clone()
}

#[test]
fn a_cache_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<GraphCache>();
}

#[test]
fn hits_misses_and_evictions_are_counted() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let (cache, shared) = cache_with_outputs(&pool, 0, 3);
    assert!(!cache.launch(1, &stream, small(&pool, &shared, 1)).unwrap());
    assert!(!cache.launch(2, &stream, small(&pool, &shared, 2)).unwrap());
    assert!(!cache.launch_with_mode(3, &stream, CaptureMode::ThreadLocal, small(&pool, &shared, 3)).unwrap());
    assert!(cache.launch(1, &stream, small(&pool, &shared, 1)).unwrap());
    assert!(!cache.launch(4, &stream, small(&pool, &shared, 4)).unwrap()); // evicts 2, the least recent
    assert_eq!(evicted(&shared), HashMap::from([(2, 1)]));
    let st = cache.stats().unwrap();
    assert_eq!((st.graphs, st.hits, st.misses, st.evictions), (3, 1, 4, 1));
    check_kept(&cache, &shared, &stream, 1..=5);
    assert_eq!(pool.stats().unwrap().allocated_bytes, output_bytes(&shared), "2's output was freed");

    // get is no launch: 3 stays the least recent, nothing is counted.
    for _ in 0..3 {
        assert_eq!(cache.get(3).unwrap().expect("3 is kept").num_replays(), 1);
    }
    assert!(cache.get(42).unwrap().is_none());
    assert!(!cache.launch(5, &stream, small(&pool, &shared, 5)).unwrap());
    assert!(cache.get(3).unwrap().is_none());
    let st = cache.stats().unwrap();
    assert_eq!((st.graphs, st.hits, st.misses, st.evictions), (3, 1, 5, 2));
    assert_eq!(st.graph_bytes, pool.stats().unwrap().graph_reserved_bytes);

    // evict: on_evict, then the graph leaves; an absent key is no error.
    cache.evict(4).unwrap();
    cache.evict(4).unwrap();
    cache.evict(40).unwrap();
    assert_eq!(evicted(&shared)[&4], 1);
    assert_eq!((cache.stats().unwrap().graphs, cache.stats().unwrap().evictions), (2, 3));
    check_kept(&cache, &shared, &stream, 1..=5);
    assert_eq!(pool.stats().unwrap().allocated_bytes, output_bytes(&shared));

    // A graph of the cache launches on a stream it is given.
    let g = cache.get(1).unwrap().unwrap();
    assert_eq!(g.launch().unwrap_err().status, Status::InvalidArgument);
    g.launch_on(&stream).unwrap();
    assert!(Arc::ptr_eq(g.pool().unwrap(), &pool));
    drop(g);

    // The drop: on_evict for each graph kept (1 and 5).
    drop(cache);
    assert_eq!(evicted(&shared), (1..=5).map(|k| (k, 1)).collect());
    assert!(lock(&shared).buffers.is_empty());
    stream.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().allocated_bytes, 0);
}

#[test]
fn a_cache_without_on_evict_and_a_capturing_stream() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let cache = GraphCache::new(&pool, GraphCacheOptions { max_bytes: 0, max_graphs: 1 }).unwrap();
    let scratch_only = |s: &Stream| pool.alloc::<u32>(1024, s)?.memset(1, s);
    assert!(!cache.launch(7, &stream, scratch_only).unwrap());
    assert!(cache.launch(7, &stream, scratch_only).unwrap());
    assert!(!cache.launch(8, &stream, scratch_only).unwrap());
    assert_eq!(cache.stats().unwrap().evictions, 1);
    assert!(cache.get(7).unwrap().is_none());
    let guard = GraphCaptureGuard::with_pool(&stream, &pool).unwrap();
    assert_eq!(cache.launch(8, &stream, scratch_only).unwrap_err().status, Status::InvalidArgument);
    drop(guard);
    // An Err of the body is returned as the body made it.
    let e = cache
        .launch(9, &stream, |_| Err(Error { status: Status::Backend, message: "from the body".into() }))
        .unwrap_err();
    assert_eq!((e.status, e.message.as_str()), (Status::Backend, "from the body"));
    assert!(cache.get(9).unwrap().is_none());
    assert!(format!("{cache:?}").contains("graphs: 1"));
}

/// Both bounds after each launch (and a synchronize, so that the launches
/// before the next eviction are over), with the kept outputs right: the
/// first pass is bounded by max_graphs as much as by bytes, the second by
/// bytes alone.
#[test]
fn bounds_hold_after_each_launch() {
    for (pass, (budget, max_graphs)) in [(12 * MIB as u64, 4u32), (7 * MIB as u64, 0)].into_iter().enumerate() {
        let (_dev, stream) = setup();
        let pool = Arc::new(CapturePool::new());
        let (cache, shared) = cache_with_outputs(&pool, budget, max_graphs);
        let mut rng = 12345u64 + pass as u64;
        let (mut hits, mut fewest, mut alone) = (0u64, u64::MAX, 0);
        let launches = 80;
        for i in 0..launches {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = (rng >> 33) % 12;
            let out = (key as usize % 3 + 1) * 128 * KIB;
            let scratch = (key as usize % 4 + 1) * MIB - key as usize * 4096;
            hits += u64::from(cache.launch(key, &stream, body(&pool, &shared, key, out, scratch)).unwrap());
            stream.synchronize().unwrap();
            let st = cache.stats().unwrap();
            if max_graphs > 0 {
                assert!(st.graphs <= u64::from(max_graphs), "launch {i}: {} graphs", st.graphs);
            }
            // A graph that alone needs more than the budget is kept alone
            // (an output that straddles a page of the packed outputs does).
            assert!(st.graph_bytes <= budget || st.graphs == 1, "launch {i}: {st:?}");
            alone += usize::from(st.graph_bytes > budget);
            assert_eq!(st.graph_bytes, pool.stats().unwrap().graph_reserved_bytes);
            assert_eq!(st.graphs, lock(&shared).buffers.len() as u64);
            if i > 10 {
                fewest = fewest.min(st.graphs);
            }
            check_kept(&cache, &shared, &stream, 0..12);
            assert_eq!(pool.stats().unwrap().allocated_bytes, output_bytes(&shared));
        }
        let st = cache.stats().unwrap();
        assert_eq!((st.hits, st.hits + st.misses), (hits, launches));
        assert_eq!(st.evictions, evicted(&shared).values().map(|&n| u64::from(n)).sum::<u64>());
        assert!(st.evictions > 0 && st.hits > 0);
        if max_graphs == 0 {
            assert!(fewest < 3, "the bytes alone evicted");
        }
        println!(
            "{} MiB and {max_graphs} graphs: {} hits, {} misses, {} evictions, {alone} launches with one graph over the budget",
            budget / MIB as u64,
            st.hits,
            st.misses,
            st.evictions
        );
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => payload.downcast::<&str>().map(|s| s.to_string()).unwrap_or_default(),
    }
}

#[test]
fn a_panicking_body_keeps_nothing_and_resumes() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let (cache, shared) = cache_with_outputs(&pool, 0, 1);
    cache.launch(1, &stream, small(&pool, &shared, 1)).unwrap();
    let before = cache.stats().unwrap();
    let r = panic::catch_unwind(AssertUnwindSafe(|| {
        cache.launch(2, &stream, |s| {
            pool.alloc::<u8>(4096, s)?.memset(1, s)?;
            panic!("from the body");
        })
    }));
    assert_eq!(panic_text(r.expect_err("the body's panic resumed")), "from the body");
    let after = cache.stats().unwrap();
    assert_eq!(
        (after.graphs, after.hits, after.misses, after.evictions),
        (before.graphs, before.hits, before.misses, 0)
    );
    assert!(cache.get(2).unwrap().is_none() && cache.get(1).unwrap().is_some());
    assert!(evicted(&shared).is_empty());
    assert_eq!(stream.capture_state().unwrap(), CaptureState::None);
    // The cache goes on.
    assert!(!cache.launch(2, &stream, small(&pool, &shared, 2)).unwrap());
    check_kept(&cache, &shared, &stream, 1..=2);
}

#[test]
fn a_panicking_on_evict_resumes_after_the_call_completed() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let (cache, shared) = cache_with_outputs(&pool, 0, 1);
    cache.launch(1, &stream, small(&pool, &shared, 1)).unwrap();
    lock(&shared).panic_on_evict = true;
    // The launch completes (2 kept and launched, 1 gone), then the panic.
    let r = panic::catch_unwind(AssertUnwindSafe(|| cache.launch(2, &stream, small(&pool, &shared, 2))));
    assert_eq!(panic_text(r.expect_err("on_evict's panic resumed")), "on_evict 1");
    let st = cache.stats().unwrap();
    assert_eq!((st.graphs, st.misses, st.evictions), (1, 2, 1));
    assert!(cache.get(1).unwrap().is_none());
    assert_eq!(cache.get(2).unwrap().unwrap().num_replays(), 1);
    check_kept(&cache, &shared, &stream, 1..=2);
    assert!(cache.launch(2, &stream, small(&pool, &shared, 2)).unwrap()); // a hit evicts nothing
    let r = panic::catch_unwind(AssertUnwindSafe(|| cache.evict(2)));
    assert_eq!(panic_text(r.expect_err("on_evict's panic resumed")), "on_evict 2");
    assert_eq!(cache.stats().unwrap().graphs, 0);

    // Several panics in one call (the drop): every graph leaves, the first
    // panic is resumed.
    lock(&shared).panic_on_evict = false;
    let (many, shared) = cache_with_outputs(&pool, 0, 0);
    for key in 3..6 {
        many.launch(key, &stream, small(&pool, &shared, key)).unwrap();
    }
    lock(&shared).panic_on_evict = true;
    let r = panic::catch_unwind(AssertUnwindSafe(move || drop(many)));
    assert!(panic_text(r.expect_err("on_evict's panic resumed")).starts_with("on_evict "));
    assert_eq!(evicted(&shared), (3..6).map(|k| (k, 1)).collect());
    assert!(lock(&shared).buffers.is_empty());
    stream.synchronize().unwrap();
}

#[test]
fn on_evict_may_use_another_cache_not_its_own() {
    let (_dev, stream) = setup();
    let pool = Arc::new(CapturePool::new());
    let (inner, inner_shared) = cache_with_outputs(&pool, 0, 0);
    inner.launch(10, &stream, small(&pool, &inner_shared, 10)).unwrap();
    lock(&inner_shared).panic_on_evict = true;
    let inner = Arc::new(inner);

    // The outer on_evict evicts from the inner cache (whose on_evict
    // panics: the panic crosses both C calls, each after it returned) and
    // tries its own cache (refused).
    let outer_slot: Arc<OnceLock<Weak<GraphCache>>> = Arc::default();
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let (inner2, slot2, refusals2) = (Arc::clone(&inner), Arc::clone(&outer_slot), Arc::clone(&refusals));
    let outer = GraphCache::with_on_evict(&pool, GraphCacheOptions { max_bytes: 0, max_graphs: 1 }, move |key, _| {
        if let Some(outer) = slot2.get().and_then(Weak::upgrade) {
            refusals2.lock().unwrap().push(outer.evict(key).unwrap_err().status);
        }
        inner2.evict(10).unwrap();
    })
    .map(Arc::new)
    .unwrap();
    outer_slot.set(Arc::downgrade(&outer)).unwrap();
    let scratch_only = |s: &Stream| pool.alloc::<u32>(1024, s)?.memset(1, s);
    outer.launch(11, &stream, scratch_only).unwrap();
    let r = panic::catch_unwind(AssertUnwindSafe(|| outer.launch(12, &stream, scratch_only)));
    assert_eq!(panic_text(r.expect_err("the inner panic resumed")), "on_evict 10");
    assert_eq!(*refusals.lock().unwrap(), vec![Status::InvalidArgument]);
    assert_eq!(evicted(&inner_shared)[&10], 1);
    assert!(outer.get(12).unwrap().is_some() && outer.get(11).unwrap().is_none());
    // Still usable from outside its on_evict.
    outer.evict(12).unwrap();
    stream.synchronize().unwrap();
}

#[test]
fn prediction_on_an_empty_pool_is_within_a_page() {
    let (_dev, stream) = setup();
    let sizes = [(3 * MIB + 4096, 256 * KIB), (5 * MIB, MIB), (MIB, 64 * KIB), (9 * MIB - 512, 3 * MIB)];
    for (key, &(scratch, out)) in sizes.iter().enumerate() {
        let key = key as u64;
        let pool = Arc::new(CapturePool::new()); // empty
        let (cache, shared) = cache_with_outputs(&pool, 0, 0);
        let predicted = cache.predict_bytes(scratch as u64, out as u64).unwrap();
        assert!(predicted >= out as u64);
        assert!(!cache.launch(key, &stream, body(&pool, &shared, key, out, scratch)).unwrap());
        stream.synchronize().unwrap();
        let got = cache.stats().unwrap().graph_bytes;
        assert!(
            got.abs_diff(predicted) <= 2 * MIB as u64,
            "scratch {scratch}, output {out}: predicted {predicted}, measured {got}"
        );
        assert_eq!(cache.stats().unwrap().graph_bytes, got, "the prediction changes nothing");
    }
}

#[test]
fn threads_share_a_cache() {
    let dev = device();
    let pool = Arc::new(CapturePool::on(&dev).unwrap());
    let evicted: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let seen = Arc::clone(&evicted);
    let cache = Arc::new(
        GraphCache::with_on_evict(&pool, GraphCacheOptions { max_bytes: 0, max_graphs: 3 }, move |key, _| {
            *seen.lock().unwrap().entry(key).or_default() += 1;
        })
        .unwrap(),
    );
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let (cache, pool, dev) = (Arc::clone(&cache), Arc::clone(&pool), dev.clone());
            std::thread::spawn(move || {
                let stream = Stream::new(&dev).unwrap();
                // Thread-local: the two threads capture at the same time, and
                // on CUDA a global-mode capture refuses the other thread's
                // instantiate (cudaErrorStreamCaptureUnsupported).
                for i in 0..20u64 {
                    let key = t + 2 * (i % 4); // each thread's own keys
                    cache
                        .launch_with_mode(key, &stream, CaptureMode::ThreadLocal, |s| {
                            pool.alloc::<u32>(1024, s)?.memset(1, s)
                        })
                        .unwrap();
                }
                stream.synchronize().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = cache.stats().unwrap();
    assert_eq!(st.hits + st.misses, 40);
    assert!(st.graphs <= 3);
    assert_eq!(st.evictions, evicted.lock().unwrap().values().map(|&n| u64::from(n)).sum::<u64>());
    drop(cache);
    assert_eq!(evicted.lock().unwrap().values().map(|&n| u64::from(n)).sum::<u64>(), st.evictions + st.graphs);
}
