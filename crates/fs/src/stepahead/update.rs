//! In-band updates: every namespace change tells the knowledge base what it
//! did, so that the KB follows the volume without re-reading directories.
//!
//! Changes are queued by the writer (in its write state) while an operation
//! runs and applied only when it succeeds: an operation that fails is rolled
//! back, and so is what it would have told the KB.

use super::kb::DirKind;
use super::state::KbChange;
use crate::read_core::ReadCore;

impl ReadCore {
    /// Queue a change for the KB (nothing when StepAhead is off).
    pub(crate) fn kb_change(&self, queue: &mut Vec<KbChange>, change: KbChange) {
        if self.stepahead.is_some() {
            queue.push(change);
        }
    }

    /// The operation succeeded: apply its queued changes.
    pub(crate) fn kb_apply(&self, queue: &mut Vec<KbChange>) {
        let (Some(sa), false) = (&self.stepahead, queue.is_empty()) else { return };
        let mut kb = sa.kb.write();
        for c in queue.drain(..) {
            match c {
                KbChange::Entry { dir, name, child, lblk } => kb.note_entry(dir, &name, child, Some(lblk)),
                KbChange::Retarget { dir, name, child } => kb.retarget_entry(dir, &name, child),
                KbChange::Removed { dir, name } => kb.drop_entry(dir, &name),
                KbChange::Grown { dir, lblk, pblk } => kb.grow_dir(dir, lblk, pblk),
                KbChange::IndexNode { dir, pblk } => {
                    let mut index = kb.index_blocks(dir).to_vec();
                    index.push(pblk);
                    kb.set_index_blocks(dir, &index);
                }
                KbChange::Hashed { dir } => kb.set_dir_kind(dir, DirKind::Htree),
                KbChange::NewDir { dir, parent, pblk } => {
                    kb.learn_dir(dir, DirKind::Linear, &[pblk], [(&b"."[..], dir, 0), (&b".."[..], parent, 0)]);
                }
                KbChange::Forget { dir } => kb.forget_dir(dir),
            }
        }
    }

    /// The operation failed and was rolled back: so are its changes.
    pub(crate) fn kb_discard(&self, queue: &mut Vec<KbChange>) {
        queue.clear();
    }
}
