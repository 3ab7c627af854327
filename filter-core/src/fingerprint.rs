//! Fingerprint types: the short tags a cuckoo filter stores instead of items.
//!
//! A fingerprint is an unsigned integer of 8, 16 or 32 bits whose value 0
//! marks an empty slot, so a fingerprint derived from a hash is always in
//! `1..=2^BITS - 1`: the low `BITS` of the 32 hash bits, with 0 taken as 1,
//! as the reference implementation takes it. 1 is then twice as likely as
//! any other value, which raises the false-positive rate by a `2^BITS`-th
//! of itself; in return the fingerprint costs two instructions ahead of the
//! alternate bucket's load, where a multiply-shift onto the nonzero values
//! cost four and the top bits one more (lookups of integer keys 7% faster
//! than with the top bits, `BENCHMARKS-filter-core.md`). In memory and in
//! snapshots a fingerprint is stored little-endian in `BITS / 8` bytes.

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for u16 {}
    impl Sealed for u32 {}
}

/// An unsigned integer usable as a cuckoo-filter fingerprint (`u8`, `u16`,
/// `u32`).
pub trait Fingerprint: Copy + Eq + core::fmt::Debug + sealed::Sealed + 'static {
    /// Width in bits.
    const BITS: u32;
    /// Width in bytes in the bucket layout.
    const BYTES: usize;
    /// The reserved value of an empty slot.
    const EMPTY: Self;

    /// The low `BITS` of 32 hash bits, 0 taken as 1 (never `EMPTY`).
    fn from_hash(bits: u32) -> Self;
    /// The value widened to `u32`.
    fn to_u32(self) -> u32;
    /// Writes the little-endian bytes into `out` (which holds `BYTES`).
    fn write_le(self, out: &mut [u8]);
    /// Reads from little-endian bytes; `None` when `bytes` is not `BYTES` long.
    fn read_le(bytes: &[u8]) -> Option<Self>;
}

macro_rules! impl_fingerprint {
    ($($ty:ty),*) => {$(
        impl Fingerprint for $ty {
            const BITS: u32 = <$ty>::BITS;
            const BYTES: usize = core::mem::size_of::<$ty>();
            const EMPTY: Self = 0;

            #[inline(always)]
            fn from_hash(bits: u32) -> Self {
                let low = bits as $ty;
                low + <$ty>::from(low == 0)
            }

            #[inline(always)]
            fn to_u32(self) -> u32 {
                u32::from(self)
            }

            fn write_le(self, out: &mut [u8]) {
                for (dst, src) in out.iter_mut().zip(self.to_le_bytes()) {
                    *dst = src;
                }
            }

            fn read_le(bytes: &[u8]) -> Option<Self> {
                bytes.try_into().ok().map(<$ty>::from_le_bytes)
            }
        }
    )*};
}

impl_fingerprint!(u8, u16, u32);
