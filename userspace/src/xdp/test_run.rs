//! `BPF_PROG_TEST_RUN` for XDP and TC programs: run a loaded program on a
//! frame in the kernel, without an interface, and get its verdict and run
//! time.
//!
//! aya 0.14 does not wrap this command, so this module issues the `bpf`
//! syscall itself (command 10) with the `test` member of `union bpf_attr`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::syscall::bpf;

const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// The `test` member of `union bpf_attr` (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    /// Explicit tail padding: the kernel requires the bytes after the last
    /// field it knows to be zero.
    padding: u32,
}

/// An XDP program's return value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpAction {
    /// `XDP_ABORTED`.
    Aborted,
    /// `XDP_DROP`.
    Drop,
    /// `XDP_PASS`.
    Pass,
    /// `XDP_TX`.
    Tx,
    /// `XDP_REDIRECT`.
    Redirect,
    /// Any other value.
    Other(u32),
}

impl From<u32> for XdpAction {
    fn from(value: u32) -> Self {
        match value {
            0 => XdpAction::Aborted,
            1 => XdpAction::Drop,
            2 => XdpAction::Pass,
            3 => XdpAction::Tx,
            4 => XdpAction::Redirect,
            other => XdpAction::Other(other),
        }
    }
}

/// The result of a test run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestRun {
    /// What the program returned (for the last repetition).
    pub action: XdpAction,
    /// Mean run time per repetition in nanoseconds, as the kernel measured
    /// it (includes the harness's own per-run overhead).
    pub duration_ns: u32,
}

/// A TC program's return value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcAction {
    /// `TC_ACT_UNSPEC` (`TCX_NEXT`): no verdict, the hook's next program
    /// decides (the packet passes when none is left).
    Next,
    /// `TC_ACT_OK` (`TCX_PASS`).
    Pass,
    /// `TC_ACT_SHOT` (`TCX_DROP`).
    Drop,
    /// Any other value.
    Other(i32),
}

impl From<u32> for TcAction {
    fn from(value: u32) -> Self {
        match value as i32 {
            -1 => TcAction::Next,
            0 => TcAction::Pass,
            2 => TcAction::Drop,
            other => TcAction::Other(other),
        }
    }
}

/// The result of a TC program's test run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcTestRun {
    /// What the program returned (for the last repetition).
    pub action: TcAction,
    /// Mean run time per repetition in nanoseconds, as the kernel measured
    /// it.
    pub duration_ns: u32,
}

/// Runs the XDP program `program` on `frame`, `repeat` times (0 counts as
/// 1). The kernel refuses frames shorter than an Ethernet header (14
/// bytes) or longer than a page minus XDP head- and tailroom, with `EINVAL`.
pub fn run_xdp(program: BorrowedFd<'_>, frame: &[u8], repeat: u32) -> io::Result<TestRun> {
    let (retval, duration_ns) = run_program(program, frame, repeat)?;
    Ok(TestRun {
        action: XdpAction::from(retval),
        duration_ns,
    })
}

/// Runs the TC program `program` on `frame` (from its Ethernet header on),
/// `repeat` times, as [`run_xdp`] does.
pub fn run_tc(program: BorrowedFd<'_>, frame: &[u8], repeat: u32) -> io::Result<TcTestRun> {
    let (retval, duration_ns) = run_program(program, frame, repeat)?;
    Ok(TcTestRun {
        action: TcAction::from(retval),
        duration_ns,
    })
}

/// Runs `program` on `frame` `repeat` times: its return value and the mean
/// run time in nanoseconds.
fn run_program(program: BorrowedFd<'_>, frame: &[u8], repeat: u32) -> io::Result<(u32, u32)> {
    let data_size_in = u32::try_from(frame.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than 4 GiB"))?;
    let mut attr = TestRunAttr {
        prog_fd: program.as_raw_fd() as u32,
        data_size_in,
        data_in: frame.as_ptr() as u64,
        repeat,
        ..TestRunAttr::default()
    };
    // SAFETY: the `test` member, whose `data_in` is `frame` with its
    // length; no data_out or ctx buffers are given.
    unsafe { bpf(BPF_PROG_TEST_RUN, &mut attr) }?;
    Ok((attr.retval, attr.duration))
}
