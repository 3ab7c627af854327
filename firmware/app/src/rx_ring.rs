//! Bytes received by an interrupt handler, waiting for the main loop: a
//! fixed-capacity FIFO ([`heapless::Deque`]) shared through a critical
//! section, so that a burst of frames that arrives while the device is busy
//! answering (or writing flash) is queued, not lost.
//!
//! Invariants: bytes leave in the order they came; when the ring is full a
//! new byte is dropped (never an older one) and counted, so the frame it
//! belonged to fails its CRC and gets an error answer; no `unsafe`.

use core::cell::RefCell;

use critical_section::Mutex;
use heapless::Deque;

/// A ring of `N` bytes between one producer (an interrupt handler) and one
/// consumer (the main loop); usable from a `static`.
pub struct RxRing<const N: usize> {
    state: Mutex<RefCell<RingState<N>>>,
}

struct RingState<const N: usize> {
    bytes: Deque<u8, N>,
    dropped: u32,
}

impl<const N: usize> Default for RxRing<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> RxRing<N> {
    /// An empty ring.
    pub const fn new() -> Self {
        Self {
            state: Mutex::new(RefCell::new(RingState {
                bytes: Deque::new(),
                dropped: 0,
            })),
        }
    }

    /// Queues `byte` (from the interrupt handler); drops and counts it when
    /// the ring is full.
    pub fn push(&self, byte: u8) {
        critical_section::with(|cs| {
            let mut state = self.state.borrow_ref_mut(cs);
            if state.bytes.push_back(byte).is_err() {
                state.dropped = state.dropped.wrapping_add(1);
            }
        });
    }

    /// Queues every byte `read` yields (from the interrupt handler, with a
    /// serial receiver's `read`) until it would block. A read error (an
    /// overrun, noise, framing) cleared the error and lost its byte, and is
    /// passed over: the frame it belonged to fails its CRC.
    pub fn push_from<E>(&self, mut read: impl FnMut() -> nb::Result<u8, E>) {
        loop {
            match read() {
                Ok(byte) => self.push(byte),
                Err(nb::Error::WouldBlock) => break,
                Err(nb::Error::Other(_)) => {}
            }
        }
    }

    /// Moves queued bytes, oldest first, into `buffer`; returns how many.
    pub fn pop_into(&self, buffer: &mut [u8]) -> usize {
        critical_section::with(|cs| {
            let mut state = self.state.borrow_ref_mut(cs);
            let mut count = 0;
            for slot in buffer.iter_mut() {
                let Some(byte) = state.bytes.pop_front() else {
                    break;
                };
                *slot = byte;
                count += 1;
            }
            count
        })
    }

    /// Whether no byte is queued.
    pub fn is_empty(&self) -> bool {
        critical_section::with(|cs| self.state.borrow_ref(cs).bytes.is_empty())
    }

    /// Bytes dropped because the ring was full, since boot.
    pub fn dropped(&self) -> u32 {
        critical_section::with(|cs| self.state.borrow_ref(cs).dropped)
    }
}

/// The ring as a blocking [`embedded_io::Read`]: waits for at least one
/// byte, calling `idle` while there is none (to feed a watchdog, or to
/// sleep until the next interrupt), then takes what has arrived.
pub struct RingReader<'r, const N: usize, Idle> {
    ring: &'r RxRing<N>,
    idle: Idle,
}

impl<'r, const N: usize, Idle: FnMut()> RingReader<'r, N, Idle> {
    /// A reader of `ring` that calls `idle` while it waits.
    pub fn new(ring: &'r RxRing<N>, idle: Idle) -> Self {
        Self { ring, idle }
    }
}

impl<const N: usize, Idle> embedded_io::ErrorType for RingReader<'_, N, Idle> {
    type Error = core::convert::Infallible;
}

impl<const N: usize, Idle: FnMut()> embedded_io::Read for RingReader<'_, N, Idle> {
    fn read(&mut self, buffer: &mut [u8]) -> Result<usize, Self::Error> {
        if buffer.is_empty() {
            return Ok(0);
        }
        loop {
            let count = self.ring.pop_into(buffer);
            if count > 0 {
                return Ok(count);
            }
            (self.idle)();
        }
    }
}
