//! Setting and removing extended attributes. The whole set is re-laid out on
//! every change (few attributes per inode): in-inode first, as the kernel
//! prefers, the rest in one external block; a block shared with other inodes
//! is copied before it is changed.

use super::{iflags, now, WriteState};
use crate::acl::Acl;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::inode::{flags, Inode, GOOD_OLD_INODE_SIZE};
use ondisk::xattr::{self, Xattr};
use ondisk::Location;

/// setxattr(2) flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrMode {
    /// Create or replace.
    Any,
    /// XATTR_CREATE: fail if it exists.
    Create,
    /// XATTR_REPLACE: fail unless it exists.
    Replace,
}

/// Name indexes of the POSIX ACL attributes.
const ACL_ACCESS: u8 = 2;
const ACL_DEFAULT: u8 = 3;

/// Name index and suffix of a user-visible attribute name.
fn split_name(name: &[u8]) -> Result<(u8, Vec<u8>)> {
    let (idx, prefix): (u8, &[u8]) = if name.starts_with(b"user.") {
        (1, b"user.")
    } else if name.starts_with(b"trusted.") {
        (4, b"trusted.")
    } else if name.starts_with(b"security.") {
        (6, b"security.")
    } else if name == b"system.posix_acl_access" {
        (ACL_ACCESS, name)
    } else if name == b"system.posix_acl_default" {
        (ACL_DEFAULT, name)
    } else {
        return Err(FsError::Unsupported(format!("attribute namespace of {:?}", String::from_utf8_lossy(name))));
    };
    let suffix = name[prefix.len()..].to_vec();
    if suffix.is_empty() && prefix != name || suffix.len() > 255 {
        return Err(FsError::Invalid("attribute name".into()));
    }
    Ok((idx, suffix))
}

impl Volume {
    /// Every attribute of the inode, including internal ones (system.data).
    pub(super) fn all_xattrs(&self, inode: &Inode) -> Result<Vec<Xattr>> {
        let mut all = xattr::parse_inode_area(inode.inline_xattr_area(), Location::Inode(u64::from(inode.ino)))?;
        let blk = inode.file_acl();
        if blk != 0 {
            self.check_owned(blk, 1, 0, "xattr block")?;
            let seed = self.sb.has_metadata_csum().then(|| self.sb.csum_seed());
            all.extend(xattr::parse_block(&self.meta(blk)?, blk, seed)?);
        }
        if all.iter().any(|x| x.value_inum != 0) {
            return Err(FsError::Unsupported("xattr values stored in inodes (ea_inode)".into()));
        }
        Ok(all)
    }

    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        self.set_xattr_by(ino, name, value, mode, &|_| true)
    }

    /// setxattr(2). An access ACL sets the mode's permission bits to what it
    /// stands for and is not stored when the mode says it all (the kernel's
    /// posix_acl_update_mode, as ext4_set_acl applies it); it also clears the
    /// set-group-ID bit unless `may_keep_sgid(file's gid)` (the caller is in
    /// that group or holds CAP_FSETID). A default ACL is for directories only.
    pub fn set_xattr_by(
        &self,
        ino: u32,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
        may_keep_sgid: &dyn Fn(u32) -> bool,
    ) -> Result<()> {
        let (idx, suffix) = split_name(name)?;
        let acl = if idx == ACL_ACCESS || idx == ACL_DEFAULT { Some(Acl::from_xattr(value)?) } else { None };
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            iflags::refuse_if(&inode, flags::IMMUTABLE | flags::APPEND)?;
            let mut all = self.all_xattrs(&inode)?;
            let pos = all.iter().position(|x| x.name_index == idx && x.suffix == suffix);
            match (pos, mode) {
                (Some(_), XattrMode::Create) => return Err(FsError::Exists),
                (None, XattrMode::Replace) => return Err(FsError::NoXattr),
                _ => {}
            }
            let mut value = value.to_vec();
            if let Some(acl) = &acl {
                if idx == ACL_DEFAULT && !inode.is_dir() {
                    return Err(FsError::AccessDenied);
                }
                if idx == ACL_ACCESS {
                    let (perms, exact) = acl.equiv_mode();
                    let mut m = (inode.base.mode & !0o777) | perms;
                    if !may_keep_sgid(inode.gid()) {
                        m &= !ondisk::inode::mode::S_ISGID;
                    }
                    inode.base.mode = m;
                    if exact {
                        all.retain(|x| x.name_index != ACL_ACCESS);
                        return self.store_xattrs(ws, &mut inode, all);
                    }
                }
                value = xattr::acl_xattr_to_disk(&acl.to_xattr()).map_err(|_| FsError::Invalid("ACL".into()))?;
            }
            match pos {
                Some(i) => all[i].value = value,
                None => all.push(Xattr { name_index: idx, suffix: suffix.clone(), value, value_inum: 0 }),
            }
            self.store_xattrs(ws, &mut inode, all)
        })
    }

    /// removexattr(2). Removing an ACL that is not there succeeds, as on
    /// ext4 (the VFS turns it into "set no ACL").
    pub fn remove_xattr(&self, ino: u32, name: &[u8]) -> Result<()> {
        let (idx, suffix) = split_name(name)?;
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            iflags::refuse_if(&inode, flags::IMMUTABLE | flags::APPEND)?;
            let mut all = self.all_xattrs(&inode)?;
            let before = all.len();
            all.retain(|x| !(x.name_index == idx && x.suffix == suffix));
            if all.len() == before {
                return if idx == ACL_ACCESS || idx == ACL_DEFAULT { Ok(()) } else { Err(FsError::NoXattr) };
            }
            self.store_xattrs(ws, &mut inode, all)
        })
    }

    /// The inode's ACL of one kind (ACL_ACCESS or ACL_DEFAULT), if it has one.
    pub(super) fn stored_acl(&self, inode: &Inode, idx: u8) -> Result<Option<Acl>> {
        match self.all_xattrs(inode)?.into_iter().find(|x| x.name_index == idx) {
            None => Ok(None),
            Some(x) => {
                let at = Location::Inode(u64::from(inode.ino));
                let vfs = xattr::acl_disk_to_xattr(&x.value).map_err(|e| e.at(at))?;
                Acl::from_xattr(&vfs).map(Some)
            }
        }
    }

    /// chmod of an inode with an access ACL: the ACL follows the new mode
    /// (posix_acl_chmod), stored with the inode (written by the caller).
    pub(super) fn chmod_acl(&self, ws: &mut WriteState, inode: &mut Inode) -> Result<()> {
        let Some(mut acl) = self.stored_acl(inode, ACL_ACCESS)? else { return Ok(()) };
        acl.chmod(inode.base.mode);
        let value = xattr::acl_xattr_to_disk(&acl.to_xattr()).map_err(|_| FsError::Invalid("ACL".into()))?;
        let mut all = self.all_xattrs(inode)?;
        for x in all.iter_mut().filter(|x| x.name_index == ACL_ACCESS) {
            x.value = value.clone();
        }
        self.store_xattrs(ws, inode, all)
    }

    /// What a new inode of `mode` gets from its directory's default ACL
    /// (posix_acl_create): the final mode, and the attributes to store with
    /// it (an access ACL when it says more than the mode; for a directory, the
    /// default ACL too). Without a default ACL the umask applies instead.
    pub(super) fn inherit_acls(&self, dir: &Inode, mode: u16, umask: u16) -> Result<(u16, Vec<Xattr>)> {
        let is_link = mode & ondisk::inode::mode::S_IFMT == ondisk::inode::mode::S_IFLNK;
        let default = if is_link { None } else { self.stored_acl(dir, ACL_DEFAULT)? };
        let Some(default) = default else { return Ok((mode & !(umask & 0o777), Vec::new())) };
        let mut access = default.clone();
        let (mode, store) = access.create_masq(mode);
        let disk = |a: &Acl| xattr::acl_xattr_to_disk(&a.to_xattr()).map_err(|_| FsError::Invalid("ACL".into()));
        let mut out = Vec::new();
        if store {
            out.push(Xattr { name_index: ACL_ACCESS, suffix: Vec::new(), value: disk(&access)?, value_inum: 0 });
        }
        if mode & ondisk::inode::mode::S_IFMT == ondisk::inode::mode::S_IFDIR {
            out.push(Xattr { name_index: ACL_DEFAULT, suffix: Vec::new(), value: disk(&default)?, value_inum: 0 });
        }
        Ok((mode, out))
    }

    /// Lay out `all` in the inode and (if needed) a block, write both, update the inode.
    pub(super) fn store_xattrs(&self, ws: &mut WriteState, inode: &mut Inode, mut all: Vec<Xattr>) -> Result<()> {
        xattr::sort_entries(&mut all);
        let area_start = GOOD_OLD_INODE_SIZE + inode.extra.as_ref().map_or(0, |e| usize::from(e.extra_isize));
        let area_len = inode.raw.len().saturating_sub(area_start);
        // system.data (inline data) must stay in the inode; of the rest, the
        // inode takes the subset that fills it most (a subset sum over its few
        // hundred bytes), so the block gets the least and every set that fits
        // in inode + block in any placement fits here. The kernel places each
        // entry once, where it fits at the time, and can therefore hold sets
        // that a fixed rule (first fit, a prefix) refuses with ENOSPC. Both
        // lists stay sorted: subsequences of `all`.
        let mut used = if area_len >= 8 { 8 } else { area_len }; // magic + terminator
        let (mut in_inode, rest): (Vec<Xattr>, Vec<Xattr>) = all.into_iter().partition(|x| x.name_index == 7);
        used += in_inode.iter().map(xattr::footprint).sum::<usize>();
        let take = fill_most(&rest.iter().map(xattr::footprint).collect::<Vec<_>>(), area_len.saturating_sub(used));
        let mut in_block = Vec::new();
        for (x, t) in rest.into_iter().zip(take) {
            if t {
                in_inode.push(x);
            } else {
                in_block.push(x);
            }
        }
        let area = xattr::build_inode_area(&in_inode, area_len).ok_or(FsError::NoSpace)?;
        inode.raw[area_start..].copy_from_slice(&area);

        let old = inode.file_acl();
        let bs = self.block_size() as usize;
        let seed = self.sb.has_metadata_csum().then(|| self.sb.csum_seed());
        if in_block.is_empty() {
            if old != 0 {
                self.release_xattr_block(ws, old)?;
                self.adjust_blocks(inode, -1);
                set_file_acl(inode, 0);
            }
        } else {
            // Check the fit before allocating anything: a failure must change nothing.
            if xattr::build_block(&in_block, bs, 0, None).is_none() {
                return Err(FsError::NoSpace);
            }
            let shared = old != 0 && ondisk::bytes::le32(&self.meta(old)?, 4) > 1;
            let blk = if old != 0 && !shared {
                old
            } else {
                if shared {
                    self.release_xattr_block(ws, old)?; // drop our reference; the copy is ours alone
                } else {
                    self.adjust_blocks(inode, 1);
                }
                let goal = self.inode_group_first_block(inode.ino);
                let (b, _) = self.alloc_blocks(ws, goal, 1)?;
                b
            };
            let data = xattr::build_block(&in_block, bs, blk, seed).ok_or(FsError::NoSpace)?;
            self.install(ws, blk, data);
            set_file_acl(inode, blk);
        }
        inode.set_time(ondisk::inode::TimeField::Change, now());
        self.write_inode(ws, inode)
    }
}

fn set_file_acl(inode: &mut Inode, blk: u64) {
    inode.base.file_acl_lo = blk as u32;
    inode.base.file_acl_hi = (blk >> 32) as u16;
}

/// Name index of `security.*` attributes; the file capability is `security.capability`.
const SECURITY: u8 = 6;

impl Volume {
    /// What a write, a truncation or a change of owner takes away from a file,
    /// as the VFS does (file_remove_privs, notify_change's ATTR_KILL_*), which
    /// FUSE_HANDLE_KILLPRIV_V2 leaves to the file system: the file capability
    /// always; with `suidgid`, set-user-ID, and set-group-ID when the group may
    /// execute (without group execute the bit marks mandatory locking and stays).
    /// Directories, and immutable or append-only inodes, are left alone.
    /// Returns whether the inode changed.
    pub fn drop_privileges(&self, ino: u32, suidgid: bool) -> Result<bool> {
        use ondisk::inode::mode::{S_ISGID, S_ISUID};
        let bits = |inode: &Inode| {
            let m = inode.base.mode;
            let sgid = if m & 0o010 != 0 { S_ISGID } else { 0 };
            if suidgid {
                m & (S_ISUID | sgid)
            } else {
                0
            }
        };
        let has_cap = |all: &[Xattr]| all.iter().any(|x| x.name_index == SECURITY && x.suffix == b"capability");
        // A look without the write lock first: most writes have nothing to drop.
        let inode = self.inode(ino)?;
        if inode.is_dir() || inode.has_flag(flags::IMMUTABLE | flags::APPEND) {
            return Ok(false);
        }
        if bits(&inode) == 0 && !has_cap(&self.all_xattrs(&inode)?) {
            return Ok(false);
        }
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            let kill = bits(&inode);
            let mut all = self.all_xattrs(&inode)?;
            if kill == 0 && !has_cap(&all) {
                return Ok(false);
            }
            inode.base.mode &= !kill;
            all.retain(|x| !(x.name_index == SECURITY && x.suffix == b"capability"));
            super::ops::touch_ctime(&mut inode);
            self.store_xattrs(ws, &mut inode, all)?;
            Ok(true)
        })
    }
}

/// Which of `sizes` to take so that their sum is the largest one <= `cap`
/// (0/1 knapsack by sums; `cap` is an inode's xattr area, under 1 KiB).
fn fill_most(sizes: &[usize], cap: usize) -> Vec<bool> {
    // reach[i][c]: some subset of the first i sizes sums to c.
    let mut reach = vec![vec![false; cap + 1]; sizes.len() + 1];
    reach[0][0] = true;
    for (i, &f) in sizes.iter().enumerate() {
        for c in 0..=cap {
            reach[i + 1][c] = reach[i][c] || (c >= f && reach[i][c - f]);
        }
    }
    let mut c = (0..=cap).rev().find(|&c| reach[sizes.len()][c]).unwrap_or(0);
    let mut take = vec![false; sizes.len()];
    for i in (0..sizes.len()).rev() {
        if !reach[i][c] {
            take[i] = true;
            c -= sizes[i];
        }
    }
    take
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_most_finds_the_fullest_subset() {
        // First fit in order would take 60 and stop at 60 of 92; 40 + 52 = 92.
        assert_eq!(fill_most(&[60, 40, 52], 92), vec![false, true, true]);
        assert_eq!(fill_most(&[100], 92), vec![false]);
        assert_eq!(fill_most(&[], 92), Vec::<bool>::new());
        assert_eq!(fill_most(&[8, 8], 0), vec![false, false]);
    }
}
