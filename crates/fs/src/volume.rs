//! A mounted ext4 volume: its read core (`read_core.rs`: geometry, cache,
//! metadata reads, StepAhead) and its writer (`write::Writer`: the write
//! lock, journaling, open files). Reading code is written against the read
//! core, which a `Volume` derefs to; operations that change the volume are
//! methods of `Volume`, as they need both.

use crate::read_core::ReadCore;
use crate::write::writer::Writer;

pub struct Volume {
    pub(crate) core: ReadCore,
    pub(crate) writer: Writer,
}

/// Reads need only the read core; `vol.inode(..)`, `vol.meta(..)` and the
/// like reach it through here.
impl std::ops::Deref for Volume {
    type Target = ReadCore;

    fn deref(&self) -> &ReadCore {
        &self.core
    }
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume").field("blocks", &self.sb.blocks_count()).finish()
    }
}
