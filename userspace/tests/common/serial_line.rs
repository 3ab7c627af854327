//! A serial line in front of the QEMU device, as a test sees it: a unix
//! socket that clients (cfctl, a `DeviceClient`) connect to one after
//! another, relayed to one connection to the device's UART that stays open
//! the whole time. Like a real tty, bytes the device sends while no client
//! is connected (or that a client never read) wait for the next client.
//!
//! With [`Faults`], the line is lossy in both directions, seeded: at each
//! byte, with the given probability, one of five faults happens (the byte
//! is dropped, a bit of it flips, it is sent twice, the rest of its frame
//! is cut off up to the next delimiter, or a burst of random bytes comes
//! first). The faults hit the same byte positions for the same seed and the
//! same byte stream; which bytes a run sends can still depend on timing
//! (a resend after silence).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rand::{rngs::StdRng, Rng, SeedableRng};

/// How often a relay thread wakes up to check for work and for the end.
const POLL: Duration = Duration::from_millis(2);

/// A lossy line: the probability of a fault at each byte, and the seed.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub per_byte: f64,
    pub seed: u64,
}

/// Faults injected so far, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub dropped: u64,
    pub flipped: u64,
    pub duplicated: u64,
    pub truncated: u64,
    pub noise_bursts: u64,
}

impl FaultCounts {
    pub fn total(&self) -> u64 {
        self.dropped + self.flipped + self.duplicated + self.truncated + self.noise_bursts
    }
}

/// One direction's fault injector.
struct Injector {
    faults: Option<Faults>,
    rng: StdRng,
    /// Dropping bytes up to the next delimiter (a truncated frame).
    cutting: bool,
    counts: FaultCounts,
}

impl Injector {
    fn new(faults: Option<Faults>, stream: u64) -> Self {
        let seed = faults.map_or(0, |faults| faults.seed) ^ stream;
        Self {
            faults,
            rng: StdRng::seed_from_u64(seed),
            cutting: false,
            counts: FaultCounts::default(),
        }
    }

    /// What the line delivers for `bytes`.
    fn pass(&mut self, bytes: &[u8]) -> Vec<u8> {
        let Some(faults) = self.faults else {
            return bytes.to_vec();
        };
        let mut out = Vec::with_capacity(bytes.len() + 16);
        for &byte in bytes {
            if self.cutting {
                if byte == 0 {
                    self.cutting = false;
                    out.push(byte);
                }
                continue;
            }
            if !self.rng.random_bool(faults.per_byte) {
                out.push(byte);
                continue;
            }
            match self.rng.random_range(0..5) {
                0 => self.counts.dropped += 1,
                1 => {
                    self.counts.flipped += 1;
                    out.push(byte ^ (1 << self.rng.random_range(0..8)));
                }
                2 => {
                    self.counts.duplicated += 1;
                    out.extend([byte, byte]);
                }
                3 => {
                    self.counts.truncated += 1;
                    self.cutting = byte != 0;
                    if byte == 0 {
                        out.push(byte);
                    }
                }
                _ => {
                    self.counts.noise_bursts += 1;
                    let len = self.rng.random_range(1..=16);
                    out.extend((0..len).map(|_| self.rng.random::<u8>()));
                    out.push(byte);
                }
            }
        }
        out
    }
}

/// The relay: its socket path, its threads, and what it injected.
pub struct SerialLine {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    to_device: Arc<Mutex<Injector>>,
    to_host: Arc<Mutex<Injector>>,
    waiting: Arc<Mutex<VecDeque<u8>>>,
}

impl SerialLine {
    /// Relays clients of a new unix socket in `dir` to `device` (a
    /// connection to the device's UART), through `faults` if given.
    pub fn start(dir: &Path, device: UnixStream, faults: Option<Faults>) -> Self {
        let path = dir.join("line.sock");
        let listener = UnixListener::bind(&path).expect("binding the line's socket");
        listener.set_nonblocking(true).unwrap();
        device.set_read_timeout(Some(POLL)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let to_device = Arc::new(Mutex::new(Injector::new(faults, 1)));
        let to_host = Arc::new(Mutex::new(Injector::new(faults, 2)));
        // The device's output waits here for a client, as in a tty's buffer.
        let waiting = Arc::new(Mutex::new(VecDeque::<u8>::new()));

        let reader = {
            let (stop, to_host, waiting) = (stop.clone(), to_host.clone(), waiting.clone());
            let mut device = device.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 1024];
                while !stop.load(Ordering::Relaxed) {
                    match device.read(&mut chunk) {
                        Ok(0) => return,
                        Ok(count) => {
                            let delivered = to_host.lock().unwrap().pass(&chunk[..count]);
                            waiting.lock().unwrap().extend(delivered);
                        }
                        Err(error) if is_timeout(&error) => {}
                        Err(_) => return,
                    }
                }
            })
        };
        let relay = {
            let (stop, to_device, waiting) = (stop.clone(), to_device.clone(), waiting.clone());
            let mut device = device;
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            serve_client(client, &mut device, &to_device, &waiting, &stop)
                        }
                        Err(error) if error.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(POLL)
                        }
                        Err(_) => return,
                    }
                }
            })
        };
        Self {
            path,
            stop,
            threads: vec![reader, relay],
            to_device,
            to_host,
            waiting,
        }
    }

    /// Frames the device sent that wait for a client (delimiters on the
    /// line).
    pub fn waiting_frames(&self) -> usize {
        self.waiting
            .lock()
            .unwrap()
            .iter()
            .filter(|&&byte| byte == 0)
            .count()
    }

    /// The line's socket, as `cfctl --device` takes it.
    pub fn path(&self) -> &str {
        self.path.to_str().expect("a UTF-8 path")
    }

    /// Faults injected so far: (host to device, device to host).
    pub fn faults(&self) -> (FaultCounts, FaultCounts) {
        (
            self.to_device.lock().unwrap().counts,
            self.to_host.lock().unwrap().counts,
        )
    }
}

/// Relays one client until it disconnects.
fn serve_client(
    mut client: UnixStream,
    device: &mut UnixStream,
    to_device: &Mutex<Injector>,
    waiting: &Mutex<VecDeque<u8>>,
    stop: &AtomicBool,
) {
    client.set_nonblocking(false).unwrap();
    client.set_read_timeout(Some(POLL)).unwrap();
    let mut chunk = [0u8; 1024];
    while !stop.load(Ordering::Relaxed) {
        match client.read(&mut chunk) {
            Ok(0) => return,
            Ok(count) => {
                let delivered = to_device.lock().unwrap().pass(&chunk[..count]);
                if device.write_all(&delivered).is_err() {
                    return;
                }
            }
            Err(error) if is_timeout(&error) => {}
            Err(_) => return,
        }
        let output: Vec<u8> = waiting.lock().unwrap().drain(..).collect();
        if !output.is_empty() && client.write_all(&output).is_err() {
            // The client is gone; what it did not take stays on the line.
            let mut waiting = waiting.lock().unwrap();
            for &byte in output.iter().rev() {
                waiting.push_front(byte);
            }
            return;
        }
    }
}

fn is_timeout(error: &std::io::Error) -> bool {
    matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

impl Drop for SerialLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
