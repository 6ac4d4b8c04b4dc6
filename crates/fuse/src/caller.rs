//! Who made a request, beyond the uid/gid FUSE passes: supplementary groups
//! and effective capabilities from /proc/PID/status, for the two decisions
//! the daemon makes itself: changing the immutable/append-only flags
//! (CAP_LINUX_IMMUTABLE; the kernel's VFS has checked it already, this is a
//! second line) and keeping the set-group-ID bit when an access ACL is set
//! (in the file's group or CAP_FSETID; the kernel's flag for it needs
//! FUSE_SETXATTR_EXT, which we do not ask for).
//! It also tells the engine, when an allocation would take root's reserved
//! blocks, whether the caller may (`fs::requester`).
//! If the process is gone or not visible, uid 0 counts as holding every
//! capability and the request's gid is the only group.

use fusewire::Request;

pub const CAP_FSETID: u32 = 4;
pub const CAP_LINUX_IMMUTABLE: u32 = 9;
pub const CAP_SYS_RESOURCE: u32 = 24;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub cap_effective: u64,
}

impl Caller {
    pub fn of(req: &Request) -> Caller {
        Caller::of_process(req.pid, req.uid, req.gid)
    }

    fn of_process(pid: u32, uid: u32, gid: u32) -> Caller {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
        let mut c = Caller::from_status(uid, gid, status.as_deref());
        // Capabilities held in a user namespace of its own grant nothing
        // here: the kernel asks for them in the initial namespace, and any
        // user may make a namespace (`unshare -Ur`) and hold them all there.
        if in_other_user_namespace(pid) {
            c.cap_effective = 0;
        }
        c
    }

    /// From the text of /proc/PID/status (None: unreadable).
    pub fn from_status(uid: u32, gid: u32, status: Option<&str>) -> Caller {
        let mut c = Caller { uid, gid, groups: Vec::new(), cap_effective: if uid == 0 { u64::MAX } else { 0 } };
        let Some(text) = status else { return c };
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("Groups:") {
                c.groups = v.split_whitespace().filter_map(|g| g.parse().ok()).collect();
            } else if let Some(v) = line.strip_prefix("CapEff:") {
                if let Ok(caps) = u64::from_str_radix(v.trim(), 16) {
                    c.cap_effective = caps;
                }
            }
        }
        c
    }

    pub fn has_cap(&self, cap: u32) -> bool {
        self.cap_effective & (1u64 << cap) != 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Whether process `pid` is in a user namespace other than the daemon's.
/// A process gone or not visible is taken to be in ours.
fn in_other_user_namespace(pid: u32) -> bool {
    static OURS: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let ours = OURS.get_or_init(|| std::fs::read_link("/proc/self/ns/user").ok());
    match (ours, std::fs::read_link(format!("/proc/{pid}/ns/user"))) {
        (Some(ours), Ok(theirs)) => *ours != theirs,
        _ => false,
    }
}

/// The engine's view of `req`'s caller: the header's ids now, the rest
/// from /proc only if the engine asks.
pub fn requester(req: &Request) -> fs::requester::Requester {
    fs::requester::Requester { uid: req.uid, gid: req.gid, pid: req.pid, details: details_from_proc }
}

fn details_from_proc(who: &fs::requester::Requester) -> fs::requester::Details {
    let c = Caller::of_process(who.pid, who.uid, who.gid);
    fs::requester::Details { sys_resource: c.has_cap(CAP_SYS_RESOURCE), groups: c.groups }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_and_capabilities() {
        let status = "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 1000 \nCapEff:\t0000000000000200\n";
        let c = Caller::from_status(1000, 1000, Some(status));
        assert!(c.in_group(24) && c.in_group(1000) && !c.in_group(5));
        assert!(c.has_cap(CAP_LINUX_IMMUTABLE) && !c.has_cap(CAP_FSETID));
        let root_no_caps = Caller::from_status(0, 0, Some("CapEff:\t0000000000000000\n"));
        assert!(!root_no_caps.has_cap(CAP_LINUX_IMMUTABLE), "capabilities, not uid 0, decide when known");
        assert!(Caller::from_status(0, 0, None).has_cap(CAP_FSETID), "unknown process: uid 0 is privileged");
        assert!(!Caller::from_status(7, 7, None).has_cap(CAP_FSETID));
    }
}
