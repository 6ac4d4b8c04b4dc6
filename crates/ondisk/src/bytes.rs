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
