//! How much memory the daemon may use: the smaller of the machine's memory
//! and its memory cgroup's limit (v2 `memory.max`, v1
//! `memory.limit_in_bytes`). The in-memory buffers are capped by it, so that
//! a mount in a small container or benchmark cgroup is not OOM-killed by its
//! own defaults (measured: 256 MiB of delayed data, 256 MiB of cache and
//! 64 MiB of gathered data in a 256 MiB cgroup killed the daemon).

use std::path::{Path, PathBuf};

/// The daemon's memory budget in bytes (None when nothing can be read).
pub fn budget() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| mem_total(&m));
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|c| cgroup_limit(&c, Path::new("/sys/fs/cgroup"), &|p| std::fs::read_to_string(p).ok()));
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// The metadata cache when `cache_mb=` is not given: an eighth of the
/// budget, at least 256 MiB (the mount then caps it to a quarter); 256 MiB
/// when the budget is unknown. The kernel's ext4
/// keeps metadata in the page cache, bounded by memory alone; a fixed 256 MiB
/// thrashed as soon as a workload's metadata outgrew it. Measured: 100,000
/// files round-robin over 60,000 directories (journal-size at the paper's
/// scale, 274 MiB of directory blocks and inodes) evicted 26,000 blocks and
/// read them back as 583 MiB of log in lazy mode, which made lazy 1.9x
/// slower than ordered on `cmr`; with 1 GiB nothing was evicted.
pub fn cache_bytes(budget: Option<u64>) -> u64 {
    budget.map_or(0, |b| b / 8).max(256 << 20)
}

/// glibc malloc's thresholds for the daemon, scaled to `budget` (bytes).
/// Delayed data is a 4 KiB buffer per block, allocated on the request
/// threads and freed on write-back's: with glibc's defaults each arena's
/// heap grows (mprotect, fresh zeroed pages) and is trimmed back over and
/// over. A profile of an untar put 11% of the daemon's samples in that
/// churn, and letting each arena keep 64 MiB free made the untar about 5%
/// faster (docs/results/writepath.md). glibc applies the thresholds to every
/// arena, and a daemon has up to one per thread: so each arena may keep a
/// 256th of the budget (a daemon of 16 arenas a sixteenth in all), and the
/// caps are reached only on machines of 16 GiB and more. Setting these ends
/// glibc's dynamic mmap threshold, so that one is set too: large buffers
/// come from the heap and are reused, not mapped anew.
pub fn tune_malloc(budget: u64) {
    const MIB: u64 = 1 << 20;
    let (trim, pad, mmap) = malloc_thresholds(budget);
    // SAFETY: mallopt only sets allocator parameters; called before the
    // daemon's threads start.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
        libc::mallopt(libc::M_TOP_PAD, pad);
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap);
    }
    debug_assert!(u64::try_from(mmap).unwrap_or(0) <= 32 * MIB);
}

/// (trim threshold, top pad, mmap threshold) for `budget`: a 256th, a
/// 1024th and a 512th of it, within glibc's limits and never below its
/// defaults.
fn malloc_thresholds(budget: u64) -> (i32, i32, i32) {
    const MIB: u64 = 1 << 20;
    let part = |div: u64, lo: u64, hi: u64| (budget / div).clamp(lo, hi) as i32;
    // glibc refuses an mmap threshold above 32 MiB (HEAP_MAX_SIZE / 2).
    (part(256, 128 << 10, 64 * MIB), part(1024, 128 << 10, 16 * MIB), part(512, 128 << 10, 32 * MIB))
}

/// What malloc holds, over all its arenas: (bytes in use, bytes free but
/// kept resident in its heaps, bytes in mmapped chunks).
pub fn malloc_figures() -> (u64, u64, u64) {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks as u64, m.fordblks as u64, m.hblkhd as u64)
}

/// The free heap memory that may stay resident before the daemon gives it
/// back: a 32nd of the budget, at least 8 MiB. Under the bench's 512 MiB
/// cgroup that is 16 MiB; on a machine of 24 GiB, 768 MiB, which the
/// daemon's buffers never leave free, so it never trims there.
fn trim_slack(budget: u64) -> u64 {
    (budget / 32).max(8 << 20)
}

/// Gives free heap memory back to the system once memory is short
/// ([`trim_if_over`]), with the thresholds of a memory budget.
pub struct Trimmer {
    slack: u64,
    pad: usize,
    headroom: Headroom,
}

impl Trimmer {
    pub fn new(budget: u64) -> Trimmer {
        Trimmer { slack: trim_slack(budget), pad: top_pad(budget), headroom: Headroom::find() }
    }

    /// One look (the daemon takes one a second); whether it trimmed.
    pub fn tick(&self) -> bool {
        trim_if_over(self.slack, self.headroom.bytes(), self.pad)
    }
}

/// How much memory is left before the daemon's limit: the binding cgroup's
/// limit minus its usage (which counts the page cache its processes use),
/// and never more than the machine's MemAvailable (a cgroup may allow more
/// than the machine has).
struct Headroom {
    cgroup: Option<(PathBuf, u64)>,
}

impl Headroom {
    /// Where to look, found once: the daemon does not change cgroups.
    fn find() -> Headroom {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|c| binding_cgroup(&c, Path::new("/sys/fs/cgroup"), &|p| std::fs::read_to_string(p).ok()));
        Headroom { cgroup }
    }

    /// The bytes left now (None when nothing can be read).
    fn bytes(&self) -> Option<u64> {
        let cgroup = self.cgroup.as_ref().and_then(|(usage, limit)| {
            let used: u64 = std::fs::read_to_string(usage).ok()?.trim().parse().ok()?;
            Some(limit.saturating_sub(used))
        });
        let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| mem_available(&m));
        least_known(cgroup, machine)
    }
}

/// The smaller of two figures, either of which may be unknown.
fn least_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Give free heap memory back to the system when more than `slack` bytes
/// of it are resident and memory is short (less than twice `slack` left
/// before the limit). The daemon's allocations come in many sizes (blocks,
/// replies, write-back runs) from a few arenas, and glibc returns only the
/// free memory at a heap's top: the rest stays resident, charged to the
/// memory cgroup and so taken from the page cache the files need. Measured
/// in Postmark under 512 MiB: 126 MiB free in two heaps of 99 MiB each
/// (docs/results/postmark.md). Where memory is not short the page cache
/// loses nothing, and trimming only makes the request threads fault the
/// pages back in: a review measured a churn of files 15-20% slower in a
/// 2 GiB cgroup it never filled, trimmed every second. `pad` is kept at
/// the main heap's top (tune_malloc's top pad). Returns whether it trimmed.
fn trim_if_over(slack: u64, headroom: Option<u64>, pad: usize) -> bool {
    if headroom.is_none_or(|h| h >= 2 * slack) {
        return false;
    }
    let Some(anon) = anonymous_resident() else { return false };
    let (in_use, _, mmapped) = malloc_figures();
    // Stacks and rings are anonymous too; the slack absorbs them.
    if anon.saturating_sub(in_use + mmapped) <= slack {
        return false;
    }
    // SAFETY: malloc_trim releases free pages of every arena; thread-safe.
    unsafe { libc::malloc_trim(pad) };
    true
}

/// tune_malloc's top pad for `budget`, for [`trim_if_over`].
fn top_pad(budget: u64) -> usize {
    malloc_thresholds(budget).1 as usize
}

/// The process's resident memory that no file backs, in bytes
/// (/proc/self/statm: resident minus shared pages).
fn anonymous_resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut f = statm.split_whitespace().skip(1).map(|v| v.parse::<u64>().ok());
    let (resident, shared) = (f.next()??, f.next()??);
    // SAFETY: sysconf only reads a constant.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    Some(resident.saturating_sub(shared) * page)
}

/// MemTotal from /proc/meminfo, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    meminfo_bytes(meminfo, "MemTotal:")
}

/// MemAvailable from /proc/meminfo, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    meminfo_bytes(meminfo, "MemAvailable:")
}

/// The value of `key` (in kB) in /proc/meminfo, in bytes.
fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory limit of the cgroup /proc/self/cgroup names, read through
/// `read` under `root`: v2 ("0::/path", memory.max) or v1 ("N:memory:/path"
/// or a list holding memory, memory.limit_in_bytes). "max" and v1's huge
/// "unlimited" value count as no limit.
fn cgroup_limit(proc_cgroup: &str, root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Option<u64> {
    binding_cgroup(proc_cgroup, root, read).map(|(_, limit)| limit)
}

/// The cgroup whose limit binds the daemon, as (the file holding its usage,
/// the limit): the smallest limit on the way from the daemon's cgroup up to
/// the root, since a parent's limit binds its children (the bench puts the
/// daemon in a child of the limited cgroup).
fn binding_cgroup(proc_cgroup: &str, root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Option<(PathBuf, u64)> {
    let parse = |s: String| s.trim().parse::<u64>().ok().filter(|&v| v < 1 << 60);
    let smallest = |base: PathBuf, rel: &str, limit_file: &str, usage_file: &str| {
        let mut dir = base.join(rel);
        let mut best: Option<(PathBuf, u64)> = None;
        loop {
            if let Some(v) = read(&dir.join(limit_file)).and_then(parse) {
                if best.as_ref().is_none_or(|(_, b)| v < *b) {
                    best = Some((dir.join(usage_file), v));
                }
            }
            if dir == base || !dir.pop() {
                return best;
            }
        }
    };
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let rel = path.trim_start_matches('/');
        let found = if controllers.split(',').any(|c| c == "memory") {
            smallest(root.join("memory"), rel, "memory.limit_in_bytes", "memory.usage_in_bytes")
        } else if controllers.is_empty() {
            smallest(root.to_path_buf(), rel, "memory.max", "memory.current")
        } else {
            None
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_is_the_least_of_the_cgroups_and_the_machines() {
        assert_eq!(least_known(Some(5), Some(3)), Some(3), "a cgroup may allow more than the machine has");
        assert_eq!(least_known(Some(2), Some(3)), Some(2));
        assert_eq!(least_known(None, Some(3)), Some(3), "no cgroup binds");
        assert_eq!(least_known(Some(2), None), Some(2));
        assert_eq!(least_known(None, None), None);
    }

    #[test]
    fn trim_slack_is_a_32nd_of_the_budget_at_least_8_mib() {
        assert_eq!(trim_slack(512 << 20), 16 << 20, "the bench's 512 MiB cgroup");
        assert_eq!(trim_slack(24 << 30), 768 << 20, "a large machine: more than the buffers leave free");
        assert_eq!(trim_slack(64 << 20), 8 << 20, "never below 8 MiB");
    }

    #[test]
    fn trimming_gives_back_free_memory_held_between_live_blocks() {
        const MIB: u64 = 1 << 20;
        // 64 MiB of blocks in this thread's arena; every 16th kept, so the
        // free memory lies between live blocks, where glibc keeps it.
        let mut blocks: Vec<Vec<u8>> = (0..16_384).map(|i| vec![(i % 251) as u8 + 1; 4096]).collect();
        let kept: Vec<Vec<u8>> = blocks.iter_mut().step_by(16).map(std::mem::take).collect();
        drop(blocks);
        assert!(!trim_if_over(MIB, Some(2 * MIB), 0), "memory not short (twice the slack left): kept");
        assert!(!trim_if_over(MIB, None, 0), "headroom unknown: kept");
        let before = anonymous_resident().expect("statm");
        assert!(trim_if_over(MIB, Some(0), 0), "memory short, more than the slack free: given back");
        let after = anonymous_resident().expect("statm");
        assert!(before >= after + 32 * MIB, "resident {} MiB before, {} MiB after", before / MIB, after / MIB);
        assert!(kept.iter().all(|b| b.len() == 4096 && b[0] != 0), "live blocks untouched");
    }

    #[test]
    fn malloc_thresholds_follow_the_budget_within_glibcs_limits() {
        const MIB: i32 = 1 << 20;
        assert_eq!(malloc_thresholds(24 << 30), (64 * MIB, 16 * MIB, 32 * MIB), "a large machine: the caps");
        assert_eq!(malloc_thresholds(256 << 20), (MIB, 256 << 10, 512 << 10), "a 256 MiB cgroup");
        assert_eq!(malloc_thresholds(1 << 20), (128 << 10, 128 << 10, 128 << 10), "never below glibc's defaults");
    }
    use std::collections::HashMap;

    #[test]
    fn the_default_cache_follows_the_budget() {
        const MIB: u64 = 1 << 20;
        assert_eq!(cache_bytes(Some(24 << 30)), 3 << 30, "a 24 GiB machine: an eighth");
        assert_eq!(cache_bytes(Some(1 << 30)), 256 * MIB, "never below the old fixed default");
        assert_eq!(cache_bytes(None), 256 * MIB, "no budget known");
    }

    #[test]
    fn limits_are_found_in_v1_and_v2_and_unlimited_is_none() {
        let files: HashMap<&str, &str> = [
            ("/cg/memory/box/memory.limit_in_bytes", "268435456\n"),
            ("/cg/free/memory.max", "max\n"),
            ("/cg/small/memory.max", "104857600\n"),
            ("/cg/memory/open/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/cg/memory/box/daemon/memory.limit_in_bytes", "9223372036854771712\n"),
        ]
        .into_iter()
        .collect();
        let read = |p: &Path| files.get(p.to_str().unwrap()).map(|s| s.to_string());
        let root = Path::new("/cg");
        assert_eq!(cgroup_limit("12:memory:/box\n0::/free\n", root, &read), Some(256 << 20));
        assert_eq!(cgroup_limit("0::/small\n", root, &read), Some(100 << 20));
        assert_eq!(cgroup_limit("12:memory:/box/daemon\n", root, &read), Some(256 << 20), "a parent's limit binds");
        assert_eq!(cgroup_limit("0::/free\n", root, &read), None);
        assert_eq!(cgroup_limit("4:cpu,memory:/open\n", root, &read), None);
        assert_eq!(
            binding_cgroup("12:memory:/box/daemon\n", root, &read),
            Some((PathBuf::from("/cg/memory/box/memory.usage_in_bytes"), 256 << 20)),
            "the parent binds: its usage is read"
        );
        assert_eq!(
            binding_cgroup("0::/small\n", root, &read),
            Some((PathBuf::from("/cg/small/memory.current"), 100 << 20))
        );
        assert_eq!(mem_available("MemTotal: 8 kB\nMemAvailable:    1024 kB\n"), Some(1 << 20));
        assert_eq!(mem_total("MemTotal:       24684800 kB\nMemFree: 1 kB\n"), Some(24684800 * 1024));
    }
}
