//! The scanner's control directory read straight from a dbfs-sqlite database, without FUSE:
//! the same lookups and reads as SQL queries on one connection. Set beside a scan through the
//! mount, it shows how much of the database peer's time is FUSE and the kernel, and how much
//! the database (the thesis's open question, section 5.3).

use crate::scan::{ControlDir, Meta};
use dbfs::store::{Attr, Store, StoreError, ROOT};
use std::collections::HashMap;

pub struct SqliteDir {
    store: Store,
    /// The control directory's path inside the database, without a leading slash.
    base: String,
    /// Directories already resolved (the kernel's dentry cache does this for the mount).
    dirs: HashMap<String, u64>,
}

impl SqliteDir {
    pub fn new(store: Store, base: &str) -> SqliteDir {
        SqliteDir { store, base: base.trim_matches('/').to_string(), dirs: HashMap::new() }
    }

    fn full(&self, rel: &str) -> String {
        match (self.base.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => self.base.clone(),
            (false, false) => format!("{}/{rel}", self.base),
        }
    }

    fn dir_ino(&mut self, dir: &str) -> Result<u64, StoreError> {
        if dir.is_empty() {
            return Ok(ROOT);
        }
        if let Some(i) = self.dirs.get(dir) {
            return Ok(*i);
        }
        let (parent, name) = dir.rsplit_once('/').unwrap_or(("", dir));
        let p = self.dir_ino(parent)?;
        let a = self.store.lookup(p, name.as_bytes())?;
        if !a.is_dir() {
            return Err(StoreError::NotDir);
        }
        self.dirs.insert(dir.to_string(), a.ino);
        Ok(a.ino)
    }

    fn resolve(&mut self, rel: &str) -> Result<Attr, StoreError> {
        let full = self.full(rel);
        let (parent, name) = full.rsplit_once('/').unwrap_or(("", full.as_str()));
        let p = self.dir_ino(parent)?;
        self.store.lookup(p, name.as_bytes())
    }
}

fn meta(a: &Attr) -> Meta {
    Meta { uid: a.uid, mtime: a.mtime_ns.div_euclid(1_000_000_000), size: a.size }
}

impl ControlDir for SqliteDir {
    fn list(&mut self, dir: &str) -> std::io::Result<Vec<String>> {
        let full = self.full(dir);
        let ino = self.dir_ino(&full).map_err(|e| std::io::Error::from_raw_os_error(e.errno()))?;
        let mut names = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page =
                self.store.list(ino, after.as_deref(), 4096).map_err(|e| std::io::Error::other(e.to_string()))?;
            let Some(last) = page.last() else { break };
            after = Some(last.name.clone());
            names.extend(page.into_iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()));
        }
        Ok(names)
    }

    fn read(&mut self, path: &str, limit: Option<usize>, _until: &mut dyn FnMut(&[u8]) -> bool) -> Option<Vec<u8>> {
        let a = self.resolve(path).ok()?;
        let size = limit.map_or(u32::MAX, |l| l.min(u32::MAX as usize) as u32);
        self.store.read(a.ino, 0, size).ok()
    }

    fn read_status(&mut self, path: &str) -> Option<(Meta, Vec<u8>)> {
        let a = self.resolve(path).ok()?;
        let mut data = self.store.read(a.ino, 0, 8192).ok()?;
        if let Some(p) = data.iter().position(|b| *b == b'\n') {
            data.truncate(p + 1);
        }
        Some((meta(&a), data))
    }

    fn stat(&mut self, path: &str) -> Option<Meta> {
        self.resolve(path).ok().map(|a| meta(&a))
    }
}
