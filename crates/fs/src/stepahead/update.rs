//! In-band updates: every namespace change tells the knowledge base what it
//! did, so that the KB follows the volume without re-reading directories.
//!
//! Changes are queued in the write state while an operation runs and applied
//! only when it succeeds: an operation that fails is rolled back, and so is
//! what it would have told the KB.

use super::kb::DirKind;
use super::state::KbChange;
use crate::volume::Volume;
use crate::write::WriteState;

impl Volume {
    /// Queue a change for the KB (nothing when StepAhead is off).
    pub(crate) fn kb_change(&self, ws: &mut WriteState, change: KbChange) {
        if self.stepahead.is_some() {
            ws.kb_changes.push(change);
        }
    }

    /// The operation succeeded: apply its queued changes.
    pub(crate) fn kb_apply(&self, ws: &mut WriteState) {
        let (Some(sa), false) = (&self.stepahead, ws.kb_changes.is_empty()) else { return };
        let mut kb = sa.kb.write();
        for c in ws.kb_changes.drain(..) {
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
    pub(crate) fn kb_discard(&self, ws: &mut WriteState) {
        ws.kb_changes.clear();
    }
}
