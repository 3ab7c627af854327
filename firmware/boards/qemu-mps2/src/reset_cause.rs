//! Why the machine last started. QEMU's `mps2-an386` has no register that
//! says, so the firmware leaves a note in `.uninit` RAM, which a reset
//! keeps (QEMU zeroes RAM only when it starts): the panic and HardFault
//! handlers write theirs before they reset the machine, the watchdog's
//! interrupt handler before the watchdog does. Boot reads the note and
//! leaves one that says `Pin` in its place, which stands for a reset that
//! wrote none (QEMU's `system_reset`); RAM without a note is a power-on.

use core::mem::MaybeUninit;
use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};

use filter_core::protocol::ResetCause;

/// Marks a note as one this firmware wrote.
const MAGIC: u32 = 0x5245_5345;

/// The note.
#[derive(Clone, Copy)]
#[repr(C)]
struct Note {
    magic: u32,
    cause: u32,
}

#[link_section = ".uninit.RESET_NOTE"]
static mut NOTE: MaybeUninit<Note> = MaybeUninit::uninit();

/// The causes a note can hold, by their number in it.
const CAUSES: [ResetCause; 4] = [
    ResetCause::Pin,
    ResetCause::Watchdog,
    ResetCause::Panic,
    ResetCause::HardFault,
];

/// Leaves `cause` for the next boot to read.
pub fn record(cause: ResetCause) {
    let number = CAUSES.iter().position(|known| *known == cause).unwrap_or(0);
    // SAFETY: a store of a whole, valid `Note` into memory only this
    // module names; handlers that call this do not return to code that
    // is writing it. (Volatile: the compiler must not reason about what
    // memory it takes for never written holds.)
    unsafe {
        write_volatile(
            addr_of_mut!(NOTE),
            MaybeUninit::new(Note {
                magic: MAGIC,
                cause: number as u32,
            }),
        );
    }
}

/// The cause of this start, and a `Pin` note in its place.
pub fn take() -> ResetCause {
    // SAFETY: QEMU zeroes RAM when it starts and keeps it across resets,
    // so the note's bytes are initialized, and any bit pattern is a valid
    // `Note`; nothing else runs yet.
    let note = unsafe { read_volatile(addr_of!(NOTE)).assume_init() };
    let cause = if note.magic == MAGIC {
        CAUSES
            .get(note.cause as usize)
            .copied()
            .unwrap_or(ResetCause::Unknown)
    } else {
        ResetCause::PowerOn
    };
    record(ResetCause::Pin);
    cause
}
