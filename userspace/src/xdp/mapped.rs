//! Shared memory of `BPF_F_MMAPABLE` array maps, mapped into this process.
//!
//! A [`MappedMap`] is the value area of an array map (elements
//! `round_up(value_size, 8)` bytes apart, from offset 0), or whole pages of
//! it ([`MappedMap::pages`]), shared with the
//! kernel and every other process that maps the same map: stores are seen by
//! the XDP program at once, without a syscall. [`MappedValue`] views a
//! single-element map as one `T`, with atomic access to its 32- and 64-bit
//! fields.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8};

use aya::maps::Map;
use std::os::fd::AsFd;

use super::{Result, XdpError};

/// A read-write, shared mapping of an mmapable BPF array.
#[derive(Debug)]
pub struct MappedMap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access through this
// module is an atomic or volatile operation on an aligned location.
unsafe impl Send for MappedMap {}
// SAFETY: as above.
unsafe impl Sync for MappedMap {}

impl MappedMap {
    /// Maps the first `bytes` bytes (rounded up to whole pages) of the map
    /// behind `fd`, which must be an mmapable array at least that large.
    pub fn new(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<Self> {
        Self::pages(fd, 0, bytes.max(1).div_ceil(page_size()))
    }

    /// Maps `count` pages of the map behind `fd` from page `first` on
    /// (offset 0 of the mapping is byte `first * page_size()` of the value
    /// area). The kernel fills a mapping's page tables when it is made, so
    /// a few pages of a large table cost far less than all of it.
    pub fn pages(fd: BorrowedFd<'_>, first: usize, count: usize) -> io::Result<Self> {
        let page = page_size();
        let too_far = || io::Error::other("page range of a BPF map out of bounds");
        let len = count.max(1).checked_mul(page).ok_or_else(too_far)?;
        let offset = first
            .checked_mul(page)
            .and_then(|offset| libc::off_t::try_from(offset).ok())
            .ok_or_else(too_far)?;
        // SAFETY: a fresh shared mapping of a file descriptor we borrow; the
        // kernel checks that the map is mmapable and holds the range.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(address.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap of a BPF map returned a null address"))?;
        Ok(Self { base, len })
    }

    /// Mapped length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: a mapping is at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pointer to the byte at `offset`, if `size` bytes from there are
    /// mapped.
    fn at(&self, offset: usize, size: usize) -> Option<*mut u8> {
        let end = offset.checked_add(size)?;
        // SAFETY: offset + size <= len, so the pointer stays in the mapping.
        (end <= self.len).then(|| unsafe { self.base.as_ptr().add(offset) })
    }

    /// Pointer to a naturally aligned `size`-byte location at `offset` (the
    /// mapping is page aligned, so an offset that is a multiple of the size
    /// is aligned).
    fn aligned(&self, offset: usize, size: usize) -> Option<*mut u8> {
        if offset.is_multiple_of(size) {
            self.at(offset, size)
        } else {
            None
        }
    }

    /// The atomic `u8` at `offset`.
    pub fn atomic_u8(&self, offset: usize) -> Option<&AtomicU8> {
        // SAFETY: in bounds and aligned; the memory lives as long as `self`.
        self.aligned(offset, 1)
            .map(|ptr| unsafe { AtomicU8::from_ptr(ptr) })
    }

    /// The atomic `u16` at `offset` (2-byte aligned).
    pub fn atomic_u16(&self, offset: usize) -> Option<&AtomicU16> {
        // SAFETY: as for `atomic_u8`.
        self.aligned(offset, 2)
            .map(|ptr| unsafe { AtomicU16::from_ptr(ptr.cast()) })
    }

    /// The atomic `u32` at `offset` (4-byte aligned).
    pub fn atomic_u32(&self, offset: usize) -> Option<&AtomicU32> {
        // SAFETY: as for `atomic_u8`.
        self.aligned(offset, 4)
            .map(|ptr| unsafe { AtomicU32::from_ptr(ptr.cast()) })
    }

    /// The atomic `u64` at `offset` (8-byte aligned).
    pub fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        // SAFETY: as for `atomic_u8`.
        self.aligned(offset, 8)
            .map(|ptr| unsafe { AtomicU64::from_ptr(ptr.cast()) })
    }

    /// Copies `bytes` to `offset`. Only for memory no reader uses yet (a
    /// table before it goes live): the copy is not atomic.
    pub fn copy_from(&self, offset: usize, bytes: &[u8]) -> Option<()> {
        let ptr = self.at(offset, bytes.len())?;
        // SAFETY: the destination range is inside the mapping and cannot
        // overlap a Rust slice (it is not Rust-owned memory).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
        Some(())
    }
}

/// The size of a memory page.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

impl Drop for MappedMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `new`; no reference
        // into it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Plain data: `#[repr(C)]`, integers only, no padding, so every bit
/// pattern is a valid value.
///
/// # Safety
///
/// Implement only for types with those properties.
pub unsafe trait PlainData: Copy {}

// SAFETY: #[repr(C)] integer structs whose sizes the ABI crate asserts to be
// free of padding.
unsafe impl PlainData for cfxdp::Config {}
// SAFETY: as above.
unsafe impl PlainData for cfxdp::LocateReport {}
// SAFETY: as above.
unsafe impl PlainData for cfxdp::BaselineLengths {}

/// A single-element mmapable array viewed as one `T`.
#[derive(Debug)]
pub struct MappedValue<T> {
    map: MappedMap,
    value: PhantomData<T>,
}

impl<T: PlainData> MappedValue<T> {
    /// Maps the element of a single-element array of `T`.
    pub fn new(fd: BorrowedFd<'_>) -> io::Result<Self> {
        Ok(Self {
            map: MappedMap::new(fd, std::mem::size_of::<T>())?,
            value: PhantomData,
        })
    }

    /// A copy of the value, field by field as they are at the moment each
    /// is read (fields another process changes meanwhile may be mixed).
    pub fn read(&self) -> T {
        // SAFETY: the mapping holds at least size_of::<T>() bytes, is page
        // aligned, and every bit pattern is a valid T (PlainData).
        unsafe { std::ptr::read_volatile(self.map.base.as_ptr().cast::<T>()) }
    }

    /// Writes the whole value, with no reader about (a map just loaded,
    /// before any program runs on it).
    pub fn write(&self, value: &T) {
        // SAFETY: as in `read`; the mapping is writable.
        unsafe { std::ptr::write_volatile(self.map.base.as_ptr().cast::<T>(), *value) }
    }

    /// The mapping, for atomic field access by offset
    /// (`std::mem::offset_of!`).
    pub fn fields(&self) -> &MappedMap {
        &self.map
    }
}

/// The value of the mmapable single-element ARRAY `map` (named `name`),
/// mapped.
pub(super) fn map_value<T: PlainData>(map: &Map, name: &'static str) -> Result<MappedValue<T>> {
    let Map::Array(data) = map else {
        return Err(XdpError::MissingMap(name));
    };
    MappedValue::new(data.fd().as_fd()).map_err(|source| XdpError::Mmap { name, source })
}
