//! Little-endian field access on byte buffers. Every structure module reads and
//! writes its fields through these, after checking the buffer length once.

/// Fail with `Truncated` unless `buf` holds at least `need` bytes.
pub fn need(structure: &'static str, buf: &[u8], need: usize) -> crate::Result<()> {
    if buf.len() < need {
        return Err(crate::FormatError::corrupt(
            structure,
            crate::Location::Unknown,
            crate::Corruption::Truncated { need, have: buf.len() },
        ));
    }
    Ok(())
}

// The getters index with slices of fixed width; callers have checked the length
// with `need`, so an out-of-range offset is a programming error (a panic in tests).
#[inline]
pub fn u8_at(b: &[u8], off: usize) -> u8 {
    b[off]
}
#[inline]
pub fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
#[inline]
pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
pub fn le64(b: &[u8], off: usize) -> u64 {
    u64::from(le32(b, off)) | (u64::from(le32(b, off + 4)) << 32)
}
#[inline]
pub fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
pub fn be64(b: &[u8], off: usize) -> u64 {
    (u64::from(be32(b, off)) << 32) | u64::from(be32(b, off + 4))
}
#[inline]
pub fn put_le16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_le32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_le64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_be32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}
#[inline]
pub fn put_be64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}
/// Join a low 32-bit and a high 16/32-bit half into one value.
#[inline]
pub fn lo_hi(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// A little-endian field of an on-disk structure: read and written at a byte offset.
/// Implemented for the integer widths and fixed arrays ext4 uses, so that one
/// table per structure (see [`le_struct!`]) generates both parse and serialise.
pub trait LeField: Sized {
    const SIZE: usize;
    fn get(b: &[u8], off: usize) -> Self;
    fn put(&self, b: &mut [u8], off: usize);
}

impl LeField for u8 {
    const SIZE: usize = 1;
    fn get(b: &[u8], off: usize) -> Self {
        b[off]
    }
    fn put(&self, b: &mut [u8], off: usize) {
        b[off] = *self;
    }
}
impl LeField for u16 {
    const SIZE: usize = 2;
    fn get(b: &[u8], off: usize) -> Self {
        le16(b, off)
    }
    fn put(&self, b: &mut [u8], off: usize) {
        put_le16(b, off, *self)
    }
}
impl LeField for u32 {
    const SIZE: usize = 4;
    fn get(b: &[u8], off: usize) -> Self {
        le32(b, off)
    }
    fn put(&self, b: &mut [u8], off: usize) {
        put_le32(b, off, *self)
    }
}
impl LeField for u64 {
    const SIZE: usize = 8;
    fn get(b: &[u8], off: usize) -> Self {
        le64(b, off)
    }
    fn put(&self, b: &mut [u8], off: usize) {
        put_le64(b, off, *self)
    }
}
impl<const N: usize> LeField for [u8; N] {
    const SIZE: usize = N;
    fn get(b: &[u8], off: usize) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[off..off + N]);
        a
    }
    fn put(&self, b: &mut [u8], off: usize) {
        b[off..off + N].copy_from_slice(self)
    }
}
impl<const N: usize> LeField for [u32; N] {
    const SIZE: usize = 4 * N;
    fn get(b: &[u8], off: usize) -> Self {
        std::array::from_fn(|i| le32(b, off + 4 * i))
    }
    fn put(&self, b: &mut [u8], off: usize) {
        for (i, v) in self.iter().enumerate() {
            put_le32(b, off + 4 * i, *v);
        }
    }
}

/// Declare an on-disk structure as a table of `name: type @ offset` fields. Generates
/// the struct (fields documented in place), `read_fields(&[u8])` and
/// `write_fields(&mut [u8])`, so each layout is written down exactly once.
/// Callers check the buffer length before calling `read_fields`.
#[macro_export]
macro_rules! le_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty = $off:expr),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name { $($(#[$fmeta])* pub $field: $ty),* }
        impl $name {
            /// Parse every field from `b` (whose length the caller has checked).
            pub fn read_fields(b: &[u8]) -> Self {
                $name { $($field: <$ty as $crate::bytes::LeField>::get(b, $off)),* }
            }
            /// Write every field into `b`, leaving bytes outside the table untouched.
            pub fn write_fields(&self, b: &mut [u8]) {
                $(<$ty as $crate::bytes::LeField>::put(&self.$field, b, $off);)*
            }
            /// The structure with every field zero.
            pub fn zeroed() -> Self {
                Self::read_fields(&[0u8; Self::FIELDS_END])
            }
            /// One past the last byte any field covers.
            pub const FIELDS_END: usize = {
                let mut end = 0;
                $(let e = $off + <$ty as $crate::bytes::LeField>::SIZE; if e > end { end = e; })*
                end
            };
        }
        impl Default for $name {
            fn default() -> Self {
                Self::zeroed()
            }
        }
    };
}
