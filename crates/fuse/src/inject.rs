//! `-o inject_panic=SPEC` (for tests): make the requests SPEC names panic,
//! to exercise the request boundary (fusewire's `panics`) and the engine's
//! turn to read-only in the release binary.
//!
//! SPEC is `OP`, `OP@INO` or `OP/NAME`: a FUSE opcode as fuse.h names it
//! without FUSE_ (WRITE, CREATE, LOOKUP, GETATTR, FORGET, INTERRUPT, ...),
//! optionally only for ext4 inode INO (the request's node, as stat shows it;
//! the root is 2) or for the directory entry NAME the request carries
//! (LOOKUP, CREATE, MKDIR, UNLINK, RENAME's old name, LINK's new one).
//!
//! Where it panics: a matching request arms the engine (`fs::inject`), so
//! the first modifying operation it runs panics halfway, holding the write
//! lock (the volume then turns read-only); a request that runs none (GETATTR,
//! LOOKUP, STATFS, ...) panics when its handler returns. FORGET (and
//! BATCH_FORGET, which FORGET names too) and INTERRUPT panic in their
//! handlers. Unset, it costs one branch per request.

use crate::{ext4_ino, Ext4Fuse};
use fusewire::abi::op;
use fusewire::{Errno, Op, Request};
use std::fmt;
use std::str::FromStr;

/// Which requests panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PanicTrigger {
    opcode: u32,
    /// Only requests on this ext4 inode.
    ino: Option<u32>,
    /// Only requests naming this directory entry.
    name: Option<Vec<u8>>,
}

/// Why an `inject_panic=` value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerError {
    UnknownOpcode(String),
    /// INIT and DESTROY never reach the file system: fusewire answers them.
    NotServed(&'static str),
    BadInode(String),
    EmptyName,
}

impl fmt::Display for TriggerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TriggerError::UnknownOpcode(o) => {
                write!(f, "unknown FUSE opcode {o:?} (WRITE, CREATE, LOOKUP, GETATTR, FORGET, ...)")
            }
            TriggerError::NotServed(o) => write!(f, "{o} is answered by the protocol layer, never by the file system"),
            TriggerError::BadInode(i) => write!(f, "{i:?} is not an inode number (OP@INO)"),
            TriggerError::EmptyName => write!(f, "empty entry name (OP/NAME)"),
        }
    }
}

impl std::error::Error for TriggerError {}

impl FromStr for PanicTrigger {
    type Err = TriggerError;

    /// `OP`, `OP@INO` or `OP/NAME`.
    fn from_str(spec: &str) -> Result<Self, TriggerError> {
        let (op_name, target) = match spec.find(['@', '/']) {
            Some(i) => (&spec[..i], Some(spec.split_at(i).1)),
            None => (spec, None),
        };
        let opcode = match op::by_name(op_name) {
            Some(op::BATCH_FORGET) => op::FORGET,
            Some(o @ (op::INIT | op::DESTROY)) => return Err(TriggerError::NotServed(op::name(o).unwrap_or("?"))),
            Some(o) => o,
            None => return Err(TriggerError::UnknownOpcode(op_name.to_owned())),
        };
        let mut t = PanicTrigger { opcode, ino: None, name: None };
        match target.map(|s| s.split_at(1)) {
            None => {}
            Some(("@", ino)) => {
                t.ino = Some(ino.parse().ok().filter(|&i| i > 0).ok_or_else(|| TriggerError::BadInode(ino.to_owned()))?)
            }
            Some((_, "")) => return Err(TriggerError::EmptyName),
            Some((_, name)) => t.name = Some(name.as_bytes().to_vec()),
        }
        Ok(t)
    }
}

impl fmt::Display for PanicTrigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", op::name(self.opcode).unwrap_or("?"))?;
        if let Some(i) = self.ino {
            write!(f, "@{i}")?;
        }
        if let Some(n) = &self.name {
            write!(f, "/{}", String::from_utf8_lossy(n))?;
        }
        Ok(())
    }
}

impl PanicTrigger {
    /// Whether a request (opcode, node, entry name) is one to panic.
    pub(crate) fn matches(&self, opcode: u32, nodeid: u64, name: Option<&[u8]>) -> bool {
        let opcode = if opcode == op::BATCH_FORGET { op::FORGET } else { opcode };
        self.opcode == opcode
            && self.ino.is_none_or(|i| ext4_ino(nodeid) == Ok(i))
            && self.name.as_deref().is_none_or(|n| name == Some(n))
    }
}

impl Ext4Fuse {
    /// Serve a request the trigger names: the engine panics in its first
    /// modifying operation, else it panics here once the handler is done.
    pub(crate) fn serve_armed(&self, req: &Request, op: Op<'_>, out: &mut Vec<u8>) -> Result<(), Errno> {
        let armed = fs::inject::Armed::arm();
        let _ = self.serve_op(req, op, out);
        drop(armed);
        let name = op::name(req.opcode).unwrap_or("?");
        panic!(
            "injected panic (inject_panic): {name} on node {} after its handler, with no write lock held",
            req.nodeid
        )
    }

    /// FORGET and INTERRUPT have handlers of their own: panic there.
    pub(crate) fn panic_if_triggered(&self, opcode: u32, nodeid: u64) {
        if self.inject.as_ref().is_some_and(|t| t.matches(opcode, nodeid, None)) {
            panic!("injected panic (inject_panic): {} on node {nodeid}", op::name(opcode).unwrap_or("?"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<PanicTrigger, TriggerError> {
        s.parse()
    }

    #[test]
    fn specs_parse_and_print_back() {
        for s in ["WRITE", "WRITE@12", "CREATE/boom", "LOOKUP/a@b", "FORGET", "INTERRUPT"] {
            assert_eq!(p(s).map(|t| t.to_string()).as_deref(), Ok(s));
        }
        assert_eq!(p("BATCH_FORGET").map(|t| t.to_string()).as_deref(), Ok("FORGET"), "FORGET covers both");
    }

    #[test]
    fn bad_specs_are_refused_with_their_reason() {
        assert_eq!(p("WRIT"), Err(TriggerError::UnknownOpcode("WRIT".into())));
        assert_eq!(p("write"), Err(TriggerError::UnknownOpcode("write".into())));
        assert_eq!(p("WRITE@x"), Err(TriggerError::BadInode("x".into())));
        assert_eq!(p("WRITE@0"), Err(TriggerError::BadInode("0".into())));
        assert_eq!(p("WRITE@"), Err(TriggerError::BadInode("".into())));
        assert_eq!(p("CREATE/"), Err(TriggerError::EmptyName));
        assert_eq!(p("INIT"), Err(TriggerError::NotServed("INIT")));
        assert_eq!(p("DESTROY"), Err(TriggerError::NotServed("DESTROY")));
    }

    #[test]
    fn matching_by_opcode_inode_and_name() {
        let any_write = p("WRITE").unwrap();
        assert!(any_write.matches(op::WRITE, 12, None));
        assert!(!any_write.matches(op::READ, 12, None));
        let root = p("GETATTR@2").unwrap();
        assert!(root.matches(op::GETATTR, 1, None), "FUSE node 1 is ext4's root, inode 2");
        assert!(!root.matches(op::GETATTR, 2, None));
        let boom = p("CREATE/boom").unwrap();
        assert!(boom.matches(op::CREATE, 1, Some(b"boom")));
        assert!(!boom.matches(op::CREATE, 1, Some(b"boo")));
        assert!(!boom.matches(op::CREATE, 1, None));
        assert!(p("FORGET@12").unwrap().matches(op::BATCH_FORGET, 12, None));
    }
}
