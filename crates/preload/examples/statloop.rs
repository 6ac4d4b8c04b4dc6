//! The warm-cache cost of the preload library: `statloop PATH [CALLS]` makes
//! CALLS stat(2) calls on PATH through libc's `stat` symbol (which the library
//! wraps when it is loaded) and prints nanoseconds per call. Run it with and
//! without LD_PRELOAD, on an ext4lazy mount and elsewhere
//! (docs/STEPAHEAD.md, "Full-path hints": cost when caches are warm).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: statloop PATH [CALLS]");
        std::process::exit(2);
    };
    let calls: u64 = args.next().and_then(|n| n.to_str()?.parse().ok()).unwrap_or(1_000_000);
    let Ok(c) = CString::new(path.as_bytes()) else {
        eprintln!("statloop: the path holds a NUL byte");
        std::process::exit(2);
    };
    // SAFETY: stat into a zeroed buffer of the right type, with a valid C string.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::stat(c.as_ptr(), &mut st) } != 0 {
        eprintln!("statloop: {}: {}", path.to_string_lossy(), std::io::Error::last_os_error());
        std::process::exit(1);
    }
    let t = std::time::Instant::now();
    for _ in 0..calls {
        // SAFETY: as above.
        unsafe { libc::stat(c.as_ptr(), &mut st) };
    }
    let ns = t.elapsed().as_nanos() as f64 / calls as f64;
    println!("{ns:.1}");
}
