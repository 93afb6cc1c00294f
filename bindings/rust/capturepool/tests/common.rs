// Shared by the test files (each includes it with `mod common;`).
#![allow(dead_code)]
use std::sync::{Arc, Mutex};

use capturepool::*;

pub fn device() -> Device {
    Device::open(Backend::Auto, 0).expect("a device (the host backend where there is no GPU)")
}

pub fn setup() -> (Device, Stream) {
    let dev = device();
    let stream = Stream::new(&dev).expect("a stream");
    (dev, stream)
}

/// A buffer stand-in that logs its id when dropped.
pub struct Tracked {
    pub id: usize,
    pub log: Arc<Mutex<Vec<usize>>>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.log.lock().unwrap().push(self.id);
    }
}

pub fn log() -> Arc<Mutex<Vec<usize>>> {
    Arc::new(Mutex::new(Vec::new()))
}

pub fn logged(log: &Arc<Mutex<Vec<usize>>>) -> Vec<usize> {
    log.lock().unwrap().clone()
}
