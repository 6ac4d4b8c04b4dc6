//! Fault injection for tests: make a modifying operation panic halfway,
//! holding the write lock, as a bug in (say) the extent-tree code would.
//!
//! A caller arms its own thread for one request ([`Armed`]); the first
//! modifying operation that request runs on this thread then panics after
//! its changes are made, before they are kept or rolled back
//! (`Volume::atomic`). The FUSE frontend arms it for the requests that
//! `-o inject_panic=` names. Unarmed, it costs one thread-local test per
//! modifying operation.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static NO_ROOM_FOR: Cell<u32> = const { Cell::new(0) };
}

/// This thread armed for one request; disarmed when dropped, fired or not.
pub struct Armed {
    /// The arming belongs to this thread: not Send.
    _thread: PhantomData<*const ()>,
}

impl Armed {
    pub fn arm() -> Armed {
        ARMED.set(true);
        Armed { _thread: PhantomData }
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        ARMED.set(false);
    }
}

/// The message of an injected panic in the engine.
pub const MESSAGE: &str =
    "injected panic (inject_panic): a modifying operation stopped halfway, holding the write lock";

/// While held, the write-back of inode `ino`'s delayed data on this thread
/// fails with ENOSPC; cleared when dropped.
pub struct NoRoom {
    _thread: PhantomData<*const ()>,
}

impl NoRoom {
    pub fn for_inode(ino: u32) -> NoRoom {
        NO_ROOM_FOR.set(ino);
        NoRoom { _thread: PhantomData }
    }
}

impl Drop for NoRoom {
    fn drop(&mut self) {
        NO_ROOM_FOR.set(0);
    }
}

/// Whether this thread's write-back of `ino` is to find no room.
pub(crate) fn no_room_for(ino: u32) -> bool {
    NO_ROOM_FOR.get() == ino
}

/// Panic if this thread is armed (once: the arming is used up).
pub(crate) fn panic_if_armed() {
    if ARMED.get() {
        ARMED.set(false);
        panic!("{MESSAGE}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_once_and_only_while_armed() {
        panic_if_armed();
        let armed = Armed::arm();
        assert!(std::panic::catch_unwind(panic_if_armed).is_err());
        panic_if_armed();
        drop(armed);
        let _armed = Armed::arm();
        drop(_armed);
        panic_if_armed();
    }
}
