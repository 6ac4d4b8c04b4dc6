//! POSIX ACL rules (the kernel's fs/posix_acl.c, as ext4 applies them):
//! validity, the mode an access ACL is equivalent to, chmod, and what a new
//! inode inherits from its directory's default ACL. Pure functions over the
//! VFS xattr form (`system.posix_acl_*`, version 2, 8-byte entries); the
//! on-disk conversion lives in `ondisk::xattr`.

use crate::error::{FsError, Result};

pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER: u16 = 0x20;

const XATTR_VERSION: u32 = 2;
/// The id the VFS form carries in entries without one.
const NO_ID: u32 = u32::MAX;
const RWX: u16 = 0o7;
const PERMS: u16 = 0o777;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// An ACL in the kernel's canonical order (validated on parse).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl(pub Vec<Entry>);

/// access(2)'s bits, as a permission check asks for them.
pub const MAY_READ: u16 = 4;
pub const MAY_WRITE: u16 = 2;
pub const MAY_EXEC: u16 = 1;

/// Who asks, as far as a check here can know: one user and one group.
/// Supplementary groups are not part of it (callers that have only a uid
/// and a gid check less than the kernel would, and refuse more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
}

/// What a permission check needs of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The whole i_mode (type bits too: root's rules differ for directories).
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
}

/// The kernel's `generic_permission` (fs/namei.c) for `who` wanting `want`
/// (MAY_* bits) of an inode owned as `owner`, with its access ACL if it has
/// one (`posix_acl_permission`). Root passes as with CAP_DAC_OVERRIDE and
/// CAP_DAC_READ_SEARCH: anything, except executing a non-directory that has
/// no execute bit at all. The one evaluator of the engine and the frontend.
pub fn permits(owner: Owner, acl: Option<&Acl>, who: Cred, want: u16) -> bool {
    let want = want & RWX;
    let is_dir = owner.mode & 0o170000 == 0o040000;
    if who.uid == 0 {
        return want & MAY_EXEC == 0 || is_dir || owner.mode & 0o111 != 0;
    }
    let bits = if who.uid == owner.uid {
        (owner.mode >> 6) & RWX
    } else {
        // The ACL decides for everyone but the owner, when the group class
        // grants anything (the kernel skips it otherwise). An ACL without an
        // entry that decides is malformed: the kernel's -EIO, refused.
        if let (Some(acl), true) = (acl, owner.mode & 0o070 != 0) {
            return acl.permission(owner, who, want).unwrap_or(false);
        }
        if who.gid == owner.gid {
            (owner.mode >> 3) & RWX
        } else {
            owner.mode & RWX
        }
    };
    bits & want == want
}

fn invalid(why: &str) -> FsError {
    FsError::Invalid(format!("ACL: {why}"))
}

impl Acl {
    /// Parse the VFS xattr form; the ACL must be valid (`posix_acl_valid`).
    pub fn from_xattr(value: &[u8]) -> Result<Acl> {
        if value.len() < 4 || !(value.len() - 4).is_multiple_of(8) {
            return Err(invalid("size"));
        }
        if u32::from_le_bytes([value[0], value[1], value[2], value[3]]) != XATTR_VERSION {
            return Err(invalid("version"));
        }
        let entries = value[4..]
            .chunks_exact(8)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        let acl = Acl(entries);
        acl.validate()?;
        Ok(acl)
    }

    pub fn to_xattr(&self) -> Vec<u8> {
        let mut out = XATTR_VERSION.to_le_bytes().to_vec();
        for e in &self.0 {
            let id = if matches!(e.tag, USER | GROUP) { e.id } else { NO_ID };
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    /// The kernel's `posix_acl_valid`: USER_OBJ, named users, GROUP_OBJ,
    /// named groups, MASK (required when there are named entries), OTHER, in
    /// that order, each object entry once, permissions within rwx. (The
    /// kernel leaves the order of named ids to user space.) An empty ACL is
    /// "no ACL" and never reaches here: the kernel removes the attribute.
    pub fn validate(&self) -> Result<()> {
        #[derive(PartialEq)]
        enum State {
            UserObj,
            Users,
            Groups,
            Other,
            Done,
        }
        let mut state = State::UserObj;
        let mut needs_mask = false;
        for e in &self.0 {
            if e.perm & !RWX != 0 {
                return Err(invalid("permission bits"));
            }
            state = match (e.tag, state) {
                (USER_OBJ, State::UserObj) => State::Users,
                (USER, State::Users) => {
                    needs_mask = true;
                    State::Users
                }
                (GROUP_OBJ, State::Users) => State::Groups,
                (GROUP, State::Groups) => {
                    needs_mask = true;
                    State::Groups
                }
                (MASK, State::Groups) => State::Other,
                (OTHER, State::Other) => State::Done,
                (OTHER, State::Groups) if !needs_mask => State::Done,
                _ => return Err(invalid("entries missing, repeated or out of order")),
            };
        }
        if state != State::Done {
            return Err(invalid("entries missing"));
        }
        Ok(())
    }

    /// `posix_acl_permission`: Some(granted), or None when no entry decides
    /// (no OTHER entry: a malformed ACL).
    fn permission(&self, owner: Owner, who: Cred, want: u16) -> Option<bool> {
        let mask = self.0.iter().find(|e| e.tag == MASK).map(|e| e.perm);
        // An entry that matches is limited by the mask, if there is one.
        let masked = |perm: u16| perm & mask.unwrap_or(RWX) & want == want;
        let mut in_a_group = false;
        for e in &self.0 {
            match e.tag {
                USER_OBJ if who.uid == owner.uid => return Some(e.perm & want == want),
                USER if e.id == who.uid => return Some(masked(e.perm)),
                GROUP_OBJ if who.gid == owner.gid => {
                    in_a_group = true;
                    if e.perm & want == want {
                        return Some(masked(e.perm));
                    }
                }
                GROUP if e.id == who.gid => {
                    in_a_group = true;
                    if e.perm & want == want {
                        return Some(masked(e.perm));
                    }
                }
                // A matching group that did not grant it refuses; else OTHER decides.
                OTHER => return Some(!in_a_group && e.perm & want == want),
                _ => {}
            }
        }
        None
    }

    /// `posix_acl_equiv_mode`: the permission bits this ACL stands for, and
    /// whether the mode says it all (no MASK and no named entries).
    pub fn equiv_mode(&self) -> (u16, bool) {
        let mut mode = 0u16;
        let mut exact = true;
        for e in &self.0 {
            let p = e.perm & RWX;
            match e.tag {
                USER_OBJ => mode |= p << 6,
                GROUP_OBJ => mode |= p << 3,
                OTHER => mode |= p,
                // The mask, not GROUP_OBJ, is what the group bits show.
                MASK => {
                    mode = (mode & !0o070) | (p << 3);
                    exact = false;
                }
                _ => exact = false,
            }
        }
        (mode, exact)
    }

    /// `__posix_acl_chmod`: the owner, other and mask (else group) entries
    /// take the new permission bits.
    pub fn chmod(&mut self, mode: u16) {
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &mut self.0 {
            match e.tag {
                USER_OBJ => e.perm = (mode >> 6) & RWX,
                OTHER => e.perm = mode & RWX,
                MASK => e.perm = (mode >> 3) & RWX,
                GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & RWX,
                _ => {}
            }
        }
    }

    /// `posix_acl_create_masq`: restrict a copy of the directory's default
    /// ACL by the requested mode and the mode by it. Returns the new mode
    /// (type and set-id bits kept) and whether the ACL must be stored (it
    /// says more than the mode).
    pub fn create_masq(&mut self, mode: u16) -> (u16, bool) {
        let mut m = mode & PERMS;
        let mut exact = true;
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &mut self.0 {
            match e.tag {
                USER_OBJ => {
                    e.perm &= (m >> 6) & RWX;
                    m &= (e.perm << 6) | !0o700;
                }
                OTHER => {
                    e.perm &= m & RWX;
                    m &= e.perm | !0o007;
                }
                USER | GROUP => exact = false,
                MASK => exact = false,
                _ => {}
            }
        }
        // The group class: the mask if there is one, else GROUP_OBJ.
        let class = if has_mask { MASK } else { GROUP_OBJ };
        if let Some(e) = self.0.iter_mut().find(|e| e.tag == class) {
            e.perm &= (m >> 3) & RWX;
            m &= (e.perm << 3) | !0o070;
        }
        ((mode & !PERMS) | (m & PERMS), !exact)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> Entry {
        Entry { tag, perm, id }
    }

    fn minimal(u: u16, g: u16, o: u16) -> Acl {
        Acl(vec![e(USER_OBJ, u, NO_ID), e(GROUP_OBJ, g, NO_ID), e(OTHER, o, NO_ID)])
    }

    #[test]
    fn permission_by_mode() {
        let file = Owner { mode: 0o100640, uid: 1000, gid: 100 };
        let c = |uid, gid| Cred { uid, gid };
        assert!(permits(file, None, c(1000, 1), MAY_READ | MAY_WRITE));
        assert!(permits(file, None, c(2000, 100), MAY_READ));
        assert!(!permits(file, None, c(2000, 100), MAY_WRITE));
        assert!(!permits(file, None, c(2000, 200), MAY_READ));
        assert!(!permits(file, None, c(0, 0), MAY_EXEC), "root executes only what has an execute bit");
        assert!(permits(file, None, c(0, 0), MAY_READ | MAY_WRITE));
        let private = Owner { mode: 0o040700, uid: 1000, gid: 1000 };
        assert!(permits(private, None, c(1000, 1000), MAY_EXEC | MAY_READ));
        assert!(!permits(private, None, c(2000, 1000), MAY_EXEC), "the group has nothing");
        assert!(permits(private, None, c(0, 0), MAY_EXEC | MAY_READ), "root searches any directory");
        // The owner's bits decide for the owner, even when others have more.
        let odd = Owner { mode: 0o040077, uid: 1000, gid: 1000 };
        assert!(!permits(odd, None, c(1000, 1000), MAY_EXEC));
        assert!(permits(odd, None, c(2000, 2000), MAY_EXEC));
    }

    #[test]
    fn permission_by_acl() {
        // user::rwx user:2000:r-x group::--- group:300:--x mask::r-x other::---
        let acl = Acl(vec![
            e(USER_OBJ, 7, NO_ID),
            e(USER, 5, 2000),
            e(GROUP_OBJ, 0, NO_ID),
            e(GROUP, 1, 300),
            e(MASK, 5, NO_ID),
            e(OTHER, 0, NO_ID),
        ]);
        acl.validate().unwrap();
        let dir = Owner { mode: 0o040750, uid: 1000, gid: 1000 };
        let c = |uid, gid| Cred { uid, gid };
        assert!(permits(dir, Some(&acl), c(2000, 9), MAY_EXEC | MAY_READ), "named user");
        assert!(!permits(dir, Some(&acl), c(2000, 9), MAY_WRITE), "named user, beyond the mask");
        assert!(permits(dir, Some(&acl), c(3000, 300), MAY_EXEC), "named group");
        assert!(!permits(dir, Some(&acl), c(3000, 300), MAY_READ), "a matching group that does not grant refuses");
        assert!(!permits(dir, Some(&acl), c(3000, 1000), MAY_EXEC), "owning group: --- (the mode's 5 is the mask)");
        assert!(!permits(dir, Some(&acl), c(4000, 4000), MAY_EXEC), "other");
        assert!(permits(dir, Some(&acl), c(1000, 1), MAY_READ | MAY_WRITE | MAY_EXEC), "the owner: the mode");
        // A mask that takes the named user's bits away.
        let mut masked = acl.clone();
        masked.chmod(0o700);
        assert!(!permits(Owner { mode: 0o040700, ..dir }, Some(&masked), c(2000, 9), MAY_EXEC));
        // No group-class bits: the kernel does not consult the ACL.
        assert!(!permits(Owner { mode: 0o040700, ..dir }, Some(&acl), c(2000, 9), MAY_EXEC));
    }

    #[test]
    fn xattr_round_trip_and_validation() {
        let acl = Acl(vec![
            e(USER_OBJ, 6, NO_ID),
            e(USER, 5, 1000),
            e(USER, 4, 1001),
            e(GROUP_OBJ, 4, NO_ID),
            e(MASK, 7, NO_ID),
            e(OTHER, 0, NO_ID),
        ]);
        assert_eq!(Acl::from_xattr(&acl.to_xattr()).unwrap(), acl);
        // A named entry without a mask, repeated ids, wrong order, bad bits.
        let bad = [
            vec![e(USER_OBJ, 6, 0), e(USER, 5, 1000), e(GROUP_OBJ, 4, 0), e(OTHER, 0, 0)],
            vec![e(USER_OBJ, 6, 0), e(GROUP_OBJ, 4, 0), e(MASK, 7, 0), e(MASK, 7, 0), e(OTHER, 0, 0)],
            vec![e(USER_OBJ, 6, 0), e(GROUP_OBJ, 4, 0), e(OTHER, 0, 0), e(OTHER, 0, 0)],
            vec![e(GROUP_OBJ, 4, 0), e(USER_OBJ, 6, 0), e(OTHER, 0, 0)],
            vec![e(USER_OBJ, 8, 0), e(GROUP_OBJ, 4, 0), e(OTHER, 0, 0)],
            vec![e(USER_OBJ, 6, 0), e(OTHER, 0, 0)],
        ];
        for b in bad {
            assert!(Acl::from_xattr(&Acl(b.clone()).to_xattr()).is_err(), "{b:?}");
        }
        assert!(Acl::from_xattr(&[2, 0, 0]).is_err());
        assert!(Acl::from_xattr(&[1, 0, 0, 0]).is_err(), "version 1 is the disk form");
    }

    #[test]
    fn equiv_mode_uses_the_mask_for_group_bits() {
        assert_eq!(minimal(4, 7, 6).equiv_mode(), (0o476, true));
        let acl = Acl(vec![e(USER_OBJ, 7, NO_ID), e(GROUP_OBJ, 7, NO_ID), e(MASK, 4, NO_ID), e(OTHER, 1, NO_ID)]);
        assert_eq!(acl.equiv_mode(), (0o741, false));
    }

    #[test]
    fn chmod_changes_mask_not_group_obj() {
        let mut acl = Acl(vec![
            e(USER_OBJ, 7, NO_ID),
            e(USER, 7, 5),
            e(GROUP_OBJ, 5, NO_ID),
            e(MASK, 7, NO_ID),
            e(OTHER, 7, NO_ID),
        ]);
        acl.chmod(0o640);
        assert_eq!(acl.0.iter().map(|x| x.perm).collect::<Vec<_>>(), vec![6, 7, 5, 4, 0]);
        let mut m = minimal(7, 7, 7);
        m.chmod(0o751);
        assert_eq!(m, minimal(7, 5, 1));
    }

    #[test]
    fn create_masq_as_the_kernel() {
        // generic/099: default u::r-x,g::r--,o::--- and touch (0666): r--r----- and an exact ACL.
        let mut acl = minimal(5, 4, 0);
        assert_eq!(acl.create_masq(0o100666), (0o100440, false));
        assert_eq!(acl, minimal(4, 4, 0));
        // Named entries keep their bits; the mask takes the group class.
        let mut acl = Acl(vec![
            e(USER_OBJ, 7, NO_ID),
            e(USER, 7, 9),
            e(GROUP_OBJ, 7, NO_ID),
            e(MASK, 7, NO_ID),
            e(OTHER, 7, NO_ID),
        ]);
        assert_eq!(acl.create_masq(0o42750), (0o42750, true));
        assert_eq!(acl.0.iter().map(|x| x.perm).collect::<Vec<_>>(), vec![7, 7, 7, 5, 0]);
    }
}
