//! FUSE_IOCTL: the inode-flag ioctls. The kernel's VFS turns chattr's
//! FS_IOC_GETFLAGS/SETFLAGS (and xfs_io's FS_IOC_FSGETXATTR/FSSETXATTR) into
//! these requests on regular files and directories, after checking ownership
//! and CAP_LINUX_IMMUTABLE; other ioctls are not ours (ENOTTY).

use crate::caller::{Caller, CAP_LINUX_IMMUTABLE};
use crate::{errno, Ext4Fuse};
use fusewire::{Errno, Request};
use ondisk::inode::flags as fl;

/// Ioctl numbers without their size field (the kernel sends sizeof(int) for
/// the flag ioctls, which are declared with `long`): direction, type, number.
const fn no_size(cmd: u32) -> u32 {
    cmd & !(0x3fff << 16)
}
const GETFLAGS: u32 = no_size(0x8008_6601);
const SETFLAGS: u32 = no_size(0x4008_6602);
const FSGETXATTR: u32 = no_size(0x801c_581f);
const FSSETXATTR: u32 = no_size(0x401c_5820);
/// struct fsxattr: xflags, extsize, nextents, projid, cowextsize, 8 pad bytes.
const FSXATTR_SIZE: usize = 28;

/// FS_XFLAG_* <-> inode flag pairs (ext4_iflags_to_xflags).
const XFLAGS: [(u32, u32); 7] = [
    (0x0000_0008, fl::IMMUTABLE),
    (0x0000_0010, fl::APPEND),
    (0x0000_0020, fl::SYNC),
    (0x0000_0040, fl::NOATIME),
    (0x0000_0080, fl::NODUMP),
    (0x0000_0200, fl::PROJINHERIT),
    (0x0000_8000, fl::DAX),
];

fn to_xflags(flags: u32) -> u32 {
    XFLAGS.iter().filter(|(_, f)| flags & f != 0).map(|(x, _)| x).fold(0, |a, x| a | x)
}

/// Inode flags from `xflags`, the flags that have no xflag kept from `old`.
fn from_xflags(old: u32, xflags: u32) -> Result<u32, Errno> {
    let known = XFLAGS.iter().fold(0, |a, (x, _)| a | x);
    if xflags & !known != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    let covered = XFLAGS.iter().fold(0, |a, (_, f)| a | f);
    Ok(XFLAGS.iter().filter(|(x, _)| xflags & x != 0).fold(old & !covered, |a, (_, f)| a | f))
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, Errno> {
    data.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok_or(Errno::EINVAL)
}

impl Ext4Fuse {
    /// The ioctl's output data.
    pub(crate) fn flag_ioctl(&self, req: &Request, ino: u64, cmd: u32, in_data: &[u8]) -> Result<Vec<u8>, Errno> {
        let cmd = no_size(cmd);
        let inode = self.inode(ino)?;
        let current = self.vol.flags(&inode);
        let new = match cmd {
            GETFLAGS => return Ok(current.to_le_bytes().to_vec()),
            FSGETXATTR => {
                let mut out = vec![0u8; FSXATTR_SIZE];
                out[..4].copy_from_slice(&to_xflags(current).to_le_bytes());
                return Ok(out);
            }
            SETFLAGS => u32_at(in_data, 0)?,
            FSSETXATTR => {
                // Extent size hints, project ids and CoW hints are not kept.
                if in_data.len() < FSXATTR_SIZE || in_data[4..16].iter().chain(&in_data[16..20]).any(|&b| b != 0) {
                    return Err(Errno::EOPNOTSUPP);
                }
                from_xflags(current, u32_at(in_data, 0)?)?
            }
            _ => return Err(Errno::ENOTTY),
        };
        if self.vol.is_read_only() {
            return Err(Errno::EROFS);
        }
        let may = Caller::of(req).has_cap(CAP_LINUX_IMMUTABLE);
        let n = crate::ext4_ino(ino)?;
        self.vol.set_flags(n, new, may).map_err(|e| errno(&e))?;
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        assert_eq!(no_size(libc::FS_IOC_GETFLAGS as u32), GETFLAGS);
        assert_eq!(no_size(libc::FS_IOC_SETFLAGS as u32), SETFLAGS);
        // The 32-bit encoding (int-sized) is the same command.
        assert_eq!(no_size(0x8004_6601), GETFLAGS);
    }

    #[test]
    fn xflags_map_both_ways() {
        let f = fl::IMMUTABLE | fl::NOATIME | fl::EXTENTS;
        assert_eq!(to_xflags(f), 0x48);
        assert_eq!(from_xflags(f, 0x10).unwrap(), fl::APPEND | fl::EXTENTS, "unmapped flags are kept");
        assert!(from_xflags(0, 0x1).is_err(), "realtime has no ext4 meaning");
    }
}
