//! Who the request being served comes from, for the one allocation rule
//! that depends on it: the blocks the superblock reserves for root
//! (`s_r_blocks_count`, mkfs's `-m`) go only to the reserve's user
//! (`s_def_resuid`), to members of its group (`s_def_resgid`, unless that is
//! root's group) and to holders of CAP_SYS_RESOURCE, as the kernel's
//! `ext4_has_free_clusters` decides.
//!
//! The frontend names the requester around each request it serves
//! ([`Serving::as_requester`]). Work with no requester named (write-back,
//! unmount, in-process callers such as the crate's tests) is the file
//! system's own and may take the reserve, as the kernel's write-back takes
//! the blocks reserved when the data was written.

use std::cell::Cell;
use std::marker::PhantomData;

/// What a request's header says of its caller, and how to learn the rest.
#[derive(Clone, Copy, Debug)]
pub struct Requester {
    /// The caller's file-system uid and gid.
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The caller's supplementary groups and whether it holds
    /// CAP_SYS_RESOURCE; asked only when an allocation would otherwise
    /// take root's blocks (it may read /proc).
    pub details: fn(&Requester) -> Details,
}

/// What the request header does not carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    pub groups: Vec<u32>,
    pub sys_resource: bool,
}

impl Details {
    /// No supplementary groups and no capability: for callers that cannot
    /// learn more.
    pub fn default_for(_: &Requester) -> Details {
        Details::default()
    }
}

/// The request being served, and the answer once asked: an allocation
/// inside the reserve asks for each block run, and the details may cost a
/// read of /proc.
#[derive(Clone, Copy)]
struct Current {
    who: Requester,
    /// (resuid, resgid, may take the reserve)
    answer: Option<(u32, u32, bool)>,
}

thread_local! {
    static SERVING: Cell<Option<Current>> = const { Cell::new(None) };
}

/// This thread serves `Requester`'s request until dropped.
pub struct Serving {
    previous: Option<Current>,
    /// The naming belongs to this thread: not Send.
    _thread: PhantomData<*const ()>,
}

impl Serving {
    pub fn as_requester(who: Requester) -> Serving {
        Serving { previous: SERVING.replace(Some(Current { who, answer: None })), _thread: PhantomData }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        SERVING.set(self.previous);
    }
}

/// Whether the request this thread serves may take root's reserved blocks
/// on a volume whose reserve belongs to `resuid` and `resgid`.
pub(crate) fn may_take_root_reserve(resuid: u32, resgid: u32) -> bool {
    let Some(mut current) = SERVING.get() else { return true };
    if let Some((u, g, may)) = current.answer {
        if (u, g) == (resuid, resgid) {
            return may;
        }
    }
    let who = current.who;
    let may = who.uid == resuid || (resgid != 0 && who.gid == resgid) || {
        let details = (who.details)(&who);
        (resgid != 0 && details.groups.contains(&resgid)) || details.sys_resource
    };
    current.answer = Some((resuid, resgid, may));
    SERVING.set(Some(current));
    may
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_group_24(_: &Requester) -> Details {
        Details { groups: vec![4, 24], sys_resource: false }
    }

    fn with_cap(_: &Requester) -> Details {
        Details { groups: vec![], sys_resource: true }
    }

    fn user(uid: u32, gid: u32, details: fn(&Requester) -> Details) -> Requester {
        Requester { uid, gid, pid: 1, details }
    }

    thread_local! {
        static ASKED: Cell<u32> = const { Cell::new(0) };
    }

    fn counted(_: &Requester) -> Details {
        ASKED.set(ASKED.get() + 1);
        Details { groups: vec![24], sys_resource: false }
    }

    #[test]
    fn the_details_are_read_once_a_request() {
        for _request in 0..2 {
            let _s = Serving::as_requester(user(1000, 1000, counted));
            for _allocation in 0..5 {
                assert!(may_take_root_reserve(0, 24));
            }
        }
        assert_eq!(ASKED.get(), 2);
    }

    #[test]
    fn the_kernels_rule_for_roots_reserve() {
        assert!(may_take_root_reserve(0, 0), "no requester: the file system's own work");
        {
            let _s = Serving::as_requester(user(1000, 1000, Details::default_for));
            assert!(!may_take_root_reserve(0, 0));
            assert!(may_take_root_reserve(1000, 0), "the reserve's user");
            assert!(may_take_root_reserve(0, 1000), "the reserve's group");
            {
                let _inner = Serving::as_requester(user(0, 0, Details::default_for));
                assert!(may_take_root_reserve(0, 0), "root is the default reserve's user");
            }
            assert!(!may_take_root_reserve(0, 0), "the outer requester is back");
        }
        {
            let _s = Serving::as_requester(user(1000, 1000, in_group_24));
            assert!(may_take_root_reserve(0, 24), "a supplementary group");
            assert!(!may_take_root_reserve(0, 0), "root's group never names the reserve's group");
        }
        {
            let _s = Serving::as_requester(user(7, 0, Details::default_for));
            assert!(!may_take_root_reserve(0, 0), "gid 0 alone is not enough");
        }
        {
            let _s = Serving::as_requester(user(1000, 1000, with_cap));
            assert!(may_take_root_reserve(0, 0), "CAP_SYS_RESOURCE");
        }
        assert!(may_take_root_reserve(0, 0), "dropped: no requester again");
    }
}
