//! Checksums used by ext4 (metadata_csum) and jbd2 (csum v2/v3).
//!
//! ext4 stores `!crc32c` values computed with an initial value of all ones and no
//! final inversion: the `crc32c` crate's `crc32c_append(!0, ..)` returns the
//! inverted form, so these helpers undo that once, here.

/// crc32c as ext4 and jbd2 chain it: start from `seed`, no final xor.
#[inline]
pub fn crc32c(seed: u32, data: &[u8]) -> u32 {
    !crc32c::crc32c_append(!seed, data)
}

/// crc16 (ANSI, reflected polynomial 0xA001) used by `gdt_csum` group descriptors
/// of volumes without metadata_csum.
pub fn crc16(mut crc: u16, data: &[u8]) -> u16 {
    for &byte in data {
        crc ^= u16::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xA001 } else { crc >> 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_vector() {
        // Standard check value: crc32c("123456789") = 0xE3069283 with init !0 and final xor.
        assert_eq!(!crc32c(!0, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn crc32c_chains() {
        let whole = crc32c(!0, b"hello world");
        let parts = crc32c(crc32c(!0, b"hello "), b"world");
        assert_eq!(whole, parts);
    }

    #[test]
    fn crc16_known_vector() {
        // CRC-16/ARC check value for "123456789".
        assert_eq!(crc16(0, b"123456789"), 0xBB3D);
    }
}
