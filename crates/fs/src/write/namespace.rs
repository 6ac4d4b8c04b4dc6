//! Namespace operations: create (files, directories, links, devices,
//! tmpfiles), link, unlink, rmdir, rename. Each runs under the write lock and
//! leaves every structure consistent at its end.

use super::iflags::{self, refuse_if};
use super::ops::touch;
use super::WriteState;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::dir::ftype;
use ondisk::inode::{flags, mode, Inode, I_BLOCK_SIZE, ROOT_INO};
use ondisk::superblock::feature;

/// What `create` makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateKind {
    File,
    Dir,
    Symlink(Vec<u8>),
    Fifo,
    Socket,
    Char(u32),
    Block(u32),
}

impl CreateKind {
    fn type_bits(&self) -> u16 {
        match self {
            CreateKind::File => mode::S_IFREG,
            CreateKind::Dir => mode::S_IFDIR,
            CreateKind::Symlink(_) => mode::S_IFLNK,
            CreateKind::Fifo => mode::S_IFIFO,
            CreateKind::Socket => mode::S_IFSOCK,
            CreateKind::Char(_) => mode::S_IFCHR,
            CreateKind::Block(_) => mode::S_IFBLK,
        }
    }
}

/// Directory-entry file type of an inode mode.
pub fn dirent_type(m: u16) -> u8 {
    match m & mode::S_IFMT {
        mode::S_IFREG => ftype::REG,
        mode::S_IFDIR => ftype::DIR,
        mode::S_IFLNK => ftype::SYMLINK,
        mode::S_IFCHR => ftype::CHR,
        mode::S_IFBLK => ftype::BLK,
        mode::S_IFIFO => ftype::FIFO,
        mode::S_IFSOCK => ftype::SOCK,
        _ => ftype::UNKNOWN,
    }
}

/// Link count at which a directory's count stops meaning anything (dir_nlink).
const DIR_NLINK_MAX: u16 = 65000;
const LINK_MAX: u16 = 65000;

impl Volume {
    pub(super) fn dir_inode(&self, ino: u32) -> Result<Inode> {
        let d = self.inode(ino)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(d)
    }

    pub(super) fn check_new_name(&self, dir: &Inode, name: &[u8]) -> Result<()> {
        if name.len() > ondisk::dir::MAX_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
            return Err(FsError::Invalid("bad file name".into()));
        }
        if dir.links_count() == 0 {
            return Err(FsError::NotFound); // the directory was removed
        }
        if self.name_exists(dir, name)? {
            return Err(FsError::Exists);
        }
        Ok(())
    }

    pub(super) fn inc_dir_links(&self, dir: &mut Inode) {
        let n = dir.base.links_count;
        // With dir_nlink, a directory past the limit keeps 1: "many".
        dir.base.links_count = if n == 1 || n >= DIR_NLINK_MAX { 1 } else { n + 1 };
    }

    pub(super) fn dec_dir_links(&self, dir: &mut Inode) {
        let n = dir.base.links_count;
        if n > 2 {
            dir.base.links_count = n - 1;
        }
    }

    /// Create `name` in directory `parent` with exactly the permission bits
    /// `perm` (no umask; a default ACL of the directory still applies).
    pub fn create(&self, parent: u32, name: &[u8], kind: CreateKind, perm: u16, uid: u32, gid: u32) -> Result<Inode> {
        self.create_masked(parent, name, kind, perm, 0, uid, gid)
    }

    /// Create `name` as open(2)/mkdir(2)/mknod(2) do: `perm` as the caller
    /// asked, `umask` applied unless the directory has a default ACL, which
    /// is inherited instead (in the same operation).
    #[allow(clippy::too_many_arguments)]
    pub fn create_masked(
        &self,
        parent: u32,
        name: &[u8],
        kind: CreateKind,
        perm: u16,
        umask: u16,
        uid: u32,
        gid: u32,
    ) -> Result<Inode> {
        self.atomic(|ws| self.create_in(ws, parent, name, &kind, perm, umask, uid, gid))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_in(
        &self,
        ws: &mut WriteState,
        parent: u32,
        name: &[u8],
        kind: &CreateKind,
        perm: u16,
        umask: u16,
        uid: u32,
        gid: u32,
    ) -> Result<Inode> {
        let mut dir = self.dir_inode(parent)?;
        refuse_if(&dir, flags::IMMUTABLE)?;
        self.check_new_name(&dir, name)?;
        let is_dir = *kind == CreateKind::Dir;
        if is_dir && dir.links_count() >= DIR_NLINK_MAX && !self.sb.has_ro_compat(feature::ro_compat::DIR_NLINK) {
            return Err(FsError::TooManyLinks);
        }
        let (mode_bits, acls) = self.inherit_acls(&dir, kind.type_bits() | (perm & 0o7777), umask)?;
        let ino = self.alloc_inode(ws, parent, is_dir)?;
        let mut inode = self.new_inode(ino, mode_bits, uid, gid);
        inode.insert_flags(iflags::inherited(dir.base.flags, mode_bits));
        match kind {
            CreateKind::File => self.init_extent_root(&mut inode),
            CreateKind::Dir => {
                self.init_extent_root(&mut inode);
                inode.base.links_count = 2;
                let runs = self.ensure_mapped(ws, &mut inode, 0, 1)?;
                let block = self.init_dir_block(&inode, parent);
                self.install(ws, runs[0].1, block);
                self.kb_change(
                    &mut ws.kb_changes,
                    crate::stepahead::KbChange::NewDir { dir: ino, parent, pblk: runs[0].1 },
                );
                inode.set_size(u64::from(self.block_size()));
            }
            CreateKind::Symlink(target) => {
                if target.is_empty() || target.len() >= self.block_size() as usize {
                    self.free_inode(ws, ino, false)?;
                    return Err(FsError::NameTooLong);
                }
                if target.len() < I_BLOCK_SIZE {
                    inode.base.block[..target.len()].copy_from_slice(target);
                } else {
                    self.init_extent_root(&mut inode);
                    let runs = self.ensure_mapped(ws, &mut inode, 0, 1)?;
                    let mut data = self.fresh_block();
                    data[..target.len()].copy_from_slice(target);
                    self.write_data(ino, 0, runs[0].1, &data)?;
                }
                inode.set_size(target.len() as u64);
            }
            CreateKind::Char(rdev) | CreateKind::Block(rdev) => inode.set_rdev(*rdev),
            CreateKind::Fifo | CreateKind::Socket => {}
        }
        if acls.is_empty() {
            self.write_inode(ws, &inode)?;
        } else {
            self.store_xattrs(ws, &mut inode, acls)?;
        }
        self.add_entry(ws, &mut dir, name, ino, dirent_type(inode.base.mode))?;
        if is_dir {
            self.inc_dir_links(&mut dir);
        }
        touch(&mut dir, true);
        self.write_inode(ws, &dir)?;
        Ok(inode)
    }

    /// An open file with no name (O_TMPFILE) in `parent`'s place: owner,
    /// flags and default ACLs as a file created there, no links, on the orphan
    /// list from the start so that a crash or the last close frees it, unless
    /// `link` gives it a name first. The caller records it as open.
    pub fn create_tmpfile(&self, parent: u32, perm: u16, umask: u16, uid: u32, gid: u32) -> Result<Inode> {
        self.atomic(|ws| {
            let dir = self.dir_inode(parent)?;
            refuse_if(&dir, flags::IMMUTABLE)?;
            let (mode_bits, acls) = self.inherit_acls(&dir, mode::S_IFREG | (perm & 0o7777), umask)?;
            let ino = self.alloc_inode(ws, parent, false)?;
            let mut inode = self.new_inode(ino, mode_bits, uid, gid);
            inode.insert_flags(iflags::inherited(dir.base.flags, mode_bits));
            self.init_extent_root(&mut inode);
            inode.base.links_count = 0;
            inode.base.dtime = ws.sb.f.last_orphan;
            ws.sb.f.last_orphan = ino;
            // Freed by its last close (`unhold`), which the caller's hold precedes.
            self.writer.open_files.lock().orphans.insert(ino);
            if acls.is_empty() {
                self.write_inode(ws, &inode)?;
            } else {
                self.store_xattrs(ws, &mut inode, acls)?;
            }
            Ok(inode)
        })
    }

    /// Hard link: a new name for inode `ino` in `parent`. A file without
    /// names (an O_TMPFILE file) leaves the orphan list with its first name.
    pub fn link(&self, ino: u32, parent: u32, name: &[u8]) -> Result<Inode> {
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            if inode.is_dir() {
                return Err(FsError::NotPermitted);
            }
            if inode.links_count() == 0 {
                if !self.take_off_orphan_list(ws, ino)? {
                    return Err(FsError::NotFound);
                }
                inode = self.inode(ino)?;
                inode.base.dtime = 0;
            }
            refuse_if(&inode, flags::IMMUTABLE | flags::APPEND)?;
            if inode.links_count() >= LINK_MAX {
                return Err(FsError::TooManyLinks);
            }
            let mut dir = self.dir_inode(parent)?;
            refuse_if(&dir, flags::IMMUTABLE)?;
            self.check_new_name(&dir, name)?;
            self.add_entry(ws, &mut dir, name, ino, dirent_type(inode.base.mode))?;
            inode.base.links_count += 1;
            touch(&mut inode, false);
            self.write_inode(ws, &inode)?;
            touch(&mut dir, true);
            self.write_inode(ws, &dir)?;
            Ok(inode)
        })
    }

    /// Remove a non-directory name.
    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.atomic(|ws| {
            let mut dir = self.dir_inode(parent)?;
            let (ino, _) = self.lookup(&dir, name)?.ok_or(FsError::NotFound)?;
            let mut inode = self.inode(ino)?;
            if inode.is_dir() {
                return Err(FsError::IsDir);
            }
            refuse_if(&dir, flags::IMMUTABLE | flags::APPEND)?;
            refuse_if(&inode, flags::IMMUTABLE | flags::APPEND)?;
            self.remove_entry(ws, &mut dir, name)?;
            touch(&mut dir, true);
            self.write_inode(ws, &dir)?;
            inode.base.links_count = inode.base.links_count.saturating_sub(1);
            touch(&mut inode, false);
            self.drop_if_unlinked(ws, inode)
        })
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.atomic(|ws| {
            if name == b"." {
                return Err(FsError::Invalid("rmdir of .".into()));
            }
            if name == b".." {
                return Err(FsError::NotEmpty);
            }
            let mut dir = self.dir_inode(parent)?;
            let (ino, _) = self.lookup(&dir, name)?.ok_or(FsError::NotFound)?;
            let mut inode = self.inode(ino)?;
            if !inode.is_dir() {
                return Err(FsError::NotDir);
            }
            refuse_if(&dir, flags::IMMUTABLE | flags::APPEND)?;
            refuse_if(&inode, flags::IMMUTABLE | flags::APPEND)?;
            if !self.dir_is_empty(&inode)? {
                return Err(FsError::NotEmpty);
            }
            self.remove_entry(ws, &mut dir, name)?;
            self.dec_dir_links(&mut dir);
            touch(&mut dir, true);
            self.write_inode(ws, &dir)?;
            inode.base.links_count = 0;
            touch(&mut inode, false);
            self.drop_if_unlinked(ws, inode)
        })
    }

    /// Whether `ancestor` is `dir` or one of its ancestors (walking "..").
    pub(super) fn is_ancestor(&self, ancestor: u32, dir: u32) -> Result<bool> {
        let mut cur = dir;
        for _ in 0..65536 {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == ROOT_INO {
                return Ok(false);
            }
            let d = self.dir_inode(cur)?;
            cur = self.lookup(&d, b"..")?.ok_or(FsError::NotFound)?.0;
        }
        Err(FsError::Loop)
    }

    /// rename(2), with RENAME_NOREPLACE and RENAME_EXCHANGE.
    pub fn rename(
        &self,
        parent: u32,
        name: &[u8],
        newparent: u32,
        newname: &[u8],
        noreplace: bool,
        exchange: bool,
    ) -> Result<()> {
        self.write_back_before_replace(parent, name, newparent, newname)?;
        self.atomic(|ws| {
            let how = if exchange { RenameHow::Exchange } else { RenameHow::Move };
            let replaced = self.rename_in(ws, parent, name, newparent, newname, noreplace, how)?;
            self.drop_replaced(ws, replaced)
        })
    }

    /// The inode a rename replaced, once the rename is whole: freeing it may
    /// commit partway (`split`), and every cut must be a whole state.
    pub(super) fn drop_replaced(&self, ws: &mut WriteState, replaced: Option<Inode>) -> Result<()> {
        replaced.map_or(Ok(()), |victim| self.drop_if_unlinked(ws, victim))
    }

    /// Returns the inode whose name the rename took over, for
    /// [`Volume::drop_replaced`] to write or free.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rename_in(
        &self,
        ws: &mut WriteState,
        parent: u32,
        name: &[u8],
        newparent: u32,
        newname: &[u8],
        noreplace: bool,
        how: RenameHow,
    ) -> Result<Option<Inode>> {
        if newname.len() > ondisk::dir::MAX_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        for n in [name, newname] {
            if n == b"." || n == b".." || n.is_empty() {
                return Err(FsError::Invalid("cannot rename . or ..".into()));
            }
        }
        let mut src_dir = self.dir_inode(parent)?;
        let (src_ino, _) = self.lookup(&src_dir, name)?.ok_or(FsError::NotFound)?;
        let mut src = self.inode(src_ino)?;
        // As the VFS's may_delete/may_create: the source leaves its directory,
        // the target appears in (or replaces a name of) the other.
        refuse_if(&src_dir, flags::IMMUTABLE | flags::APPEND)?;
        refuse_if(&src, flags::IMMUTABLE | flags::APPEND)?;
        self.convert_inline_dir(ws, &mut src_dir)?; // every rename changes it: convert before dst_dir may copy it
        let mut dst_dir = if newparent == parent { src_dir.clone() } else { self.dir_inode(newparent)? };
        let dst = self.lookup(&dst_dir, newname)?;
        refuse_if(&dst_dir, flags::IMMUTABLE)?;
        if let Some((dst_ino, _)) = dst {
            if dst_ino != src_ino {
                refuse_if(&dst_dir, flags::APPEND)?;
                refuse_if(&self.inode(dst_ino)?, flags::IMMUTABLE | flags::APPEND)?;
            }
        }
        if src.is_dir() && newparent != parent && self.is_ancestor(src_ino, newparent)? {
            return Err(FsError::InvalidMove);
        }
        if how == RenameHow::Exchange {
            let (dst_ino, _) = dst.ok_or(FsError::NotFound)?;
            let mut other = self.inode(dst_ino)?;
            if other.is_dir() && newparent != parent && self.is_ancestor(dst_ino, parent)? {
                return Err(FsError::InvalidMove);
            }
            self.retarget_entry(ws, &mut src_dir, name, dst_ino, dirent_type(other.base.mode))?;
            self.retarget_entry(ws, &mut dst_dir, newname, src_ino, dirent_type(src.base.mode))?;
            if newparent != parent {
                if src.is_dir() {
                    self.retarget_entry(ws, &mut src, b"..", newparent, ftype::DIR)?;
                }
                if other.is_dir() {
                    self.retarget_entry(ws, &mut other, b"..", parent, ftype::DIR)?;
                }
                if src.is_dir() != other.is_dir() {
                    let (into_dst, into_src) =
                        if src.is_dir() { (&mut dst_dir, &mut src_dir) } else { (&mut src_dir, &mut dst_dir) };
                    self.inc_dir_links(into_dst);
                    self.dec_dir_links(into_src);
                }
            }
            touch(&mut src, false);
            touch(&mut other, false);
            self.write_inode(ws, &src)?;
            self.write_inode(ws, &other)?;
            return self.finish_rename(ws, parent, newparent, src_dir, dst_dir).map(|()| None);
        }
        let mut replaced = None;
        if let Some((dst_ino, _)) = dst {
            if noreplace {
                return Err(FsError::Exists);
            }
            if dst_ino == src_ino {
                return Ok(None); // two names of one inode: nothing to do
            }
            let mut victim = self.inode(dst_ino)?;
            match (src.is_dir(), victim.is_dir()) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                // The kernel's ext4 allocates the whiteout before it looks
                // into the target directory: out of inodes wins.
                (true, true) if how == RenameHow::Whiteout && !self.inode_available() => {
                    ws.out_of_inodes = true;
                    return Err(FsError::NoSpace);
                }
                (true, true) if !self.dir_is_empty(&victim)? => return Err(FsError::NotEmpty),
                _ => {}
            }
            self.retarget_entry(ws, &mut dst_dir, newname, src_ino, dirent_type(src.base.mode))?;
            if victim.is_dir() {
                victim.base.links_count = 0;
                self.dec_dir_links(&mut dst_dir);
            } else {
                victim.base.links_count = victim.base.links_count.saturating_sub(1);
            }
            touch(&mut victim, false);
            replaced = Some(victim);
        } else {
            self.add_entry(ws, &mut dst_dir, newname, src_ino, dirent_type(src.base.mode))?;
        }
        if newparent == parent {
            // Same directory: the entry add above may have changed the dir inode (size).
            src_dir = dst_dir.clone();
        }
        self.remove_entry(ws, &mut src_dir, name)?;
        if src.is_dir() && newparent != parent {
            self.retarget_entry(ws, &mut src, b"..", newparent, ftype::DIR)?;
            self.dec_dir_links(&mut src_dir);
            self.inc_dir_links(&mut dst_dir);
        }
        touch(&mut src, false);
        self.write_inode(ws, &src)?;
        self.finish_rename(ws, parent, newparent, src_dir, dst_dir)?;
        Ok(replaced)
    }

    /// rename(2) with RENAME_WHITEOUT: the source name is left holding a
    /// whiteout (a character device 0:0 owned by `uid`:`gid`, what overlayfs
    /// reads as "deleted"), in the same transaction.
    #[allow(clippy::too_many_arguments)]
    pub fn rename_whiteout(
        &self,
        parent: u32,
        name: &[u8],
        newparent: u32,
        newname: &[u8],
        noreplace: bool,
        uid: u32,
        gid: u32,
    ) -> Result<()> {
        self.atomic(|ws| {
            let replaced = self.rename_in(ws, parent, name, newparent, newname, noreplace, RenameHow::Whiteout)?;
            self.create_in(ws, parent, name, &CreateKind::Char(0), 0, 0, uid, gid)?;
            self.drop_replaced(ws, replaced)
        })
    }

    pub(super) fn finish_rename(
        &self,
        ws: &mut WriteState,
        parent: u32,
        newparent: u32,
        mut src_dir: Inode,
        mut dst_dir: Inode,
    ) -> Result<()> {
        touch(&mut dst_dir, true);
        if parent == newparent {
            return self.write_inode(ws, &dst_dir);
        }
        touch(&mut src_dir, true);
        self.write_inode(ws, &src_dir)?;
        self.write_inode(ws, &dst_dir)
    }
}

/// What a rename leaves behind: nothing, the target's old inode at the
/// source name (RENAME_EXCHANGE), or a whiteout (RENAME_WHITEOUT, added by
/// the caller once the rename is done).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum RenameHow {
    Move,
    Exchange,
    Whiteout,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirent_types() {
        assert_eq!(dirent_type(mode::S_IFDIR | 0o755), ftype::DIR);
        assert_eq!(dirent_type(mode::S_IFLNK), ftype::SYMLINK);
        assert_eq!(dirent_type(0), ftype::UNKNOWN);
    }
}
