//! Extended attributes as user space sees them: in-inode ones first, then the
//! external block; ACLs converted to the VFS format; system.data hidden.

use crate::acl::{self, Acl, Cred, Owner};
use crate::error::{FsError, Result};
use crate::read_core::ReadCore;
use ondisk::inode::Inode;
use ondisk::xattr::{self, Xattr};
use ondisk::Location;

/// Name indexes of POSIX ACLs, whose values need converting.
const ACL_ACCESS: u8 = 2;
const ACL_DEFAULT: u8 = 3;
const SYSTEM: u8 = 7;

impl ReadCore {
    fn raw_xattrs(&self, inode: &Inode) -> Result<Vec<Xattr>> {
        let mut all = xattr::parse_inode_area(inode.inline_xattr_area(), Location::Inode(u64::from(inode.ino)))?;
        let blk = inode.file_acl();
        if blk != 0 {
            self.check_owned(blk, 1, 0, "xattr block")?;
            let data = self.meta(blk)?;
            let seed = self.sb.has_metadata_csum().then(|| self.sb.csum_seed());
            all.extend(xattr::parse_block(&data, blk, seed)?);
        }
        if all.iter().any(|x| x.value_inum != 0) {
            return Err(FsError::Unsupported("xattr values stored in inodes (ea_inode)".into()));
        }
        Ok(all)
    }

    /// All visible attributes (name, value). `trusted.*` only for privileged callers.
    pub fn xattrs(&self, inode: &Inode, privileged: bool) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for x in self.raw_xattrs(inode)? {
            if x.name_index == SYSTEM || (x.name_index == 4 && !privileged) {
                continue; // system.data (inline data) and friends are internal
            }
            let Some(name) = x.full_name() else { continue };
            let value = match x.name_index {
                ACL_ACCESS | ACL_DEFAULT => {
                    xattr::acl_disk_to_xattr(&x.value).map_err(|e| e.at(Location::Inode(u64::from(inode.ino))))?
                }
                _ => x.value,
            };
            out.push((name, value));
        }
        Ok(out)
    }

    pub fn get_xattr(&self, inode: &Inode, name: &[u8], privileged: bool) -> Result<Vec<u8>> {
        self.xattrs(inode, privileged)?.into_iter().find(|(n, _)| n == name).map(|(_, v)| v).ok_or(FsError::NoXattr)
    }

    /// The inode's access ACL, if it has one.
    fn access_acl(&self, inode: &Inode) -> Result<Option<Acl>> {
        let at = Location::Inode(u64::from(inode.ino));
        match self.raw_xattrs(inode)?.into_iter().find(|x| x.name_index == ACL_ACCESS) {
            None => Ok(None),
            Some(x) => Acl::from_xattr(&xattr::acl_disk_to_xattr(&x.value).map_err(|e| e.at(at))?).map(Some),
        }
    }

    /// Whether `who` may `want` (`acl::MAY_*` bits) of `inode`, by its mode,
    /// owner, group and access ACL, as the kernel decides for one user and
    /// one group. An ACL that cannot be read refuses.
    pub fn permits(&self, inode: &Inode, who: Cred, want: u16) -> bool {
        let owner = Owner { mode: inode.base.mode, uid: inode.uid(), gid: inode.gid() };
        // Cases the ACL cannot change: no need to read it.
        if who.uid == 0 || who.uid == owner.uid || owner.mode & 0o070 == 0 {
            return acl::permits(owner, None, who, want);
        }
        match self.access_acl(inode) {
            Ok(a) => acl::permits(owner, a.as_ref(), who, want),
            Err(_) => false,
        }
    }

    /// Names as listxattr(2) returns them: each followed by a NUL.
    pub fn list_xattr(&self, inode: &Inode, privileged: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for (n, _) in self.xattrs(inode, privileged)? {
            out.extend_from_slice(&n);
            out.push(0);
        }
        Ok(out)
    }
}
