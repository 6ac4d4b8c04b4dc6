//! The operations and their stable one-line text form (`verb arg arg ...`),
//! so that sequences can be saved, read by people, and replayed.
//!
//! Paths are relative to the volume's root and `%`-escaped (anything but
//! `[A-Za-z0-9._/+-]`). Data is never spelt out: writes and xattr values
//! carry a seed and a length, and [`crate::rng::fill`] makes the bytes.

use std::fmt;

/// fallocate(2) flags, spelt as in the text form.
pub mod falloc {
    pub const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
    pub const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;
    pub const COLLAPSE_RANGE: i32 = libc::FALLOC_FL_COLLAPSE_RANGE;
    pub const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;
    pub const INSERT_RANGE: i32 = libc::FALLOC_FL_INSERT_RANGE;
    pub const NAMES: [(i32, &str); 5] = [
        (KEEP_SIZE, "keep"),
        (PUNCH_HOLE, "punch"),
        (COLLAPSE_RANGE, "collapse"),
        (ZERO_RANGE, "zero"),
        (INSERT_RANGE, "insert"),
    ];
}

/// renameat2(2) flags.
pub mod rename {
    pub const NOREPLACE: u32 = libc::RENAME_NOREPLACE;
    pub const EXCHANGE: u32 = libc::RENAME_EXCHANGE;
    pub const WHITEOUT: u32 = libc::RENAME_WHITEOUT;
    pub const NAMES: [(u32, &str); 3] = [(NOREPLACE, "noreplace"), (EXCHANGE, "exchange"), (WHITEOUT, "whiteout")];
}

/// setxattr(2) flags.
pub mod xattr {
    pub const NAMES: [(u32, &str); 2] =
        [(libc::XATTR_CREATE as u32, "create"), (libc::XATTR_REPLACE as u32, "replace")];
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// open(O_CREAT|O_EXCL|O_WRONLY, mode), close.
    Create {
        path: String,
        mode: u32,
    },
    Mkdir {
        path: String,
        mode: u32,
    },
    Mkfifo {
        path: String,
        mode: u32,
    },
    /// pwrite of `len` bytes of `fill(seed)` at `off`.
    Write {
        path: String,
        off: u64,
        len: u64,
        seed: u64,
    },
    /// write with O_APPEND.
    Append {
        path: String,
        len: u64,
        seed: u64,
    },
    /// pread; the outcome is a digest of what was read.
    Read {
        path: String,
        off: u64,
        len: u64,
    },
    Truncate {
        path: String,
        size: u64,
    },
    Fallocate {
        path: String,
        mode: i32,
        off: u64,
        len: u64,
    },
    Rename {
        from: String,
        to: String,
        flags: u32,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink {
        path: String,
    },
    Rmdir {
        path: String,
    },
    Symlink {
        target: String,
        path: String,
    },
    /// lsetxattr of `len` bytes of `fill(seed)`.
    SetXattr {
        path: String,
        name: String,
        len: u64,
        seed: u64,
        flags: u32,
    },
    RemoveXattr {
        path: String,
        name: String,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    /// lchown.
    Chown {
        path: String,
        uid: u32,
        gid: u32,
    },
    /// utimensat(AT_SYMLINK_NOFOLLOW), nanoseconds since the epoch.
    Utimes {
        path: String,
        atime: i64,
        mtime: i64,
    },
    /// open, fsync, close (directories too).
    Fsync {
        path: String,
    },
    /// Batch boundary: the driver compares the trees, unmounts, checks and
    /// remounts both file systems. Not a syscall.
    Remount,
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"._/+-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    if out.is_empty() {
        out.push('%'); // a lone % is the empty string
    }
    out
}

fn unesc(s: &str) -> Result<String, String> {
    if s == "%" {
        return Ok(String::new());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s.get(i + 1..i + 3).ok_or_else(|| format!("bad escape in {s:?}"))?;
            out.push(u8::from_str_radix(h, 16).map_err(|_| format!("bad escape in {s:?}"))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("not UTF-8: {s:?}"))
}

fn flags_text(v: u64, names: &[(u64, &str)]) -> String {
    let mut parts: Vec<&str> = names.iter().filter(|(f, _)| v & f != 0).map(|(_, n)| *n).collect();
    let known: u64 = names.iter().map(|(f, _)| f).fold(0, |a, f| a | f);
    let rest = v & !known;
    let rest_s = format!("0x{rest:x}");
    if rest != 0 {
        parts.push(&rest_s);
    }
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join("|")
    }
}

fn parse_flags(s: &str, names: &[(u64, &str)]) -> Result<u64, String> {
    if s == "0" {
        return Ok(0);
    }
    let mut v = 0;
    for p in s.split('|') {
        if let Some(&(f, _)) = names.iter().find(|(_, n)| *n == p) {
            v |= f;
        } else if let Some(h) = p.strip_prefix("0x") {
            v |= u64::from_str_radix(h, 16).map_err(|_| format!("bad flag {p:?}"))?;
        } else {
            return Err(format!("unknown flag {p:?}"));
        }
    }
    Ok(v)
}

fn fa_names() -> Vec<(u64, &'static str)> {
    falloc::NAMES.iter().map(|&(f, n)| (f as u64, n)).collect()
}
fn rn_names() -> Vec<(u64, &'static str)> {
    rename::NAMES.iter().map(|&(f, n)| (u64::from(f), n)).collect()
}
fn xa_names() -> Vec<(u64, &'static str)> {
    xattr::NAMES.iter().map(|&(f, n)| (u64::from(f), n)).collect()
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create { path, mode } => write!(f, "create {} {mode:o}", esc(path)),
            Op::Mkdir { path, mode } => write!(f, "mkdir {} {mode:o}", esc(path)),
            Op::Mkfifo { path, mode } => write!(f, "mkfifo {} {mode:o}", esc(path)),
            Op::Write { path, off, len, seed } => write!(f, "write {} {off} {len} {seed}", esc(path)),
            Op::Append { path, len, seed } => write!(f, "append {} {len} {seed}", esc(path)),
            Op::Read { path, off, len } => write!(f, "read {} {off} {len}", esc(path)),
            Op::Truncate { path, size } => write!(f, "truncate {} {size}", esc(path)),
            Op::Fallocate { path, mode, off, len } => {
                write!(f, "fallocate {} {} {off} {len}", esc(path), flags_text(*mode as u64, &fa_names()))
            }
            Op::Rename { from, to, flags } => {
                write!(f, "rename {} {} {}", esc(from), esc(to), flags_text(u64::from(*flags), &rn_names()))
            }
            Op::Link { from, to } => write!(f, "link {} {}", esc(from), esc(to)),
            Op::Unlink { path } => write!(f, "unlink {}", esc(path)),
            Op::Rmdir { path } => write!(f, "rmdir {}", esc(path)),
            Op::Symlink { target, path } => write!(f, "symlink {} {}", esc(target), esc(path)),
            Op::SetXattr { path, name, len, seed, flags } => write!(
                f,
                "setxattr {} {} {len} {seed} {}",
                esc(path),
                esc(name),
                flags_text(u64::from(*flags), &xa_names())
            ),
            Op::RemoveXattr { path, name } => write!(f, "removexattr {} {}", esc(path), esc(name)),
            Op::Chmod { path, mode } => write!(f, "chmod {} {mode:o}", esc(path)),
            Op::Chown { path, uid, gid } => write!(f, "chown {} {uid} {gid}", esc(path)),
            Op::Utimes { path, atime, mtime } => write!(f, "utimes {} {atime} {mtime}", esc(path)),
            Op::Fsync { path } => write!(f, "fsync {}", esc(path)),
            Op::Remount => write!(f, "remount"),
        }
    }
}

impl std::str::FromStr for Op {
    type Err = String;

    fn from_str(line: &str) -> Result<Op, String> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let want = |n: usize| -> Result<(), String> {
            if w.len() == n + 1 {
                Ok(())
            } else {
                Err(format!("{:?} takes {n} arguments: {line:?}", w[0]))
            }
        };
        let num = |i: usize| -> Result<u64, String> {
            w[i].parse().map_err(|_| format!("bad number {:?} in {line:?}", w[i]))
        };
        let inum = |i: usize| -> Result<i64, String> {
            w[i].parse().map_err(|_| format!("bad number {:?} in {line:?}", w[i]))
        };
        let oct = |i: usize| -> Result<u32, String> {
            u32::from_str_radix(w[i], 8).map_err(|_| format!("bad mode {:?} in {line:?}", w[i]))
        };
        let p = |i: usize| unesc(w[i]);
        let verb = *w.first().ok_or("empty line")?;
        Ok(match verb {
            "create" => {
                want(2)?;
                Op::Create { path: p(1)?, mode: oct(2)? }
            }
            "mkdir" => {
                want(2)?;
                Op::Mkdir { path: p(1)?, mode: oct(2)? }
            }
            "mkfifo" => {
                want(2)?;
                Op::Mkfifo { path: p(1)?, mode: oct(2)? }
            }
            "write" => {
                want(4)?;
                Op::Write { path: p(1)?, off: num(2)?, len: num(3)?, seed: num(4)? }
            }
            "append" => {
                want(3)?;
                Op::Append { path: p(1)?, len: num(2)?, seed: num(3)? }
            }
            "read" => {
                want(3)?;
                Op::Read { path: p(1)?, off: num(2)?, len: num(3)? }
            }
            "truncate" => {
                want(2)?;
                Op::Truncate { path: p(1)?, size: num(2)? }
            }
            "fallocate" => {
                want(4)?;
                Op::Fallocate { path: p(1)?, mode: parse_flags(w[2], &fa_names())? as i32, off: num(3)?, len: num(4)? }
            }
            "rename" => {
                want(3)?;
                Op::Rename { from: p(1)?, to: p(2)?, flags: parse_flags(w[3], &rn_names())? as u32 }
            }
            "link" => {
                want(2)?;
                Op::Link { from: p(1)?, to: p(2)? }
            }
            "unlink" => {
                want(1)?;
                Op::Unlink { path: p(1)? }
            }
            "rmdir" => {
                want(1)?;
                Op::Rmdir { path: p(1)? }
            }
            "symlink" => {
                want(2)?;
                Op::Symlink { target: p(1)?, path: p(2)? }
            }
            "setxattr" => {
                want(5)?;
                Op::SetXattr {
                    path: p(1)?,
                    name: p(2)?,
                    len: num(3)?,
                    seed: num(4)?,
                    flags: parse_flags(w[5], &xa_names())? as u32,
                }
            }
            "removexattr" => {
                want(2)?;
                Op::RemoveXattr { path: p(1)?, name: p(2)? }
            }
            "chmod" => {
                want(2)?;
                Op::Chmod { path: p(1)?, mode: oct(2)? }
            }
            "chown" => {
                want(3)?;
                Op::Chown { path: p(1)?, uid: num(2)? as u32, gid: num(3)? as u32 }
            }
            "utimes" => {
                want(3)?;
                Op::Utimes { path: p(1)?, atime: inum(2)?, mtime: inum(3)? }
            }
            "fsync" => {
                want(1)?;
                Op::Fsync { path: p(1)? }
            }
            "remount" => {
                want(0)?;
                Op::Remount
            }
            _ => return Err(format!("unknown operation {verb:?}")),
        })
    }
}

impl Op {
    /// The paths the operation names (for tainting after tolerated ENOSPC
    /// differences): the link/rename target second.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            Op::Rename { from, to, .. } | Op::Link { from, to } => vec![from, to],
            Op::Remount => vec![],
            Op::Create { path, .. }
            | Op::Mkdir { path, .. }
            | Op::Mkfifo { path, .. }
            | Op::Write { path, .. }
            | Op::Append { path, .. }
            | Op::Read { path, .. }
            | Op::Truncate { path, .. }
            | Op::Fallocate { path, .. }
            | Op::Unlink { path }
            | Op::Rmdir { path }
            | Op::Symlink { path, .. }
            | Op::SetXattr { path, .. }
            | Op::RemoveXattr { path, .. }
            | Op::Chmod { path, .. }
            | Op::Chown { path, .. }
            | Op::Utimes { path, .. }
            | Op::Fsync { path } => vec![path],
        }
    }

    /// The verb, for statistics and switches.
    pub fn verb(&self) -> &'static str {
        match self {
            Op::Create { .. } => "create",
            Op::Mkdir { .. } => "mkdir",
            Op::Mkfifo { .. } => "mkfifo",
            Op::Write { .. } => "write",
            Op::Append { .. } => "append",
            Op::Read { .. } => "read",
            Op::Truncate { .. } => "truncate",
            Op::Fallocate { .. } => "fallocate",
            Op::Rename { .. } => "rename",
            Op::Link { .. } => "link",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Symlink { .. } => "symlink",
            Op::SetXattr { .. } => "setxattr",
            Op::RemoveXattr { .. } => "removexattr",
            Op::Chmod { .. } => "chmod",
            Op::Chown { .. } => "chown",
            Op::Utimes { .. } => "utimes",
            Op::Fsync { .. } => "fsync",
            Op::Remount => "remount",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips() {
        let ops = vec![
            Op::Create { path: "a/b c".into(), mode: 0o644 },
            Op::Write { path: "x".into(), off: 1 << 33, len: 4096, seed: 7 },
            Op::Fallocate { path: "x".into(), mode: falloc::PUNCH_HOLE | falloc::KEEP_SIZE, off: 0, len: 1 },
            Op::Fallocate { path: "x".into(), mode: 0, off: 0, len: 1 },
            Op::Rename { from: "a".into(), to: "b".into(), flags: rename::WHITEOUT },
            Op::Symlink { target: "".into(), path: "l".into() },
            Op::SetXattr { path: "x".into(), name: "user.é".into(), len: 3, seed: 1, flags: 0x1 },
            Op::Utimes { path: "x".into(), atime: -5, mtime: 1 << 40 },
            Op::Remount,
        ];
        for op in ops {
            let line = op.to_string();
            assert!(!line.contains('\n'));
            assert_eq!(line.parse::<Op>().unwrap(), op, "{line}");
        }
    }
}
