//! The request boundary's safety net.
//!
//! The kernel keeps a caller waiting until its request is answered, and a
//! FUSE wait is one that not even SIGKILL ends: a panic that unwound out of
//! a worker would leave the caller hung until the connection is aborted, and
//! lose the worker. So `serve` runs each request under [`catch`]; a panic
//! is answered EIO (or not at all, for the opcodes that take no reply),
//! reported through [`crate::Handler::panicked`], and the thread goes on
//! serving.
//!
//! A panic hook records the message and place of a panic on a thread that
//! is serving a request, for that report, and prints nothing then: the
//! report is the one record of it. Unless RUST_BACKTRACE asks for stacks:
//! then the hook that was there before (the default one) prints the panic
//! with its stack too, as it does for panics anywhere else.

use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, PanicHookInfo};
use std::sync::Once;

/// What is known of a panic caught at the request boundary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PanicNote {
    /// The panic's message (a placeholder when its payload is not a string).
    pub message: String,
    /// file:line:column of the panic, when the hook saw it.
    pub location: Option<String>,
    /// The serving thread's name.
    pub thread: String,
}

impl PanicNote {
    fn of_hook(info: &PanicHookInfo<'_>) -> PanicNote {
        PanicNote {
            message: info.payload_as_str().unwrap_or("(a panic without a message)").to_owned(),
            location: info.location().map(|l| l.to_string()),
            thread: thread_name(),
        }
    }

    /// For a panic the hook did not see (another hook replaced ours).
    fn of_payload(payload: &(dyn std::any::Any + Send)) -> PanicNote {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a panic without a message)".into());
        PanicNote { message, location: None, thread: thread_name() }
    }
}

impl fmt::Display for PanicNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(at) = &self.location {
            write!(f, " at {at}")?;
        }
        write!(f, " (thread {})", self.thread)
    }
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("unnamed").to_owned()
}

thread_local! {
    /// True while this thread serves a request (inside [`catch`]).
    static SERVING: Cell<bool> = const { Cell::new(false) };
    /// What the hook saw of the last panic while serving, until taken.
    static NOTE: Cell<Option<Box<PanicNote>>> = const { Cell::new(None) };
}

static HOOK: Once = Once::new();

/// Put our hook in front of the present one, once per process.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        let stacks = wants_stacks();
        std::panic::set_hook(Box::new(move |info| {
            if SERVING.get() {
                NOTE.set(Some(Box::new(PanicNote::of_hook(info))));
                if !stacks {
                    return;
                }
            }
            previous(info);
        }));
    });
}

/// Whether RUST_BACKTRACE asks panics to print their stacks (as std reads it).
fn wants_stacks() -> bool {
    std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0")
}

/// Run `f`, the serving of one request: its result, or what is known of the
/// panic that stopped it.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, PanicNote> {
    install_hook();
    SERVING.set(true);
    // AssertUnwindSafe: what `f` shares with other requests is the file
    // system's, which must stay usable after a panic by its own means (the
    // engine turns read-only when one unwinds through its write lock).
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    SERVING.set(false);
    let noted = NOTE.take();
    match result {
        Ok(v) => {
            if let Some(n) = noted {
                // Caught inside the request and not passed on: still worth a line.
                eprint_line(&format!("a panic was caught while serving a request: {n}"));
            }
            Ok(v)
        }
        Err(payload) => Err(noted.map_or_else(|| PanicNote::of_payload(&*payload), |n| *n)),
    }
}

/// One write to stderr per message, so that each stays one record in the
/// daemon's log.
pub(crate) fn eprint_line(msg: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{msg}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_note_with_its_message_and_place() {
        let line = line!() + 1;
        let note = catch(|| -> u32 { panic!("boom {}", 7) }).unwrap_err();
        assert_eq!(note.message, "boom 7");
        let at = note.location.as_deref().expect("the hook saw the panic");
        assert!(at.starts_with(&format!("{}:{line}:", file!())), "{at}");
        assert!(note.to_string().starts_with("boom 7 at "), "{note}");
    }

    #[test]
    fn a_result_passes_and_no_note_is_left_behind() {
        assert_eq!(catch(|| 5), Ok(5));
        let _ = catch(|| panic!("first"));
        assert_eq!(catch(|| 6), Ok(6));
        assert_eq!(catch(|| -> () { panic!("second") }).unwrap_err().message, "second");
    }

    #[test]
    fn a_panic_caught_inside_is_not_taken_for_the_requests_own() {
        let r = catch(|| std::panic::catch_unwind(|| panic!("inner")).is_err());
        assert_eq!(r, Ok(true));
        assert_eq!(catch(|| -> () { panic!("outer") }).unwrap_err().message, "outer");
    }

    #[test]
    fn panics_outside_a_request_reach_the_previous_hook() {
        install_hook();
        assert!(!SERVING.get());
        let r = std::panic::catch_unwind(|| panic!("elsewhere"));
        assert!(r.is_err());
        assert!(NOTE.take().is_none(), "only panics while serving are noted");
    }
}
