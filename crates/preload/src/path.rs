//! Pure path handling: joining a relative path to its base, lexical
//! normalisation, mount matching and the hint socket's name. No system calls,
//! no allocation: everything writes into caller-owned buffers, because the
//! wrappers may run anywhere (a signal handler, a vfork child, early start-up).

/// Longest path a hint carries (PATH_MAX); longer ones are not hinted.
pub const MAX_PATH: usize = 4096;

/// A path being built in a fixed buffer.
pub struct PathBuf {
    buf: [u8; MAX_PATH],
    len: usize,
}

impl Default for PathBuf {
    fn default() -> Self {
        PathBuf { buf: [0; MAX_PATH], len: 0 }
    }
}

impl PathBuf {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Make this `base` joined with `rel` (`rel` alone when absolute),
    /// normalised lexically: no empty or "." components, ".." removes the
    /// previous one (never above "/"). Lexical ".." can be wrong across a
    /// symlink; a hint is only a hint (the daemon finds the real path, or
    /// wastes a read). None when `base` is not absolute or the result is too long.
    pub fn set_joined(&mut self, base: &[u8], rel: &[u8]) -> Option<()> {
        self.len = 0;
        if rel.first() != Some(&b'/') {
            if base.first() != Some(&b'/') {
                return None;
            }
            self.push_components(base)?;
        }
        self.push_components(rel)?;
        if self.len == 0 {
            self.buf[0] = b'/';
            self.len = 1;
        }
        Some(())
    }

    fn push_components(&mut self, p: &[u8]) -> Option<()> {
        for c in p.split(|&b| b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => {
                    // Back to the previous '/' (the root stays the root).
                    let cut = self.buf[..self.len].iter().rposition(|&b| b == b'/').unwrap_or(0);
                    self.len = cut;
                }
                name => {
                    let end = self.len + 1 + name.len();
                    if end > MAX_PATH {
                        return None;
                    }
                    self.buf[self.len] = b'/';
                    self.buf[self.len + 1..end].copy_from_slice(name);
                    self.len = end;
                }
            }
        }
        Some(())
    }
}

/// Whether a call's path is worth a hint: not empty (AT_EMPTY_PATH: the
/// descriptor itself) and not one name relative to a directory the program
/// holds already (its cwd or `dirfd`: what fts, find and du do for every
/// entry). That one lookup the FUSE lookup hint sees too; a full-path hint
/// would add a getcwd or /proc readlink, a datagram and the daemon's work for
/// nothing (measured: `du` 0.8x on `cmr` with such hints).
pub fn worth_hinting(path: &[u8]) -> bool {
    path.first() == Some(&b'/') || path.contains(&b'/')
}

/// Whether normalised absolute `path` is `mount` or below it.
pub fn is_under(path: &[u8], mount: &[u8]) -> bool {
    if mount == b"/" {
        return path.first() == Some(&b'/');
    }
    path.starts_with(mount) && matches!(path.get(mount.len()), None | Some(b'/'))
}

/// FNV-1a, 64 bits: names a mount's hint socket (the daemon computes the same).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Directory of the hint sockets; a socket is `SOCKET_DIR/<16 hex digits>.hints`,
/// the digits being `fnv1a64(mount point)`: always short enough for
/// `sun_path` (108 bytes), whatever the mount point's length.
pub const SOCKET_DIR: &[u8] = b"/run/ext4lazy/";
pub const SOCKET_NAME_LEN: usize = SOCKET_DIR.len() + 16 + b".hints".len();

/// The socket path of `mount` (without a terminating NUL).
pub fn socket_path(mount: &[u8]) -> [u8; SOCKET_NAME_LEN] {
    let mut out = [0u8; SOCKET_NAME_LEN];
    out[..SOCKET_DIR.len()].copy_from_slice(SOCKET_DIR);
    let h = fnv1a64(mount);
    for i in 0..16 {
        let nibble = ((h >> (60 - 4 * i)) & 0xf) as usize;
        out[SOCKET_DIR.len() + i] = b"0123456789abcdef"[nibble];
    }
    out[SOCKET_DIR.len() + 16..].copy_from_slice(b".hints");
    out
}

/// Decode the octal escapes of a /proc/self/mountinfo field (`\040` for a
/// space, `\011`, `\012`, `\134`) into `out`; its length, or None if too long.
pub fn unescape_mountinfo(field: &[u8], out: &mut [u8]) -> Option<usize> {
    let (mut i, mut n) = (0, 0);
    while i < field.len() {
        let octal =
            field.get(i + 1..i + 4).filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        let byte = match octal {
            Some(d) => {
                i += 4;
                (d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0')
            }
            None => {
                i += 1;
                field[i - 1]
            }
        };
        *out.get_mut(n)? = byte;
        n += 1;
    }
    Some(n)
}

/// One line of /proc/self/mountinfo: (mount point field, file system type).
/// Format: `id parent maj:min root MOUNTPOINT options [optional...] - FSTYPE source superoptions`.
pub fn mountinfo_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut fields = line.split(|&b| b == b' ');
    let point = fields.nth(4)?;
    let mut fields = fields.skip_while(|f| *f != b"-");
    fields.next()?;
    Some((point, fields.next()?))
}

/// Whether a mount of this type may be ext4lazy (`fuse.ext4lazy`, or plain
/// `fuse` when mounted without a subtype); the socket's presence decides.
pub fn may_be_ext4lazy(fstype: &[u8]) -> bool {
    fstype == b"fuse.ext4lazy" || fstype == b"fuse"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(base: &str, rel: &str) -> Option<String> {
        let mut p = PathBuf::default();
        p.set_joined(base.as_bytes(), rel.as_bytes())?;
        Some(String::from_utf8(p.as_bytes().to_vec()).unwrap())
    }

    #[test]
    fn relative_paths_join_their_base_and_normalise() {
        assert_eq!(joined("/mnt/vol", "a/b").as_deref(), Some("/mnt/vol/a/b"));
        assert_eq!(joined("/mnt/vol/", "./a//b/").as_deref(), Some("/mnt/vol/a/b"));
        assert_eq!(joined("/mnt/vol/x", "../y/./z").as_deref(), Some("/mnt/vol/y/z"));
        assert_eq!(joined("/", "a").as_deref(), Some("/a"));
        assert_eq!(joined("/a", "../../..").as_deref(), Some("/"), "never above the root");
        assert_eq!(joined("/a/b", ".").as_deref(), Some("/a/b"));
    }

    #[test]
    fn absolute_paths_ignore_the_base() {
        assert_eq!(joined("/elsewhere", "/mnt//v/./f").as_deref(), Some("/mnt/v/f"));
        assert_eq!(joined("not absolute", "/x").as_deref(), Some("/x"));
        assert_eq!(joined("not absolute", "x"), None, "a base that is not a path (socket:[..]) gives no hint");
        assert_eq!(joined("", "x"), None);
    }

    #[test]
    fn too_long_paths_give_no_hint() {
        let long = "n".repeat(MAX_PATH);
        assert_eq!(joined("/m", &long), None);
        let fits = "n".repeat(MAX_PATH - 3);
        assert_eq!(joined("/m", &fits).map(|s| s.len()), Some(MAX_PATH));
    }

    #[test]
    fn single_names_relative_to_a_held_directory_are_not_hinted() {
        assert!(!worth_hinting(b""));
        assert!(!worth_hinting(b"name"));
        assert!(!worth_hinting(b".."));
        assert!(worth_hinting(b"a/b"));
        assert!(worth_hinting(b"/"));
        assert!(worth_hinting(b"/mnt"));
        assert!(worth_hinting(b"name/"));
    }

    #[test]
    fn mount_matching_is_by_whole_components() {
        assert!(is_under(b"/mnt/vol", b"/mnt/vol"));
        assert!(is_under(b"/mnt/vol/a", b"/mnt/vol"));
        assert!(!is_under(b"/mnt/volume/a", b"/mnt/vol"));
        assert!(!is_under(b"/mnt", b"/mnt/vol"));
        assert!(is_under(b"/anything", b"/"));
    }

    #[test]
    fn socket_names_are_fnv1a_of_the_mount_point() {
        // Reference values of FNV-1a 64 (the daemon's test checks the same ones).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(&socket_path(b"")[..], b"/run/ext4lazy/cbf29ce484222325.hints");
        const { assert!(SOCKET_NAME_LEN < 108, "fits sun_path") };
    }

    #[test]
    fn mountinfo_lines_give_point_and_type() {
        let l = b"36 35 98:0 / /mnt/my\\040vol rw,noatime master:1 - fuse.ext4lazy /img rw,user_id=0";
        let (point, ty) = mountinfo_line(l).unwrap();
        assert_eq!(ty, b"fuse.ext4lazy");
        let mut out = [0u8; 64];
        let n = unescape_mountinfo(point, &mut out).unwrap();
        assert_eq!(&out[..n], b"/mnt/my vol");
        let (point, ty) = mountinfo_line(b"22 1 8:1 / / rw - ext4 /dev/sda1 rw").unwrap();
        assert_eq!((point, ty), (&b"/"[..], &b"ext4"[..]));
        assert_eq!(mountinfo_line(b"garbage"), None);
        assert_eq!(mountinfo_line(b"1 2 3 4 5 6 no separator"), None);
        assert_eq!(unescape_mountinfo(b"a\\134b\\0", &mut out).map(|n| out[..n].to_vec()), Some(b"a\\b\\0".to_vec()));
        assert_eq!(unescape_mountinfo(b"abc", &mut [0u8; 2]), None);
        assert!(may_be_ext4lazy(b"fuse") && may_be_ext4lazy(b"fuse.ext4lazy") && !may_be_ext4lazy(b"fuse.sshfs"));
    }
}
