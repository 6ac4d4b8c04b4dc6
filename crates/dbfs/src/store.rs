//! The database: one metadata table keyed by (parent, name), as Oracle DBFS keeps a
//! file system in a table, and the files' bytes as BLOBs beside it.
//!
//! ```text
//! entries(parent, name, ino UNIQUE, mode, uid, gid, nlink, size, atime, mtime, ctime)
//!         PRIMARY KEY (parent, name), WITHOUT ROWID: a directory's entries are one run of the
//!         B-tree, in name order, and a lookup is one descent
//! contents(ino PRIMARY KEY, data BLOB)   bytes of regular files (and symlink targets)
//! ```
//! The BLOBs live in their own table so that a listing walks small rows only. Times are
//! nanoseconds since the epoch. The root is inode 1 with parent 0 and an empty name; a file
//! unlinked while open moves to parent [`ORPHANS`] until its last close.
//!
//! Writes are batched: one transaction stays open and commits after [`BATCH_OPS`] changes,
//! [`BATCH_AGE`], an fsync or the unmount (the daemon's ticker calls [`Store::tick`]). A crash
//! loses at most that window, as ext4 loses its last `commit=` seconds. WAL mode with
//! `synchronous=NORMAL` makes every commit an append to the log without a flush; checkpoints
//! flush. There is one connection: batched changes are visible only to it.

use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Inode number of the root directory.
pub const ROOT: u64 = 1;
/// Parent of files unlinked while open.
pub const ORPHANS: i64 = -1;
/// Commit the running transaction after this many changes ...
pub const BATCH_OPS: u32 = 2000;
/// ... or when it is this old.
pub const BATCH_AGE: Duration = Duration::from_millis(200);
/// Longest name, as ext4.
pub const NAME_MAX: usize = 255;
/// Largest file: a BLOB is one SQLite value (at most 1e9 bytes by default), built in memory.
pub const MAX_FILE_SIZE: u64 = 512 << 20;

pub const S_IFMT: u32 = libc::S_IFMT;
pub const S_IFDIR: u32 = libc::S_IFDIR;
pub const S_IFREG: u32 = libc::S_IFREG;
pub const S_IFLNK: u32 = libc::S_IFLNK;

/// What can go wrong, each with the errno FUSE gets.
#[derive(Debug)]
pub enum StoreError {
    NotFound,
    Exists,
    NotEmpty,
    NotDir,
    IsDir,
    NameTooLong,
    TooBig,
    Invalid(&'static str),
    Unsupported(&'static str),
    Db { what: &'static str, err: rusqlite::Error },
}

impl StoreError {
    pub fn errno(&self) -> i32 {
        match self {
            StoreError::NotFound => libc::ENOENT,
            StoreError::Exists => libc::EEXIST,
            StoreError::NotEmpty => libc::ENOTEMPTY,
            StoreError::NotDir => libc::ENOTDIR,
            StoreError::IsDir => libc::EISDIR,
            StoreError::NameTooLong => libc::ENAMETOOLONG,
            StoreError::TooBig => libc::EFBIG,
            StoreError::Invalid(_) => libc::EINVAL,
            StoreError::Unsupported(_) => libc::EOPNOTSUPP,
            StoreError::Db { err, .. } => match err {
                rusqlite::Error::SqliteFailure(e, _) if e.code == rusqlite::ErrorCode::DiskFull => libc::ENOSPC,
                rusqlite::Error::SqliteFailure(e, _) if e.code == rusqlite::ErrorCode::TooBig => libc::EFBIG,
                _ => libc::EIO,
            },
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Db { what, err } => write!(f, "database error while {what}: {err}"),
            StoreError::Invalid(w) => write!(f, "invalid argument: {w}"),
            StoreError::Unsupported(w) => write!(f, "not supported: {w}"),
            other => write!(f, "{}", std::io::Error::from_raw_os_error(other.errno())),
        }
    }
}

impl std::error::Error for StoreError {}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Context for a database error.
trait Ctx<T> {
    fn ctx(self, what: &'static str) -> Result<T>;
}

impl<T> Ctx<T> for rusqlite::Result<T> {
    fn ctx(self, what: &'static str) -> Result<T> {
        self.map_err(|err| StoreError::Db { what, err })
    }
}

/// An inode's attributes (a row of `entries` without its key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl Attr {
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
}

/// One name in a directory listing.
#[derive(Clone, Debug)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub mode: u32,
}

/// Changes a setattr asks for.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime_ns: Option<i64>,
    pub mtime_ns: Option<i64>,
}

/// Figures for statfs.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    pub inodes: u64,
    pub bytes: u64,
}

pub fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS entries(
    parent INTEGER NOT NULL, name BLOB NOT NULL, ino INTEGER NOT NULL,
    mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL, nlink INTEGER NOT NULL,
    size INTEGER NOT NULL, atime INTEGER NOT NULL, mtime INTEGER NOT NULL, ctime INTEGER NOT NULL,
    PRIMARY KEY(parent, name)) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS entries_ino ON entries(ino);
CREATE TABLE IF NOT EXISTS contents(ino INTEGER PRIMARY KEY, data BLOB NOT NULL);
";

const ATTR_COLS: &str = "ino, mode, uid, gid, nlink, size, atime, mtime, ctime";

fn attr_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Attr> {
    Ok(Attr {
        ino: r.get::<_, i64>(0)? as u64,
        mode: r.get(1)?,
        uid: r.get(2)?,
        gid: r.get(3)?,
        nlink: r.get(4)?,
        size: r.get::<_, i64>(5)? as u64,
        atime_ns: r.get(6)?,
        mtime_ns: r.get(7)?,
        ctime_ns: r.get(8)?,
    })
}

/// How to open a database.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// SQLite page cache, in MiB.
    pub cache_mb: u32,
    /// Bytes of the database SQLite may map (0: read through the page cache only).
    pub mmap_mb: u32,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { cache_mb: 64, mmap_mb: 0 }
    }
}

pub struct Store {
    conn: Connection,
    /// Files unlinked while open (parent [`ORPHANS`]): a close checks here, not the database.
    orphans: std::collections::HashSet<u64>,
    next_ino: u64,
    in_tx: bool,
    tx_ops: u32,
    tx_started: Instant,
    commits: u64,
}

impl Store {
    /// Open (creating if needed) the database at `path`, with the root directory.
    pub fn open(path: &Path, opts: &StoreOptions) -> Result<Store> {
        let conn = Connection::open(path).ctx("opening the database")?;
        // 4 KiB pages as the file systems it is compared with; WAL so readers never block the
        // writer and commits append; NORMAL: no flush per commit (WAL stays consistent).
        conn.pragma_update(None, "page_size", 4096).ctx("setting page_size")?;
        conn.pragma_update(None, "journal_mode", "WAL").ctx("setting WAL mode")?;
        conn.pragma_update(None, "synchronous", "NORMAL").ctx("setting synchronous")?;
        conn.pragma_update(None, "cache_size", -(i64::from(opts.cache_mb) * 1024)).ctx("setting cache_size")?;
        conn.pragma_update(None, "mmap_size", i64::from(opts.mmap_mb) << 20).ctx("setting mmap_size")?;
        conn.pragma_update(None, "temp_store", "MEMORY").ctx("setting temp_store")?;
        conn.set_prepared_statement_cache_capacity(64);
        conn.execute_batch(SCHEMA).ctx("creating the schema")?;
        let now = now_ns();
        conn.execute(
            "INSERT OR IGNORE INTO entries VALUES(0, x'', ?1, ?2, 0, 0, 2, 0, ?3, ?3, ?3)",
            params![ROOT as i64, S_IFDIR | 0o755, now],
        )
        .ctx("creating the root")?;
        let max: i64 =
            conn.query_row("SELECT max(ino) FROM entries", [], |r| r.get(0)).ctx("reading the highest inode")?;
        let mut s = Store {
            conn,
            orphans: Default::default(),
            next_ino: max as u64 + 1,
            in_tx: false,
            tx_ops: 0,
            tx_started: Instant::now(),
            commits: 0,
        };
        s.drop_orphans()?;
        Ok(s)
    }

    /// Files unlinked while open when the last daemon stopped are gone now.
    fn drop_orphans(&mut self) -> Result<()> {
        self.conn
            .execute("DELETE FROM contents WHERE ino IN (SELECT ino FROM entries WHERE parent = ?1)", [ORPHANS])
            .ctx("dropping orphans' contents")?;
        self.conn.execute("DELETE FROM entries WHERE parent = ?1", [ORPHANS]).ctx("dropping orphans")?;
        Ok(())
    }

    pub fn commits(&self) -> u64 {
        self.commits
    }

    // ------------------------------------------------------------------ transactions

    /// Join the running transaction (start one if none).
    fn begin(&mut self) -> Result<()> {
        if !self.in_tx {
            self.conn.execute_batch("BEGIN IMMEDIATE").ctx("starting a transaction")?;
            self.in_tx = true;
            self.tx_ops = 0;
            self.tx_started = Instant::now();
        }
        Ok(())
    }

    /// A change is done: commit when the batch is full.
    fn done(&mut self) -> Result<()> {
        self.tx_ops += 1;
        if self.tx_ops >= BATCH_OPS {
            self.commit()?;
        }
        Ok(())
    }

    /// Run one change inside the batch; a failed change is rolled back with its batch-mates'
    /// work kept (a savepoint), so a failure never leaves half an operation.
    fn change<T>(&mut self, f: impl FnOnce(&mut Store) -> Result<T>) -> Result<T> {
        self.begin()?;
        self.conn.execute_batch("SAVEPOINT op").ctx("starting an operation")?;
        match f(self) {
            Ok(v) => {
                self.conn.execute_batch("RELEASE op").ctx("ending an operation")?;
                self.done()?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK TO op; RELEASE op");
                Err(e)
            }
        }
    }

    /// Make every change so far durable in the database (WAL).
    pub fn commit(&mut self) -> Result<()> {
        if self.in_tx {
            self.conn.execute_batch("COMMIT").ctx("committing")?;
            self.in_tx = false;
            self.commits += 1;
        }
        Ok(())
    }

    /// Called periodically: commit a batch that has waited long enough.
    pub fn tick(&mut self) -> Result<()> {
        if self.in_tx && self.tx_started.elapsed() >= BATCH_AGE {
            self.commit()?;
        }
        Ok(())
    }

    /// fsync: commit, and flush the log to the disk.
    pub fn sync(&mut self) -> Result<()> {
        self.commit()?;
        self.conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())).ctx("checkpointing")?;
        Ok(())
    }

    // ------------------------------------------------------------------ reads

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let mut st = self
            .conn
            .prepare_cached(&format!("SELECT {ATTR_COLS} FROM entries WHERE ino = ?1"))
            .ctx("preparing getattr")?;
        st.query_row([ino as i64], attr_from_row).optional().ctx("reading an inode")?.ok_or(StoreError::NotFound)
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        if name.len() > NAME_MAX {
            return Err(StoreError::NameTooLong);
        }
        let mut st = self
            .conn
            .prepare_cached(&format!("SELECT {ATTR_COLS} FROM entries WHERE parent = ?1 AND name = ?2"))
            .ctx("preparing lookup")?;
        match st.query_row(params![parent as i64, name], attr_from_row).optional().ctx("looking up a name")? {
            Some(a) => Ok(a),
            None => {
                // ENOTDIR rather than ENOENT when the parent is not a directory.
                let p = self.getattr(parent)?;
                if !p.is_dir() {
                    return Err(StoreError::NotDir);
                }
                Err(StoreError::NotFound)
            }
        }
    }

    /// The parent directory of `ino` (the root is its own parent).
    pub fn parent_of(&self, ino: u64) -> Result<u64> {
        if ino == ROOT {
            return Ok(ROOT);
        }
        let mut st = self.conn.prepare_cached("SELECT parent FROM entries WHERE ino = ?1").ctx("preparing parent")?;
        let p: Option<i64> = st.query_row([ino as i64], |r| r.get(0)).optional().ctx("reading a parent")?;
        p.map(|p| p as u64).ok_or(StoreError::NotFound)
    }

    /// Up to `limit` entries of directory `dir` whose names sort after `after` (all from the
    /// start when `after` is None), in name order: keyset paging, one B-tree range scan.
    pub fn list(&self, dir: u64, after: Option<&[u8]>, limit: usize) -> Result<Vec<DirEntry>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT name, ino, mode FROM entries WHERE parent = ?1 AND name > ?2 ORDER BY name LIMIT ?3",
            )
            .ctx("preparing a listing")?;
        let rows = st
            .query_map(params![dir as i64, after.unwrap_or(b""), limit as i64], |r| {
                Ok(DirEntry { name: r.get(0)?, ino: r.get::<_, i64>(1)? as u64, mode: r.get(2)? })
            })
            .ctx("listing a directory")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("listing a directory")
    }

    /// The names after the first `skip` of a listing (seekdir to an arbitrary position).
    pub fn list_from(&self, dir: u64, skip: u64, limit: usize) -> Result<Vec<DirEntry>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT name, ino, mode FROM entries WHERE parent = ?1 ORDER BY name LIMIT ?2 OFFSET ?3")
            .ctx("preparing a listing")?;
        let rows = st
            .query_map(params![dir as i64, limit as i64, skip as i64], |r| {
                Ok(DirEntry { name: r.get(0)?, ino: r.get::<_, i64>(1)? as u64, mode: r.get(2)? })
            })
            .ctx("listing a directory")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("listing a directory")
    }

    /// Up to `size` bytes of a file from `offset`.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT substr(data, ?2, ?3) FROM contents WHERE ino = ?1")
            .ctx("preparing a read")?;
        // substr() counts from 1; a start past the end gives an empty blob.
        let start = offset.saturating_add(1).min(i64::MAX as u64) as i64;
        let data: Option<Vec<u8>> =
            st.query_row(params![ino as i64, start, i64::from(size)], |r| r.get(0)).optional().ctx("reading a file")?;
        match data {
            Some(d) => Ok(d),
            None => {
                let a = self.getattr(ino)?;
                if a.is_dir() {
                    return Err(StoreError::IsDir);
                }
                Ok(Vec::new())
            }
        }
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let a = self.getattr(ino)?;
        if a.mode & S_IFMT != S_IFLNK {
            return Err(StoreError::Invalid("not a symbolic link"));
        }
        self.read(ino, 0, u32::MAX)
    }

    pub fn usage(&self) -> Result<Usage> {
        let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0)).ctx("reading page_count")?;
        Ok(Usage { inodes: self.next_ino.saturating_sub(1), bytes: pages as u64 * 4096 })
    }

    // ------------------------------------------------------------------ changes

    fn check_name(name: &[u8]) -> Result<()> {
        if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
            return Err(StoreError::Invalid("bad name"));
        }
        if name.len() > NAME_MAX {
            return Err(StoreError::NameTooLong);
        }
        Ok(())
    }

    fn dir_attr(&self, dir: u64) -> Result<Attr> {
        let d = self.getattr(dir)?;
        if !d.is_dir() {
            return Err(StoreError::NotDir);
        }
        Ok(d)
    }

    fn exists(&self, parent: u64, name: &[u8]) -> Result<bool> {
        let mut st = self
            .conn
            .prepare_cached("SELECT 1 FROM entries WHERE parent = ?1 AND name = ?2")
            .ctx("preparing exists")?;
        st.exists(params![parent as i64, name]).ctx("checking a name")
    }

    /// A directory's times change with its entries; its link count with its subdirectories.
    fn touch_dir(&self, dir: u64, nlink_delta: i32, now: i64) -> Result<()> {
        let mut st = self
            .conn
            .prepare_cached("UPDATE entries SET nlink = nlink + ?2, mtime = ?3, ctime = ?3 WHERE ino = ?1")
            .ctx("preparing a directory update")?;
        st.execute(params![dir as i64, nlink_delta, now]).ctx("updating a directory")?;
        Ok(())
    }

    /// Make a file, directory or symlink `name` in `parent`.
    pub fn create(
        &mut self,
        parent: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        target: Option<&[u8]>,
    ) -> Result<Attr> {
        Self::check_name(name)?;
        self.change(|s| {
            s.dir_attr(parent)?;
            if s.exists(parent, name)? {
                return Err(StoreError::Exists);
            }
            let kind = mode & S_IFMT;
            let is_dir = kind == S_IFDIR;
            if !matches!(kind, S_IFDIR | S_IFREG | S_IFLNK) {
                return Err(StoreError::Unsupported("only files, directories and symlinks"));
            }
            let ino = s.next_ino;
            let now = now_ns();
            let size = target.map_or(0, |t| t.len() as u64);
            let nlink = if is_dir { 2 } else { 1 };
            s.conn
                .prepare_cached("INSERT INTO entries VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?9)")
                .ctx("preparing create")?
                .execute(params![parent as i64, name, ino as i64, mode, uid, gid, nlink, size as i64, now])
                .ctx("adding an entry")?;
            if let Some(t) = target {
                s.conn
                    .prepare_cached("INSERT INTO contents VALUES(?1, ?2)")
                    .ctx("preparing contents")?
                    .execute(params![ino as i64, t])
                    .ctx("storing a symlink target")?;
            }
            s.touch_dir(parent, if is_dir { 1 } else { 0 }, now)?;
            s.next_ino += 1;
            Ok(Attr { ino, mode, uid, gid, nlink, size, atime_ns: now, mtime_ns: now, ctime_ns: now })
        })
    }

    /// Write `data` at `offset`; returns the bytes written.
    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<usize> {
        let end = offset.checked_add(data.len() as u64).filter(|e| *e <= MAX_FILE_SIZE).ok_or(StoreError::TooBig)?;
        self.change(|s| {
            let a = s.getattr(ino)?;
            if a.is_dir() {
                return Err(StoreError::IsDir);
            }
            let now = now_ns();
            // Read, change, store the whole BLOB: right for the small files this peer is for
            // (SQL's || would turn the bytes into TEXT), quadratic for large files written piecewise.
            let mut buf = if a.size == 0 { Vec::new() } else { s.read(ino, 0, u32::MAX)? };
            if (buf.len() as u64) < end {
                buf.resize(end as usize, 0);
            }
            buf[offset as usize..end as usize].copy_from_slice(data);
            s.put_contents(ino, &buf)?;
            let size = a.size.max(end);
            s.conn
                .prepare_cached("UPDATE entries SET size = ?2, mtime = ?3, ctime = ?3 WHERE ino = ?1")
                .ctx("preparing a size update")?
                .execute(params![ino as i64, size as i64, now])
                .ctx("updating a size")?;
            Ok(data.len())
        })
    }

    fn put_contents(&self, ino: u64, data: &[u8]) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO contents VALUES(?1, ?2)")
            .ctx("preparing contents")?
            .execute(params![ino as i64, data])
            .ctx("storing contents")?;
        Ok(())
    }

    pub fn setattr(&mut self, ino: u64, set: &SetAttr) -> Result<Attr> {
        self.change(|s| {
            let mut a = s.getattr(ino)?;
            let now = now_ns();
            if let Some(size) = set.size {
                if a.is_dir() {
                    return Err(StoreError::IsDir);
                }
                if size > MAX_FILE_SIZE {
                    return Err(StoreError::TooBig);
                }
                if size != a.size {
                    let mut buf = s.read(ino, 0, u32::MAX)?;
                    buf.resize(size as usize, 0);
                    s.put_contents(ino, &buf)?;
                    a.size = size;
                }
                // truncate(2) changes mtime even when the size stays.
                a.mtime_ns = now;
            }
            if let Some(m) = set.mode {
                a.mode = (a.mode & S_IFMT) | (m & 0o7777);
            }
            if let Some(u) = set.uid {
                a.uid = u;
            }
            if let Some(g) = set.gid {
                a.gid = g;
            }
            if let Some(t) = set.atime_ns {
                a.atime_ns = t;
            }
            if let Some(t) = set.mtime_ns {
                a.mtime_ns = t;
            }
            a.ctime_ns = now;
            s.conn
                .prepare_cached(
                    "UPDATE entries SET mode = ?2, uid = ?3, gid = ?4, size = ?5, atime = ?6, mtime = ?7, ctime = ?8 WHERE ino = ?1",
                )
                .ctx("preparing setattr")?
                .execute(params![ino as i64, a.mode, a.uid, a.gid, a.size as i64, a.atime_ns, a.mtime_ns, a.ctime_ns])
                .ctx("updating attributes")?;
            Ok(a)
        })
    }

    /// Remove `name` from `parent`. `open` says whether the file is still open somewhere: then it
    /// only moves to the orphans, and [`Store::forget_orphan`] drops it at the last close.
    pub fn unlink(&mut self, parent: u64, name: &[u8], is_open: impl Fn(u64) -> bool) -> Result<()> {
        self.change(|s| {
            let a = s.lookup(parent, name)?;
            if a.is_dir() {
                return Err(StoreError::IsDir);
            }
            let now = now_ns();
            if is_open(a.ino) {
                s.conn
                    .prepare_cached("UPDATE entries SET parent = ?3, name = CAST(ino AS BLOB), nlink = 0, ctime = ?4 WHERE parent = ?1 AND name = ?2")
                    .ctx("preparing an orphan move")?
                    .execute(params![parent as i64, name, ORPHANS, now])
                    .ctx("orphaning")?;
                s.orphans.insert(a.ino);
            } else {
                s.remove_row(parent, name, a.ino)?;
            }
            s.touch_dir(parent, 0, now)
        })
    }

    fn remove_row(&self, parent: u64, name: &[u8], ino: u64) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM entries WHERE parent = ?1 AND name = ?2")
            .ctx("preparing unlink")?
            .execute(params![parent as i64, name])
            .ctx("removing an entry")?;
        self.conn
            .prepare_cached("DELETE FROM contents WHERE ino = ?1")
            .ctx("preparing contents removal")?
            .execute([ino as i64])
            .ctx("removing contents")?;
        Ok(())
    }

    /// The last close of `ino`: drop it if it was unlinked while open.
    pub fn forget_orphan(&mut self, ino: u64) -> Result<()> {
        if self.orphans.contains(&ino) {
            self.change(|s| s.remove_row(ORPHANS as u64, ino.to_string().as_bytes(), ino))?;
            self.orphans.remove(&ino);
        }
        Ok(())
    }

    pub fn rmdir(&mut self, parent: u64, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(StoreError::Invalid("rmdir ."));
        }
        if name == b".." {
            return Err(StoreError::NotEmpty);
        }
        self.change(|s| {
            let a = s.lookup(parent, name)?;
            if !a.is_dir() {
                return Err(StoreError::NotDir);
            }
            if !s.list(a.ino, None, 1)?.is_empty() {
                return Err(StoreError::NotEmpty);
            }
            s.remove_row(parent, name, a.ino)?;
            s.touch_dir(parent, -1, now_ns())
        })
    }

    /// Is `dir` equal to `ancestor` or below it?
    fn is_within(&self, mut dir: u64, ancestor: u64) -> Result<bool> {
        loop {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == ROOT {
                return Ok(false);
            }
            dir = self.parent_of(dir)?;
        }
    }

    /// rename(2), with RENAME_NOREPLACE; an existing target is replaced as POSIX says.
    pub fn rename(
        &mut self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
        is_open: impl Fn(u64) -> bool,
    ) -> Result<()> {
        Self::check_name(newname)?;
        self.change(|s| {
            let src = s.lookup(parent, name)?;
            s.dir_attr(newparent)?;
            if src.is_dir() && s.is_within(newparent, src.ino)? {
                return Err(StoreError::Invalid("a directory cannot move below itself"));
            }
            let now = now_ns();
            match s.lookup(newparent, newname) {
                Ok(dst) if dst.ino == src.ino => return Ok(()),
                Ok(_) if noreplace => return Err(StoreError::Exists),
                Ok(dst) => {
                    match (src.is_dir(), dst.is_dir()) {
                        (true, false) => return Err(StoreError::NotDir),
                        (false, true) => return Err(StoreError::IsDir),
                        (true, true) => {
                            if !s.list(dst.ino, None, 1)?.is_empty() {
                                return Err(StoreError::NotEmpty);
                            }
                            s.remove_row(newparent, newname, dst.ino)?;
                            s.touch_dir(newparent, -1, now)?;
                        }
                        (false, false) => {
                            if is_open(dst.ino) {
                                s.conn
                                    .prepare_cached("UPDATE entries SET parent = ?3, name = CAST(ino AS BLOB), nlink = 0 WHERE parent = ?1 AND name = ?2")
                                    .ctx("preparing an orphan move")?
                                    .execute(params![newparent as i64, newname, ORPHANS])
                                    .ctx("orphaning")?;
                                s.orphans.insert(dst.ino);
                            } else {
                                s.remove_row(newparent, newname, dst.ino)?;
                            }
                        }
                    }
                }
                Err(StoreError::NotFound) => {}
                Err(e) => return Err(e),
            }
            s.conn
                .prepare_cached("UPDATE entries SET parent = ?3, name = ?4, ctime = ?5 WHERE parent = ?1 AND name = ?2")
                .ctx("preparing rename")?
                .execute(params![parent as i64, name, newparent as i64, newname, now])
                .ctx("renaming")?;
            let moved_dir = i32::from(src.is_dir() && parent != newparent);
            s.touch_dir(parent, -moved_dir, now)?;
            s.touch_dir(newparent, moved_dir, now)
        })
    }

    /// Close the database: commit, checkpoint the log into the database file.
    pub fn close(mut self) -> Result<()> {
        self.commit()?;
        self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).ctx("final checkpoint")?;
        self.conn.close().map_err(|(_, err)| StoreError::Db { what: "closing", err })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("fs.db"), &StoreOptions::default()).unwrap();
        (d, s)
    }

    const FILE: u32 = S_IFREG | 0o644;
    const DIR: u32 = S_IFDIR | 0o755;

    #[test]
    fn create_write_read_back() {
        let (_d, mut s) = store();
        let f = s.create(ROOT, b"a", FILE, 1, 2, None).unwrap();
        assert_eq!(s.write(f.ino, 0, b"hello").unwrap(), 5);
        assert_eq!(s.write(f.ino, 5, b" world").unwrap(), 6);
        assert_eq!(s.write(f.ino, 0, b"J").unwrap(), 1);
        assert_eq!(s.read(f.ino, 0, 100).unwrap(), b"Jello world");
        assert_eq!(s.read(f.ino, 6, 3).unwrap(), b"wor");
        assert_eq!(s.read(f.ino, 50, 3).unwrap(), b"");
        // A write past the end leaves a zero-filled gap.
        s.write(f.ino, 13, b"!").unwrap();
        assert_eq!(s.read(f.ino, 10, 10).unwrap(), b"d\0\0!");
        assert_eq!(s.lookup(ROOT, b"a").unwrap().size, 14);
        assert_eq!(s.create(ROOT, b"a", FILE, 0, 0, None).unwrap_err().errno(), libc::EEXIST);
    }

    #[test]
    fn directories_list_in_pages_and_count_links() {
        let (_d, mut s) = store();
        let d = s.create(ROOT, b"d", DIR, 0, 0, None).unwrap();
        for i in 0..250 {
            s.create(d.ino, format!("f{i:03}").as_bytes(), FILE, 0, 0, None).unwrap();
        }
        s.create(d.ino, b"sub", DIR, 0, 0, None).unwrap();
        assert_eq!(s.getattr(d.ino).unwrap().nlink, 3);
        assert_eq!(s.getattr(ROOT).unwrap().nlink, 3);
        let mut names = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = s.list(d.ino, after.as_deref(), 64).unwrap();
            if page.is_empty() {
                break;
            }
            after = Some(page.last().unwrap().name.clone());
            names.extend(page.into_iter().map(|e| e.name));
        }
        assert_eq!(names.len(), 251);
        assert!(names.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(s.list_from(d.ino, 249, 10).unwrap().len(), 2);
        assert_eq!(s.rmdir(ROOT, b"d").unwrap_err().errno(), libc::ENOTEMPTY);
        s.rmdir(d.ino, b"sub").unwrap();
        assert_eq!(s.getattr(d.ino).unwrap().nlink, 2);
    }

    #[test]
    fn rename_replaces_and_refuses_cycles() {
        let (_d, mut s) = store();
        let a = s.create(ROOT, b"a", DIR, 0, 0, None).unwrap();
        let b = s.create(a.ino, b"b", DIR, 0, 0, None).unwrap();
        assert_eq!(s.rename(ROOT, b"a", b.ino, b"x", false, |_| false).unwrap_err().errno(), libc::EINVAL);
        let f = s.create(ROOT, b"f", FILE, 0, 0, None).unwrap();
        let g = s.create(ROOT, b"g", FILE, 0, 0, None).unwrap();
        s.write(g.ino, 0, b"old").unwrap();
        assert_eq!(s.rename(ROOT, b"f", ROOT, b"g", true, |_| false).unwrap_err().errno(), libc::EEXIST);
        s.rename(ROOT, b"f", ROOT, b"g", false, |_| false).unwrap();
        assert_eq!(s.lookup(ROOT, b"g").unwrap().ino, f.ino);
        assert_eq!(s.read(g.ino, 0, 10).unwrap_err().errno(), libc::ENOENT, "the replaced file is gone");
        s.rename(ROOT, b"g", b.ino, b"moved", false, |_| false).unwrap();
        assert_eq!(s.parent_of(f.ino).unwrap(), b.ino);
        s.rename(ROOT, b"a", ROOT, b"a2", false, |_| false).unwrap();
        assert_eq!(s.lookup(ROOT, b"a2").unwrap().ino, a.ino);
        assert_eq!(s.parent_of(b.ino).unwrap(), a.ino);
    }

    #[test]
    fn unlinked_open_file_lives_until_closed_and_batches_survive_reopen() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("fs.db");
        let mut s = Store::open(&path, &StoreOptions::default()).unwrap();
        let f = s.create(ROOT, b"f", FILE, 0, 0, None).unwrap();
        s.write(f.ino, 0, b"data").unwrap();
        s.unlink(ROOT, b"f", |_| true).unwrap();
        assert_eq!(s.lookup(ROOT, b"f").unwrap_err().errno(), libc::ENOENT);
        assert_eq!(s.read(f.ino, 0, 10).unwrap(), b"data");
        s.forget_orphan(f.ino).unwrap();
        assert_eq!(s.getattr(f.ino).unwrap_err().errno(), libc::ENOENT);
        let k = s.create(ROOT, b"kept", FILE, 0, 0, None).unwrap();
        s.write(k.ino, 0, b"kept").unwrap();
        s.setattr(k.ino, &SetAttr { mode: Some(0o600), size: Some(2), ..Default::default() }).unwrap();
        s.close().unwrap();
        let s = Store::open(&path, &StoreOptions::default()).unwrap();
        let k2 = s.lookup(ROOT, b"kept").unwrap();
        assert_eq!((k2.ino, k2.size, k2.mode), (k.ino, 2, S_IFREG | 0o600));
        assert_eq!(s.read(k.ino, 0, 10).unwrap(), b"ke");
    }

    #[test]
    fn failed_operation_leaves_nothing_behind() {
        let (_d, mut s) = store();
        let f = s.create(ROOT, b"f", FILE, 0, 0, None).unwrap();
        assert_eq!(s.create(f.ino, b"x", FILE, 0, 0, None).unwrap_err().errno(), libc::ENOTDIR);
        assert_eq!(s.lookup(ROOT, &[b'n'; 256]).unwrap_err().errno(), libc::ENAMETOOLONG);
        assert_eq!(s.create(ROOT, &[b'n'; 256], FILE, 0, 0, None).unwrap_err().errno(), libc::ENAMETOOLONG);
        assert_eq!(s.list(ROOT, None, 10).unwrap().len(), 1);
    }
}
