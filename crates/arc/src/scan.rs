//! ARC's `GMJobsInfo::collect()` (nordugrid/arc, src/services/a-rex/infoproviders/GMJobsInfo.pm,
//! ARC 6 and 7), with the same files touched in the same order and the same parsing:
//!
//! 1. list each state directory (flat: the control directory), keep names containing `.status`,
//!    take the ID with `job\.(.+)\.status` (ARC 7: `(.+)\.status`);
//! 2. per job: open and read `.local` whole, parse `^(\w+)=(.+)$` lines (skip the job if it
//!    cannot be opened); open `.status`, fstat it (owner -> getpwuid, mtime), read its first line
//!    (skip the job if empty); `-e .failed` (stat), and if present read <= 1024 bytes; open and
//!    parse `.grami` (`joboption_*` lines); open `.description` and read lines until the language
//!    is known; `-s .diag` (stat), and if non-empty open and parse it.
//!
//! Reads go through an 8 KiB buffer as PerlIO's do. The scan is single-threaded, as the Perl is.
//! Time is kept per job, so the report has jobs/s overall and for every second of the run.

use crate::job::Summary;
use crate::layout::Layout;
use std::collections::BTreeMap;
use std::time::Instant;

/// A file's owner and modification time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Meta {
    pub uid: u32,
    pub mtime: i64,
    pub size: u64,
}

/// What the scanner needs from a control directory; paths are relative to it.
pub trait ControlDir {
    /// Names in a directory ("" is the control directory itself).
    fn list(&mut self, dir: &str) -> std::io::Result<Vec<String>>;
    /// Open and read up to `limit` bytes (None: the whole file); None when it cannot be opened.
    /// `until` may stop reading early: it gets the bytes so far and says whether they suffice.
    fn read(&mut self, path: &str, limit: Option<usize>, until: &mut dyn FnMut(&[u8]) -> bool) -> Option<Vec<u8>>;
    /// Open, fstat, read the first line; None when it cannot be opened.
    fn read_status(&mut self, path: &str) -> Option<(Meta, Vec<u8>)>;
    /// stat(2): None when the file does not exist.
    fn stat(&mut self, path: &str) -> Option<Meta>;
}

/// Counters a scan reports.
#[derive(Clone, Debug, Default)]
pub struct ScanReport {
    pub layout: String,
    /// Job IDs found in the listings.
    pub listed: u64,
    /// Jobs scanned to the end (not skipped).
    pub jobs: u64,
    pub skipped: u64,
    pub elapsed_s: f64,
    pub jobs_per_s: f64,
    /// Jobs completed in each second of the run (the last one partial).
    pub per_second: Vec<u64>,
    pub files_read: u64,
    pub bytes_read: u64,
    pub stats: u64,
    pub states: BTreeMap<String, u64>,
    /// Sum of every scanned job's [`Summary::hash`]: equals the manifest's when every file came
    /// back intact (order-independent).
    pub digest: u64,
}

impl ScanReport {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "layout": self.layout,
            "listed": self.listed,
            "jobs": self.jobs,
            "skipped": self.skipped,
            "elapsed_s": self.elapsed_s,
            "jobs_per_s": self.jobs_per_s,
            "per_second": self.per_second,
            "files_read": self.files_read,
            "bytes_read": self.bytes_read,
            "stats": self.stats,
            "states": self.states,
            "digest": format!("{:016x}", self.digest),
        })
    }
}

/// `^(\w+)=(.+)$` on one line (without its newline).
fn key_value(line: &str) -> Option<(&str, &str)> {
    let (k, v) = line.split_once('=')?;
    let word = !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    (word && !v.is_empty()).then_some((k, v))
}

/// Leading decimal digits of `s` as a number, and whether any were there (`(\d+)`).
fn digits(s: &str) -> Option<i64> {
    let end = s.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    s[..end].parse().ok()
}

fn lines(bytes: &[u8]) -> impl Iterator<Item = &str> {
    // Perl reads bytes; our files are ASCII, and anything else simply fails to match.
    bytes.split(|b| *b == b'\n').map(|l| std::str::from_utf8(l).unwrap_or(""))
}

fn user_name(uid: u32) -> Option<String> {
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 1024];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into pw and buf, which we own and size.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points into buf, NUL-terminated.
    Some(unsafe { std::ffi::CStr::from_ptr(pw.pw_name) }.to_string_lossy().into_owned())
}

struct Scanner<'a> {
    cd: &'a mut dyn ControlDir,
    layout: Layout,
    report: ScanReport,
}

impl Scanner<'_> {
    fn read_all(&mut self, path: &str) -> Option<Vec<u8>> {
        let r = self.cd.read(path, None, &mut |_| false);
        if let Some(b) = &r {
            self.report.files_read += 1;
            self.report.bytes_read += b.len() as u64;
        }
        r
    }

    fn stat(&mut self, path: &str) -> Option<Meta> {
        self.report.stats += 1;
        self.cd.stat(path)
    }

    /// One job; None when GMJobsInfo would skip it.
    fn job(&mut self, state_dir: &str, id: &str) -> Option<Summary> {
        let layout = self.layout;
        let mut s = Summary { id: id.to_string(), ..Default::default() };
        // .local
        let local = self.read_all(&layout.file_path(id, "local"))?;
        let mut sessiondir = String::new();
        for line in lines(&local) {
            if let Some((k, v)) = key_value(line) {
                s.local_keys += 1;
                match k {
                    "queue" => s.share = v.to_string(),
                    "localid" => s.localid = v.to_string(),
                    "interface" => s.interface = v.to_string(),
                    "sessiondir" => sessiondir = v.to_string(),
                    _ => {}
                }
            }
        }
        if s.interface.is_empty() {
            s.interface = "org.nordugrid.gridftpjob".into();
        }
        // .status: first line, owner and mtime.
        let (meta, first) = self.cd.read_status(&layout.status_path(state_dir, id))?;
        self.report.files_read += 1;
        self.report.bytes_read += first.len() as u64;
        let first = String::from_utf8_lossy(&first).trim_end_matches('\n').to_string();
        if first.is_empty() {
            return None;
        }
        s.status = first;
        let _owner = user_name(meta.uid);
        let _modified = meta.mtime;
        if s.localid.is_empty() {
            s.localid = "UNDEFINEDVALUE".into();
        }
        // .failed, if present: up to 1024 bytes.
        let failed = layout.file_path(id, "failed");
        if self.stat(&failed).is_some() {
            if let Some(b) = self.cd.read(&failed, Some(1024), &mut |_| false) {
                self.report.files_read += 1;
                self.report.bytes_read += b.len() as u64;
                if s.status == "FINISHED" {
                    let text = String::from_utf8_lossy(&b);
                    s.status =
                        if text.contains("User requested to cancel the job") { "KILLED" } else { "FAILED" }.into();
                }
            }
        }
        // .grami
        if let Some(g) = self.read_all(&layout.file_path(id, "grami")) {
            for line in lines(&g) {
                let Some(rest) = line.strip_prefix("joboption_") else { continue };
                let Some((param, value)) = rest.split_once('=') else { continue };
                if param.is_empty() || !param.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    continue;
                }
                if let Some(q) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
                    let strip = |v: &str| {
                        v.strip_prefix(sessiondir.as_str()).map(|r| r.trim_start_matches('/')).unwrap_or(v).to_string()
                    };
                    match param {
                        "stdout" => s.stdout = strip(q),
                        p if p.starts_with("runtime_") => s.runtimes.push(q.to_string()),
                        _ => {}
                    }
                } else if !value.is_empty() && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    match param {
                        "count" => s.count = digits(value).unwrap_or(0),
                        "walltime" => s.reqwalltime = digits(value).unwrap_or(0),
                        "cputime" => s.reqcputime = digits(value).unwrap_or(0),
                        _ => {}
                    }
                }
            }
        }
        // .description: lines until the language is known.
        let desc_path = layout.file_path(id, "description");
        let lang = |b: &[u8]| -> Option<&'static str> {
            let mut ls = lines(b).filter(|l| !l.is_empty());
            let first = ls.next()?;
            if first.trim_start().starts_with(['&', '+', '|', '(']) {
                return Some("rsl");
            }
            let adl = "http://www.eu-emi.eu/es/2010/12/adl";
            let jsdl = "http://schemas.ggf.org/jsdl/2005/11/jsdl";
            for l in [Some(first), ls.next()].into_iter().flatten() {
                if l.contains(adl) {
                    return Some("adl");
                }
                if l.contains(jsdl) {
                    return Some("jsdl");
                }
            }
            None
        };
        if let Some(d) = self.cd.read(&desc_path, None, &mut |b| lang(b).is_some()) {
            self.report.files_read += 1;
            self.report.bytes_read += d.len() as u64;
            s.description = lang(&d).unwrap_or("").to_string();
        }
        // .diag, if non-empty.
        let diag = layout.file_path(id, "diag");
        if self.stat(&diag).is_some_and(|m| m.size > 0) {
            if let Some(d) = self.read_all(&diag) {
                let (mut kernel, mut user) = (None, None);
                let mut nodes = std::collections::BTreeSet::new();
                for line in lines(&d) {
                    if let Some(v) = line.strip_prefix("nodename=") {
                        let n: String = v.chars().take_while(|c| !c.is_whitespace()).collect();
                        if !n.is_empty() {
                            nodes.insert(n);
                        }
                    } else if let Some(v) = line.strip_prefix("WallTime=") {
                        s.walltime = digits(v).or(s.walltime);
                    } else if let Some(v) = line.strip_prefix("exitcode=") {
                        s.exitcode = digits(v).or(s.exitcode);
                    } else if let Some(v) = line.strip_prefix("AverageTotalMemory=") {
                        if let Some(n) = digits(v).filter(|n| v[n.to_string().len()..].starts_with("kB")) {
                            s.usedmem = Some(n);
                        }
                    } else if let Some(v) = line.strip_prefix("KernelTime=") {
                        kernel = digits(v).or(kernel);
                    } else if let Some(v) = line.strip_prefix("UserTime=") {
                        user = digits(v).or(user);
                    }
                }
                s.nodenames = nodes.into_iter().collect();
                if let (Some(k), Some(u)) = (kernel, user) {
                    s.cputime = Some(k + u);
                }
            }
        }
        Some(s)
    }
}

/// Scan a control directory as GMJobsInfo collect() does.
pub fn scan(cd: &mut dyn ControlDir, layout: Layout) -> std::io::Result<ScanReport> {
    let mut sc = Scanner { cd, layout, report: ScanReport { layout: layout.name().into(), ..Default::default() } };
    let start = Instant::now();
    let mut per_second: Vec<u64> = Vec::new();
    for dir in layout.listed_dirs() {
        let names = sc.cd.list(dir)?;
        let ids: Vec<String> =
            names.iter().filter(|n| n.contains(".status")).filter_map(|n| layout.id_from_status_name(n)).collect();
        sc.report.listed += ids.len() as u64;
        for id in ids {
            match sc.job(dir, &id) {
                Some(summary) => {
                    sc.report.jobs += 1;
                    *sc.report.states.entry(summary.status.clone()).or_insert(0) += 1;
                    sc.report.digest = sc.report.digest.wrapping_add(summary.hash());
                    let sec = start.elapsed().as_secs() as usize;
                    if per_second.len() <= sec {
                        per_second.resize(sec + 1, 0);
                    }
                    per_second[sec] += 1;
                }
                None => sc.report.skipped += 1,
            }
        }
    }
    let mut r = sc.report;
    r.elapsed_s = start.elapsed().as_secs_f64();
    r.jobs_per_s = if r.elapsed_s > 0.0 { r.jobs as f64 / r.elapsed_s } else { 0.0 };
    r.per_second = per_second;
    Ok(r)
}

/// A control directory in a mounted file system, read with plain system calls.
pub struct PosixDir {
    root: std::path::PathBuf,
    buf: Vec<u8>,
}

impl PosixDir {
    pub fn new(root: impl Into<std::path::PathBuf>) -> PosixDir {
        PosixDir { root: root.into(), buf: vec![0; 8192] }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }
}

fn meta_of(m: &std::fs::Metadata) -> Meta {
    use std::os::unix::fs::MetadataExt;
    Meta { uid: m.uid(), mtime: m.mtime(), size: m.size() }
}

impl ControlDir for PosixDir {
    fn list(&mut self, dir: &str) -> std::io::Result<Vec<String>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(self.path(dir))? {
            v.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(v)
    }

    fn read(&mut self, path: &str, limit: Option<usize>, until: &mut dyn FnMut(&[u8]) -> bool) -> Option<Vec<u8>> {
        use std::io::Read;
        let mut f = std::fs::File::open(self.path(path)).ok()?;
        let mut out = Vec::new();
        loop {
            let want = limit.map_or(self.buf.len(), |l| (l - out.len()).min(self.buf.len()));
            if want == 0 {
                break;
            }
            match f.read(&mut self.buf[..want]) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&self.buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
            if until(&out) {
                break;
            }
        }
        Some(out)
    }

    fn read_status(&mut self, path: &str) -> Option<(Meta, Vec<u8>)> {
        use std::io::Read;
        let mut f = std::fs::File::open(self.path(path)).ok()?;
        let meta = f.metadata().map(|m| meta_of(&m)).unwrap_or_default();
        let mut out = Vec::new();
        // PerlIO fills its buffer once; a line without its newline reads on to EOF.
        loop {
            match f.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&self.buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
            if let Some(p) = out.iter().position(|b| *b == b'\n') {
                out.truncate(p + 1);
                break;
            }
        }
        Some((meta, out))
    }

    fn stat(&mut self, path: &str) -> Option<Meta> {
        std::fs::metadata(self.path(path)).ok().map(|m| meta_of(&m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_patterns() {
        assert_eq!(key_value("queue=grid"), Some(("queue", "grid")));
        assert_eq!(key_value("failedstate="), None);
        assert_eq!(key_value("bad key=x"), None);
        assert_eq!(key_value("voms=/atlas/Role=NULL"), Some(("voms", "/atlas/Role=NULL")));
        assert_eq!(digits("1234.0s"), Some(1234));
        assert_eq!(digits("x1"), None);
    }
}
