//! Directory-index name hashes: legacy, half-MD4 and TEA, in signed and
//! unsigned variants (the variant follows how the creating machine's `char`
//! was signed; the superblock records it).

/// Hash algorithm numbers as stored in `s_def_hash_version` and the dx root.
pub mod version {
    pub const LEGACY: u8 = 0;
    pub const HALF_MD4: u8 = 1;
    pub const TEA: u8 = 2;
    pub const LEGACY_UNSIGNED: u8 = 3;
    pub const HALF_MD4_UNSIGNED: u8 = 4;
    pub const TEA_UNSIGNED: u8 = 5;
    pub const SIPHASH: u8 = 6;
}

/// Major and minor hash of a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameHash {
    pub major: u32,
    pub minor: u32,
}

/// Hash `name` with algorithm `version` and the volume's 4-word seed.
/// Returns None for algorithms we do not implement (siphash, used only with casefold+encrypt).
pub fn dirhash(name: &[u8], version: u8, seed: &[u32; 4]) -> Option<NameHash> {
    let mut buf = [0x6745_2301u32, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    if seed.iter().any(|&w| w != 0) {
        buf = *seed;
    }
    let (major, minor) = match version {
        version::LEGACY => (legacy(name, true), 0),
        version::LEGACY_UNSIGNED => (legacy(name, false), 0),
        version::HALF_MD4 | version::HALF_MD4_UNSIGNED => {
            let signed = version == version::HALF_MD4;
            for chunk in chunks(name, 32) {
                let mut input = [0u32; 8];
                str2hashbuf(chunk, &mut input, signed);
                half_md4_transform(&mut buf, &input);
            }
            (buf[1], buf[2])
        }
        version::TEA | version::TEA_UNSIGNED => {
            let signed = version == version::TEA;
            for chunk in chunks(name, 16) {
                let mut input = [0u32; 4];
                str2hashbuf(chunk, &mut input, signed);
                tea_transform(&mut buf, &input);
            }
            (buf[0], buf[1])
        }
        _ => return None,
    };
    let mut major = major & !1;
    if major == 0x7FFF_FFFF << 1 {
        major = 0x7FFF_FFFE << 1; // the end-of-directory marker is reserved
    }
    Some(NameHash { major, minor })
}

/// Successive suffixes of `name`, each starting `step` bytes later (the
/// packing below reads the remaining length, not just the chunk).
fn chunks(name: &[u8], step: usize) -> impl Iterator<Item = &[u8]> {
    (0..name.len()).step_by(step).map(move |i| &name[i..])
}

fn char_value(c: u8, signed: bool) -> u32 {
    if signed {
        c as i8 as i32 as u32
    } else {
        u32::from(c)
    }
}

/// Pack up to `out.len() * 4` bytes of `msg` into words, padded with the length.
fn str2hashbuf(msg: &[u8], out: &mut [u32], signed: bool) {
    let len = msg.len() as u32;
    let mut pad = len | (len << 8);
    pad |= pad << 16;
    let n = msg.len().min(out.len() * 4);
    let mut val = pad;
    let mut w = 0;
    for (i, &c) in msg[..n].iter().enumerate() {
        val = char_value(c, signed).wrapping_add(val << 8);
        if i % 4 == 3 {
            out[w] = val;
            w += 1;
            val = pad;
        }
    }
    if w < out.len() {
        out[w] = val;
        w += 1;
    }
    for slot in &mut out[w..] {
        *slot = pad;
    }
}

fn legacy(name: &[u8], signed: bool) -> u32 {
    let (mut h0, mut h1) = (0x12a3_fe2du32, 0x37ab_e8f9u32);
    for &c in name {
        let mut h = h1.wrapping_add(h0 ^ char_value(c, signed).wrapping_mul(7_152_373));
        if h & 0x8000_0000 != 0 {
            h = h.wrapping_sub(0x7fff_ffff);
        }
        h1 = h0;
        h0 = h;
    }
    h0 << 1
}

fn tea_transform(buf: &mut [u32; 4], input: &[u32; 4]) {
    const DELTA: u32 = 0x9E37_79B9;
    let (mut b0, mut b1) = (buf[0], buf[1]);
    let [a, b, c, d] = *input;
    let mut sum = 0u32;
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        b0 = b0.wrapping_add((b1 << 4).wrapping_add(a) ^ b1.wrapping_add(sum) ^ (b1 >> 5).wrapping_add(b));
        b1 = b1.wrapping_add((b0 << 4).wrapping_add(c) ^ b0.wrapping_add(sum) ^ (b0 >> 5).wrapping_add(d));
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

fn half_md4_transform(buf: &mut [u32; 4], x: &[u32; 8]) {
    const K2: u32 = 0o13240474631;
    const K3: u32 = 0o15666365641;
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    let (mut a, mut b, mut c, mut d) = (buf[0], buf[1], buf[2], buf[3]);
    macro_rules! round {
        ($f:expr, $a:ident, $b:ident, $c:ident, $d:ident, $x:expr, $s:expr) => {
            $a = $a.wrapping_add($f($b, $c, $d)).wrapping_add($x).rotate_left($s);
        };
    }
    round!(f, a, b, c, d, x[0], 3);
    round!(f, d, a, b, c, x[1], 7);
    round!(f, c, d, a, b, x[2], 11);
    round!(f, b, c, d, a, x[3], 19);
    round!(f, a, b, c, d, x[4], 3);
    round!(f, d, a, b, c, x[5], 7);
    round!(f, c, d, a, b, x[6], 11);
    round!(f, b, c, d, a, x[7], 19);
    round!(g, a, b, c, d, x[1].wrapping_add(K2), 3);
    round!(g, d, a, b, c, x[3].wrapping_add(K2), 5);
    round!(g, c, d, a, b, x[5].wrapping_add(K2), 9);
    round!(g, b, c, d, a, x[7].wrapping_add(K2), 13);
    round!(g, a, b, c, d, x[0].wrapping_add(K2), 3);
    round!(g, d, a, b, c, x[2].wrapping_add(K2), 5);
    round!(g, c, d, a, b, x[4].wrapping_add(K2), 9);
    round!(g, b, c, d, a, x[6].wrapping_add(K2), 13);
    round!(h, a, b, c, d, x[3].wrapping_add(K3), 3);
    round!(h, d, a, b, c, x[7].wrapping_add(K3), 9);
    round!(h, c, d, a, b, x[2].wrapping_add(K3), 11);
    round!(h, b, c, d, a, x[6].wrapping_add(K3), 15);
    round!(h, a, b, c, d, x[1].wrapping_add(K3), 3);
    round!(h, d, a, b, c, x[5].wrapping_add(K3), 9);
    round!(h, c, d, a, b, x[0].wrapping_add(K3), 11);
    round!(h, b, c, d, a, x[4].wrapping_add(K3), 15);
    buf[0] = buf[0].wrapping_add(a);
    buf[1] = buf[1].wrapping_add(b);
    buf[2] = buf[2].wrapping_add(c);
    buf[3] = buf[3].wrapping_add(d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_even_and_deterministic() {
        let seed = [1, 2, 3, 4];
        for v in 0..6 {
            let a = dirhash(b"some-file-name.txt", v, &seed).unwrap();
            assert_eq!(a, dirhash(b"some-file-name.txt", v, &seed).unwrap());
            assert_eq!(a.major & 1, 0);
        }
        assert!(dirhash(b"x", version::SIPHASH, &seed).is_none());
    }

    #[test]
    fn signed_and_unsigned_differ_only_on_high_bytes() {
        let seed = [0; 4];
        assert_eq!(dirhash(b"ascii", 1, &seed), dirhash(b"ascii", 4, &seed));
        assert_ne!(dirhash("é".as_bytes(), 1, &seed), dirhash("é".as_bytes(), 4, &seed));
    }

    #[test]
    fn long_names_use_every_chunk() {
        let seed = [0; 4];
        let a = [b'a'; 200];
        let mut b = a;
        b[199] = b'b';
        for v in [0u8, 1, 2] {
            assert_ne!(dirhash(&a, v, &seed), dirhash(&b, v, &seed), "version {v}");
        }
    }
}
