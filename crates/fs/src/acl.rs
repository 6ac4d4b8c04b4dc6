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
    fn xattr_round_trip_and_validation() {
        let acl = Acl(vec![e(USER_OBJ, 6, NO_ID), e(USER, 5, 1000), e(USER, 4, 1001), e(GROUP_OBJ, 4, NO_ID), e(MASK, 7, NO_ID), e(OTHER, 0, NO_ID)]);
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
        let mut acl = Acl(vec![e(USER_OBJ, 7, NO_ID), e(USER, 7, 5), e(GROUP_OBJ, 5, NO_ID), e(MASK, 7, NO_ID), e(OTHER, 7, NO_ID)]);
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
        let mut acl = Acl(vec![e(USER_OBJ, 7, NO_ID), e(USER, 7, 9), e(GROUP_OBJ, 7, NO_ID), e(MASK, 7, NO_ID), e(OTHER, 7, NO_ID)]);
        assert_eq!(acl.create_masq(0o42750), (0o42750, true));
        assert_eq!(acl.0.iter().map(|x| x.perm).collect::<Vec<_>>(), vec![7, 7, 7, 5, 0]);
    }
}
