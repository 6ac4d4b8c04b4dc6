//! Namespace and file operations, as the VFS would call them. Each runs under
//! the write lock and leaves every structure (bitmaps, counts, checksums,
//! link counts, times) consistent at its end.

use super::iflags::{self, refuse_if};
use super::{now, Split, WriteState};
use crate::bmap::Mapping;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::dir::ftype;
use ondisk::extent::{ExtentHeader, ExtentNode};
use ondisk::inode::{flags, mode, Inode, InodeBase, InodeExtra, TimeField, Timestamp, GOOD_OLD_INODE_SIZE, I_BLOCK_SIZE, ROOT_INO};
use ondisk::superblock::feature;
use std::sync::atomic::{AtomicU32, Ordering};

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

/// Attribute changes (setattr); `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
    pub ctime: Option<Timestamp>,
    /// The times given are "now" (utimes with no times), which an
    /// append-only file allows; explicit times it refuses.
    pub times_now: bool,
}

/// Link count at which a directory's count stops meaning anything (dir_nlink).
const DIR_NLINK_MAX: u16 = 65000;
const LINK_MAX: u16 = 65000;

static GENERATION: AtomicU32 = AtomicU32::new(0);

fn next_generation() -> u32 {
    let t = now();
    GENERATION.fetch_add(0x9E37_79B9, Ordering::Relaxed) ^ (t.nsec.rotate_left(13) ^ t.sec as u32)
}

/// Set ctime to now (a change to the inode alone).
pub(super) fn touch_ctime(inode: &mut Inode) {
    inode.set_time(TimeField::Change, now());
}

fn touch(inode: &mut Inode, mtime: bool) {
    let t = now();
    inode.set_time(TimeField::Change, t);
    if mtime {
        inode.set_time(TimeField::Modify, t);
    }
}

/// What `fallocate` does to its range (FALLOC_FL_* modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Falloc {
    /// Mode 0: preallocate.
    Allocate,
    /// FALLOC_FL_PUNCH_HOLE.
    PunchHole,
    /// FALLOC_FL_ZERO_RANGE.
    ZeroRange,
}

/// How long a request waits for the write lock by spinning before it sleeps.
const WRITE_LOCK_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Take the write lock, spinning up to [`WRITE_LOCK_SPIN`] first. Operations
/// hold it for microseconds, mostly on the other CPU's queue thread; a waiter
/// that sleeps must be woken across CPUs, which on small VMs costs 50-100 us
/// (`perf bench sched pipe` across two vCPUs), far more than the wait.
fn lock_spinning(m: &parking_lot::Mutex<WriteState>) -> parking_lot::MutexGuard<'_, WriteState> {
    // Usually free: no clock read then.
    if let Some(g) = m.try_lock() {
        return g;
    }
    let start = std::time::Instant::now();
    loop {
        if let Some(g) = m.try_lock() {
            return g;
        }
        if start.elapsed() >= WRITE_LOCK_SPIN {
            return m.lock();
        }
        for _ in 0..32 {
            std::hint::spin_loop();
        }
    }
}

impl Volume {
    /// Take the write lock; first finish a commit the commit thread has
    /// ended, and start committing the running transaction if it has grown
    /// to `WriteState::commit_limit`.
    pub(crate) fn writer(&self) -> Result<super::WriteGuard<'_>> {
        let mut ws = self.write.as_ref().map(|m| super::WriteGuard::new(lock_spinning(m))).ok_or(FsError::ReadOnly)?;
        if ws.undo.is_some() {
            // An operation panicked halfway: its changes are in memory and must
            // never be committed (not even by the cleaner after a finished commit).
            ws.failed.get_or_insert_with(|| "an operation stopped halfway (panic)".into());
        }
        if ws.failed.is_some() {
            return Err(FsError::ReadOnly);
        }
        self.finish_commit_if_done(&mut ws)?;
        // Deferred frees add bitmap blocks at commit, changed groups their descriptor blocks: count them too.
        if (ws.running.len() + ws.deferred.len() + ws.dirty_groups.len()) as u64 >= ws.commit_limit {
            self.commit_soon(&mut ws)?;
        }
        Ok(ws)
    }

    /// A fresh in-memory inode record of the given mode.
    fn new_inode(&self, ino: u32, mode_bits: u16, uid: u32, gid: u32) -> Inode {
        let size = usize::from(self.sb.inode_size());
        let t = now();
        let base = InodeBase { mode: mode_bits, links_count: 1, generation: next_generation(), ..Default::default() };
        let extra = (size > GOOD_OLD_INODE_SIZE).then(|| {
            let want = if self.sb.f.want_extra_isize >= 32 { self.sb.f.want_extra_isize } else { 32 };
            InodeExtra { extra_isize: want.min((size - GOOD_OLD_INODE_SIZE) as u16), ..Default::default() }
        });
        let mut inode = Inode { ino, base, extra, raw: vec![0u8; size] };
        inode.set_uid(uid);
        inode.set_gid(gid);
        for f in [TimeField::Access, TimeField::Modify, TimeField::Change, TimeField::Birth] {
            inode.set_time(f, t);
        }
        inode
    }

    pub(super) fn init_extent_root(&self, inode: &mut Inode) {
        if self.sb.has_incompat(feature::incompat::EXTENTS) {
            inode.insert_flags(flags::EXTENTS);
            let mut root = [0u8; I_BLOCK_SIZE];
            ExtentNode::Leaf(ExtentHeader { entries: 0, max: 4, depth: 0, generation: 0 }, vec![]).write(&mut root);
            inode.base.block = root;
        }
    }

    fn dir_inode(&self, ino: u32) -> Result<Inode> {
        let d = self.inode(ino)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(d)
    }

    fn check_new_name(&self, dir: &Inode, name: &[u8]) -> Result<()> {
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

    fn inc_dir_links(&self, dir: &mut Inode) {
        let n = dir.base.links_count;
        // With dir_nlink, a directory past the limit keeps 1: "many".
        dir.base.links_count = if n == 1 || n >= DIR_NLINK_MAX { 1 } else { n + 1 };
    }

    fn dec_dir_links(&self, dir: &mut Inode) {
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
    pub fn create_masked(&self, parent: u32, name: &[u8], kind: CreateKind, perm: u16, umask: u16, uid: u32, gid: u32) -> Result<Inode> {
        self.atomic(|ws| self.create_in(ws, parent, name, &kind, perm, umask, uid, gid))
    }

    #[allow(clippy::too_many_arguments)]
    fn create_in(&self, ws: &mut WriteState, parent: u32, name: &[u8], kind: &CreateKind, perm: u16, umask: u16, uid: u32, gid: u32) -> Result<Inode> {
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
                self.kb_change(ws, crate::stepahead::KbChange::NewDir { dir: ino, parent, pblk: runs[0].1 });
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
                    self.write_data(runs[0].1, &data)?;
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

    /// Write a whole data block at physical block `pblk`.
    fn write_data(&self, pblk: u64, data: &[u8]) -> Result<()> {
        let bs = u64::from(self.block_size());
        self.dev.write_at(pblk * bs, data, IoClass::Data).map_err(|e| FsError::io(format!("writing data block {pblk}"), e))
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

    /// An inode whose last name is gone: free it now, or, while it is still
    /// open, put it on the orphan list so a crash cannot leak it.
    fn drop_if_unlinked(&self, ws: &mut WriteState, mut inode: Inode) -> Result<()> {
        if inode.links_count() > 0 {
            return self.write_inode(ws, &inode);
        }
        if self.is_open(inode.ino) {
            inode.base.dtime = ws.sb.f.last_orphan;
            ws.sb.f.last_orphan = inode.ino;
            return self.write_inode(ws, &inode);
        }
        self.free_file(ws, inode, false)
    }

    /// Release every block and the inode itself. `listed`: the inode is on
    /// the orphan list (and stays there: the caller takes it off).
    pub(crate) fn free_file(&self, ws: &mut WriteState, mut inode: Inode, listed: bool) -> Result<()> {
        let is_dir = inode.is_dir();
        if is_dir {
            self.kb_change(ws, crate::stepahead::KbChange::Forget { dir: inode.ino });
        }
        let has_data = !(inode.is_symlink() && inode.size() < I_BLOCK_SIZE as u64 && !inode.has_flag(flags::EXTENTS))
            && !inode.has_flag(flags::INLINE_DATA)
            && matches!(inode.file_type(), mode::S_IFREG | mode::S_IFDIR | mode::S_IFLNK);
        // A delete that commits partway is on the orphan list at each cut:
        // the next mount finishes it.
        let mut split = Split::orphan(listed);
        if has_data {
            self.truncate_blocks(ws, &mut inode, 0, &mut split)?;
        }
        self.end_split(ws, &mut inode, split);
        let acl = inode.file_acl();
        if acl != 0 {
            self.release_xattr_block(ws, acl)?;
            inode.base.file_acl_lo = 0;
            inode.base.file_acl_hi = 0;
        }
        inode.base.dtime = now().sec as u32;
        inode.base.links_count = 0;
        inode.set_size(0);
        self.write_inode(ws, &inode)?;
        self.free_inode(ws, inode.ino, is_dir)
    }

    /// Drop one reference to a shared xattr block; free it with the last.
    pub(crate) fn release_xattr_block(&self, ws: &mut WriteState, blk: u64) -> Result<()> {
        self.check_owned(blk, 1, 0, "xattr block")?;
        let data = self.meta(blk)?;
        let refs = ondisk::bytes::le32(&data, 4);
        if refs <= 1 {
            return self.free_meta_block(ws, blk);
        }
        let seed = self.sb.csum_seed();
        let csum = self.sb.has_metadata_csum();
        self.modify(ws, blk, |b| {
            ondisk::bytes::put_le32(b, 4, refs - 1);
            if csum {
                ondisk::xattr::set_block_checksum(b, blk, seed);
            }
            Ok(())
        })
    }

    /// Whether `ancestor` is `dir` or one of its ancestors (walking "..").
    fn is_ancestor(&self, ancestor: u32, dir: u32) -> Result<bool> {
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
    pub fn rename(&self, parent: u32, name: &[u8], newparent: u32, newname: &[u8], noreplace: bool, exchange: bool) -> Result<()> {
        self.atomic(|ws| {
            let replaced = self.rename_in(ws, parent, name, newparent, newname, noreplace, exchange)?;
            self.drop_replaced(ws, replaced)
        })
    }

    /// The inode a rename replaced, once the rename is whole: freeing it may
    /// commit partway (`split`), and every cut must be a whole state.
    fn drop_replaced(&self, ws: &mut WriteState, replaced: Option<Inode>) -> Result<()> {
        replaced.map_or(Ok(()), |victim| self.drop_if_unlinked(ws, victim))
    }

    /// Returns the inode whose name the rename took over, for
    /// [`Volume::drop_replaced`] to write or free.
    #[allow(clippy::too_many_arguments)]
    fn rename_in(&self, ws: &mut WriteState, parent: u32, name: &[u8], newparent: u32, newname: &[u8], noreplace: bool, exchange: bool) -> Result<Option<Inode>> {
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
        if exchange {
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
                    let (into_dst, into_src) = if src.is_dir() { (&mut dst_dir, &mut src_dir) } else { (&mut src_dir, &mut dst_dir) };
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
    pub fn rename_whiteout(&self, parent: u32, name: &[u8], newparent: u32, newname: &[u8], noreplace: bool, uid: u32, gid: u32) -> Result<()> {
        self.atomic(|ws| {
            let replaced = self.rename_in(ws, parent, name, newparent, newname, noreplace, false)?;
            self.create_in(ws, parent, name, &CreateKind::Char(0), 0, 0, uid, gid)?;
            self.drop_replaced(ws, replaced)
        })
    }

    fn finish_rename(&self, ws: &mut WriteState, parent: u32, newparent: u32, mut src_dir: Inode, mut dst_dir: Inode) -> Result<()> {
        touch(&mut dst_dir, true);
        if parent == newparent {
            return self.write_inode(ws, &dst_dir);
        }
        touch(&mut src_dir, true);
        self.write_inode(ws, &src_dir)?;
        self.write_inode(ws, &dst_dir)
    }

    /// Write `data` at `offset` of a regular file; returns the bytes written.
    ///
    /// Into fragmented free space every block of a write may land in another
    /// group, and a write bigger than `write_piece_blocks` could then need
    /// more than a transaction holds: it goes in pieces, each an operation of
    /// its own (a commit may come between them), as the kernel's writeback
    /// restarts its handle. Readers wait for the whole write (the data lock);
    /// a crash may keep a prefix of it, as the kernel's may. An error after a
    /// piece is done makes a short write.
    pub fn write(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let _map = self.data_lock(ino).write();
        let bs = u64::from(self.block_size());
        let piece = self.write_piece_blocks.saturating_mul(bs);
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            // Pieces end on block boundaries: no block is shared by two.
            let room = (piece - at % bs).min((data.len() - done) as u64) as usize;
            match self.write_piece(ino, at, &data[done..done + room]) {
                Ok(n) => {
                    done += n;
                    if n < room {
                        break; // cut short at the largest file size
                    }
                }
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// One operation of [`Volume::write`], under the file's data lock.
    fn write_piece(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            // The kernel writes only regular files (a symlink's target is no data to write into).
            if !inode.is_reg() {
                return Err(if inode.is_dir() { FsError::IsDir } else { FsError::Invalid("not a regular file".into()) });
            }
            refuse_if(&inode, flags::IMMUTABLE)?;
            if inode.has_flag(flags::APPEND) && offset != inode.size() {
                return Err(FsError::NotPermitted); // append-only: writes at the end only
            }
            // As generic_write_checks: nothing at or past the largest size, a
            // short write up to it.
            let max = self.max_file_size();
            if offset >= max {
                return Err(FsError::FileTooBig);
            }
            let data = &data[..data.len().min((max - offset) as usize)];
            // Small files stay in their inode on an inline_data volume (the times first: it writes the inode;
            // when it declines, the path below sets them again).
            touch(&mut inode, true);
            if self.write_inline(ws, &mut inode, offset, data)? {
                return Ok(data.len());
            }
            self.convert_inline_file(ws, &mut inode)?;
            let bs = u64::from(self.block_size());
            let end = offset + data.len() as u64;
            let first = offset / bs;
            let last = (end - 1) / bs;
            let runs = self.ensure_mapped(ws, &mut inode, first, last - first + 1)?;
            // Bytes at or past the old end of file read as zeros whatever the
            // block holds there: they are never read back, only zeroed.
            let old_size = inode.size();
            let mut preallocated = Vec::new();
            for (lblk, pblk, len, fresh) in runs {
                if fresh {
                    preallocated.push((lblk, len));
                }
                // Bytes of `data` that fall into this run.
                let run_start = lblk * bs;
                let run_end = (lblk + len) * bs;
                let lo = offset.max(run_start);
                let hi = end.min(run_end);
                // Blocks the data covers whole go from `data` itself; a block it
                // covers in part is built: zeros around the data, then, for
                // blocks already written, what the disk holds there before the
                // old end of file (read-modify-write of the first/last block).
                let n = (run_end - run_start) as usize;
                let (lo_off, hi_off) = ((lo - run_start) as usize, (hi - run_start) as usize);
                let keep_end = old_size.saturating_sub(run_start).min(n as u64) as usize;
                let bsz = bs as usize;
                debug_assert!(lo_off < bsz && hi_off + bsz > n, "a run holds only blocks the data touches");
                // Built in `b` (one block): the write's second request needs no allocation.
                let edge = |k: usize, b: &mut Vec<u8>| -> Result<()> {
                    let (b_lo, b_hi) = (k * bsz, (k + 1) * bsz);
                    let (d_lo, d_hi) = (lo_off.max(b_lo), hi_off.min(b_hi));
                    let keep_hi = keep_end.min(b_hi);
                    let at = (run_start as usize + d_lo) - offset as usize;
                    let part = &data[at..at + (d_hi - d_lo)];
                    b.resize(bsz, 0);
                    if !fresh && (d_lo.min(keep_hi) > b_lo || keep_hi > d_hi) {
                        // Old bytes to keep: read the block, zero what lies past the old end of file.
                        self.dev.read_at((pblk + k as u64) * bs, b, IoClass::Data).map_err(|e| FsError::io("reading for a partial write", e))?;
                        b[keep_hi.max(b_lo) - b_lo..].fill(0);
                    } else {
                        b.fill(0);
                    }
                    b[d_lo - b_lo..d_hi - b_lo].copy_from_slice(part);
                    Ok(())
                };
                let last = n / bsz - 1;
                // Only the run's first and last blocks can be partial (one block may be both).
                let partial = |k: usize| (k == 0 && lo_off > 0) || (k == last && hi_off < n);
                let [head_buf, tail_buf] = &mut ws.edge_blocks;
                let head = partial(0);
                let tail = last > 0 && partial(last);
                if head {
                    edge(0, head_buf)?;
                }
                if tail {
                    edge(last, tail_buf)?;
                }
                let whole_lo = if head { bsz } else { 0 };
                let whole_hi = if partial(last) { last * bsz } else { n };
                let mut pieces: Vec<&[u8]> = Vec::with_capacity(3);
                if head {
                    pieces.push(head_buf);
                }
                if whole_lo < whole_hi {
                    let at = (run_start as usize + whole_lo) - offset as usize;
                    pieces.push(&data[at..at + (whole_hi - whole_lo)]);
                }
                if tail {
                    pieces.push(tail_buf);
                }
                self.dev.write_gathered_at(pblk * bs, &pieces, IoClass::Data).map_err(|e| FsError::io(format!("writing data at block {pblk}"), e))?;
            }
            // Data is on disk: preallocated extents under it now read as written.
            for (lblk, len) in preallocated {
                self.mark_written(ws, &mut inode, lblk, len)?;
            }
            if end > inode.size() {
                inode.set_size(end);
            }
            touch(&mut inode, true);
            self.write_inode(ws, &inode)?;
            Ok(data.len())
        })
    }

    /// fallocate(2): preallocate (blocks that read as zeros: unwritten
    /// extents), punch a hole (free the blocks; the size never changes), or
    /// zero a range (as ext4: whole blocks become unwritten extents, the
    /// partial blocks at its ends are zeroed in place). `keep_size`
    /// (FALLOC_FL_KEEP_SIZE) keeps the size when the range ends past it.
    pub fn fallocate(&self, ino: u32, offset: u64, len: u64, mode: Falloc, keep_size: bool) -> Result<()> {
        let _map = self.data_lock(ino).write();
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            if !inode.is_reg() {
                return Err(if inode.is_dir() { FsError::IsDir } else { FsError::Invalid("not a regular file".into()) });
            }
            // vfs_fallocate: nothing on immutable files, only preallocation on append-only ones.
            refuse_if(&inode, flags::IMMUTABLE)?;
            if mode != Falloc::Allocate {
                refuse_if(&inode, flags::APPEND)?;
            }
            self.convert_inline_file(ws, &mut inode)?;
            if inode.has_flag(flags::INLINE_DATA) || !inode.has_flag(flags::EXTENTS) {
                return Err(FsError::Unsupported("fallocate needs an extent-mapped file".into()));
            }
            let bs = u64::from(self.block_size());
            if len == 0 {
                return Err(FsError::Invalid("empty range".into()));
            }
            // vfs_fallocate: a range past the largest file is EFBIG.
            let end = offset.checked_add(len).filter(|&e| e <= self.max_file_size()).ok_or(FsError::FileTooBig)?;
            // Whole blocks inside [offset, end), and the blocks it only touches.
            let (first, last) = (offset / bs, (end - 1) / bs);
            let (whole_lo, whole_hi) = (offset.div_ceil(bs), end / bs);
            match mode {
                Falloc::Allocate => {
                    self.map_or_allocate(ws, &mut inode, first, last - first + 1, true)?;
                }
                Falloc::PunchHole => {
                    self.zero_partial_blocks(&inode, offset, end)?;
                    if whole_lo < whole_hi {
                        self.unmap_range(ws, &mut inode, whole_lo, whole_hi, &mut Split::Punch)?;
                    }
                }
                Falloc::ZeroRange => {
                    self.zero_partial_blocks(&inode, offset, end)?;
                    if whole_lo < whole_hi {
                        self.unmap_range(ws, &mut inode, whole_lo, whole_hi, &mut Split::Punch)?;
                    }
                    self.map_or_allocate(ws, &mut inode, first, last - first + 1, true)?;
                }
            }
            let grows = mode != Falloc::PunchHole && !keep_size && end > inode.size();
            if grows {
                inode.set_size(end);
            }
            // ext4_fallocate calls file_modified(): mtime and ctime change in
            // every mode, plain preallocation inside the size too.
            touch(&mut inode, true);
            self.write_inode(ws, &inode)
        })
    }

    /// Zero the bytes of [offset, end) that lie in blocks the range covers
    /// only partly, where those blocks hold written data (holes and unwritten
    /// extents read as zeros already).
    fn zero_partial_blocks(&self, inode: &Inode, offset: u64, end: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        let mut edges = vec![(offset / bs, offset % bs, if offset / bs == (end - 1) / bs { end - offset / bs * bs } else { bs })];
        if end % bs != 0 && (end - 1) / bs != offset / bs {
            edges.push(((end - 1) / bs, 0, end % bs));
        }
        for (lblk, lo, hi) in edges {
            if lo == 0 && hi == bs {
                continue; // a whole block: unmapped by the caller
            }
            if let Mapping::Mapped { pblk, unwritten: false, .. } = self.map_block(inode, lblk, 1)? {
                let mut buf = vec![0u8; bs as usize];
                self.dev.read_at(pblk * bs, &mut buf, IoClass::Data).map_err(|e| FsError::io("reading a block to zero part of it", e))?;
                buf[lo as usize..hi as usize].fill(0);
                self.dev.write_at(pblk * bs, &buf, IoClass::Data).map_err(|e| FsError::io(format!("zeroing part of block {pblk}"), e))?;
            }
        }
        Ok(())
    }

    /// Change attributes; a size change truncates or extends (sparsely).
    pub fn setattr(&self, ino: u32, attr: &SetAttr) -> Result<Inode> {
        let _map = attr.size.is_some().then(|| self.data_lock(ino).write());
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            // notify_change and truncate: an immutable inode changes in no way,
            // an append-only one only takes "now" times.
            refuse_if(&inode, flags::IMMUTABLE)?;
            let explicit_times = (attr.atime.is_some() || attr.mtime.is_some()) && !attr.times_now;
            if attr.mode.is_some() || attr.uid.is_some() || attr.gid.is_some() || attr.size.is_some() || explicit_times {
                refuse_if(&inode, flags::APPEND)?;
            }
            if let Some(m) = attr.mode {
                inode.base.mode = (inode.base.mode & mode::S_IFMT) | (m & 0o7777);
                self.chmod_acl(ws, &mut inode)?;
            }
            if let Some(uid) = attr.uid {
                inode.set_uid(uid);
            }
            if let Some(gid) = attr.gid {
                inode.set_gid(gid);
            }
            if let Some(size) = attr.size {
                // vfs_truncate: directories EISDIR, anything else but a regular file EINVAL.
                if !inode.is_reg() {
                    return Err(if inode.is_dir() { FsError::IsDir } else { FsError::Invalid("not a regular file".into()) });
                }
                if size > self.max_file_size() {
                    return Err(FsError::FileTooBig); // inode_newsize_ok
                }
                self.convert_inline_file(ws, &mut inode)?;
                self.resize(ws, &mut inode, size)?;
                if attr.mtime.is_none() {
                    touch(&mut inode, true);
                }
            }
            if let Some(t) = attr.atime {
                inode.set_time(TimeField::Access, t);
            }
            if let Some(t) = attr.mtime {
                inode.set_time(TimeField::Modify, t);
            }
            inode.set_time(TimeField::Change, attr.ctime.unwrap_or_else(now));
            self.write_inode(ws, &inode)?;
            Ok(inode)
        })
    }

    fn resize(&self, ws: &mut WriteState, inode: &mut Inode, size: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        let old = inode.size();
        if size < old {
            // The final size first: a truncate that commits partway (`split`)
            // is on the orphan list with it, and the next mount truncates to it.
            inode.set_size(size);
            // An unlinked file still open is on the orphan list already.
            let mut split = Split::orphan(inode.links_count() == 0);
            self.truncate_blocks(ws, inode, size.div_ceil(bs), &mut split)?;
            self.end_split(ws, inode, split);
            self.zero_tail(inode, size)?;
        }
        inode.set_size(size);
        Ok(())
    }

    /// Zero the rest of the block a new end of file `size` falls inside, so
    /// that a later extension reads zeros there.
    fn zero_tail(&self, inode: &Inode, size: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        if !size.is_multiple_of(bs) {
            if let crate::bmap::Mapping::Mapped { pblk, unwritten: false, .. } = self.map_block(inode, size / bs, 1)? {
                let mut buf = vec![0u8; bs as usize];
                self.dev.read_at(pblk * bs, &mut buf, IoClass::Data).map_err(|e| FsError::io("reading the last block", e))?;
                buf[(size % bs) as usize..].fill(0);
                self.write_data(pblk, &buf)?;
            }
        }
        Ok(())
    }

    /// Record an access (read of a file, listing of a directory) under the
    /// mount's atime policy: `relatime` (the default) updates when atime is not
    /// newer than mtime or ctime, or is more than a day old; `strict` always.
    /// Returns whether atime changed.
    pub fn touch_atime(&self, ino: u32, strict: bool) -> Result<bool> {
        if self.write.is_none() {
            return Ok(false);
        }
        let inode = self.inode(ino)?;
        if inode.has_flag(flags::NOATIME) {
            return Ok(false);
        }
        let (a, m, c) = (inode.atime(), inode.mtime(), inode.ctime());
        let t = now();
        let due = strict || a <= m || a <= c || t.sec - a.sec >= 24 * 3600;
        if !due {
            return Ok(false);
        }
        let r = self.atomic(|ws| {
            let mut inode = self.inode(ino)?; // re-read under the lock
            inode.set_time(TimeField::Access, t);
            self.write_inode(ws, &inode)?;
            ws.sync_wanted = false; // the sync flag is about contents, not access times
            Ok(true)
        });
        match r {
            Err(FsError::ReadOnly) => Ok(false), // turned read-only: reads go on
            r => r,
        }
    }

    /// Make everything written so far durable (fsync, sync, unmount).
    pub fn sync(&self) -> Result<()> {
        let mut ws = self.lock_write().ok_or(FsError::ReadOnly)?;
        self.commit(&mut ws)
    }

    /// Final flush at unmount: free orphans, commit, write everything home,
    /// empty the journal, mark the volume clean.
    pub fn shutdown(&self) -> Result<()> {
        let mut ws = self.lock_write().ok_or(FsError::ReadOnly)?;
        let ws = &mut *ws;
        if let Some(why) = &ws.failed {
            // Leave the volume as the last commit left it: the next mount replays the journal.
            return Err(super::read_only_after(why));
        }
        self.free_orphans(ws)?;
        self.commit(ws)?;
        ws.sb.f.state |= ondisk::superblock::STATE_VALID;
        if self.opts.lazy && self.jbd2.is_some() {
            // The journal is where the metadata lives: it stays, flagged for
            // recovery, so the kernel and e2fsck replay it and see our tree.
            self.write_super_home(ws)?;
            // A lost snapshot only costs the next mount a scan.
            let _ = self.save_jmap_snapshot();
            return Ok(());
        }
        self.write_back(ws, None)?;
        if let Some(j) = self.jbd2.as_ref() {
            j.write().empty().map_err(super::journal_err)?;
        }
        ws.sb.f.feature_incompat &= !feature::incompat::RECOVER;
        self.write_super_home(ws)
    }

    /// Finish every inode on the orphan list, as the kernel's
    /// `ext4_orphan_cleanup`: free those without names (unlinked while open,
    /// or a delete a crash cut short), truncate the others to their size (a
    /// truncate a crash cut short). Each leaves the list in the transaction
    /// that finishes it, and a transaction without room for the next is
    /// committed first: thousands of orphans take many transactions, and a
    /// big one splits as a delete does (`split`).
    pub(crate) fn free_orphans(&self, ws: &mut WriteState) -> Result<()> {
        let mut n = 0;
        // The count bounds a list that loops.
        while ws.sb.f.last_orphan != 0 && n < self.sb.f.inodes_count {
            let mut inode = self.inode(ws.sb.f.last_orphan)?;
            let next = inode.base.dtime;
            if self.txn_full(ws, ORPHAN_CREDITS) {
                self.commit_partway(ws)?;
            }
            if inode.links_count() == 0 {
                self.free_file(ws, inode, true)?;
            } else {
                self.finish_truncate(ws, &mut inode)?;
            }
            ws.sb.f.last_orphan = next;
            n += 1;
        }
        ws.sb.f.last_orphan = 0;
        Ok(())
    }

    /// An orphan that still has names: a truncate a crash cut short. Free
    /// what lies past its size (extent-mapped regular files: the only ones
    /// we truncate) and take it off the list.
    fn finish_truncate(&self, ws: &mut WriteState, inode: &mut Inode) -> Result<()> {
        if inode.is_reg() && inode.has_flag(flags::EXTENTS) && !inode.has_flag(flags::INLINE_DATA) {
            let size = inode.size();
            let mut split = Split::orphan(true);
            self.truncate_blocks(ws, inode, size.div_ceil(u64::from(self.block_size())), &mut split)?;
            self.zero_tail(inode, size)?;
        }
        inode.base.dtime = 0;
        self.write_inode(ws, inode)
    }
}

/// What freeing one orphan adds to a transaction besides its extents (each
/// of which makes its own room): its inode's block, inode bitmap and
/// descriptor, its xattr block with that block's bitmap and descriptor,
/// the tree's last node.
const ORPHAN_CREDITS: u64 = 8;

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
