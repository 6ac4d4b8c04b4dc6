//! FUSE over io_uring (Linux 6.14+, Documentation/filesystems/fuse-io-uring.rst).
//!
//! The kernel keeps one request queue per possible CPU and puts a request on
//! the queue of the CPU that made it. We serve each queue with a thread bound
//! to that CPU: the caller sleeps, its CPU switches to our thread, and the
//! reply switches back, with no other CPU woken. On the classic /dev/fuse
//! transport the same round trip wakes an idle CPU twice, which in a VM is
//! an interrupt and an exit to the hypervisor each time.
//!
//! Each queue registers `depth` entries. An entry is a header buffer
//! (struct fuse_uring_req_header: the in/out header, the opcode's fixed
//! struct, and the entry's commit id and payload size) and a payload buffer.
//! A completed REGISTER or COMMIT_AND_FETCH command means the entry holds a
//! request; we answer in place and COMMIT_AND_FETCH again.

use crate::abi::{self, out_header, Fields, InHeader, OUT_HEADER};
use crate::{serve, Counters, Handler};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// struct fuse_uring_req_header: in_out[128], op_in[128], ring_ent_in_out (32 bytes).
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;
const HEADER: usize = 288;

/// The scheduling class of the queue threads.
///
/// Why it matters: when our thread answers, the kernel wakes the caller, and
/// the scheduler puts a woken task on an idle CPU rather than on a busy one.
/// Our thread is still running on the caller's CPU at that moment, so the
/// caller moves to the other CPU, and its next request goes to that CPU's
/// queue: every round trip crosses CPUs again. A CPU whose only runnable
/// tasks are SCHED_IDLE counts as idle, so with our threads SCHED_IDLE the
/// caller stays where it was, and the caller and our thread hand the CPU to
/// each other. The price: a SCHED_IDLE thread gets almost no CPU while
/// another task wants it, so a CPU-bound program on the same CPU would slow
/// every request down to its scraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    Normal,
    Idle,
    /// Idle, and each queue's thread goes back to normal priority for
    /// `ADAPTIVE_HOLD` whenever its requests wait long for the CPU.
    Adaptive,
}

/// How the io_uring queues run.
#[derive(Clone, Copy, Debug)]
pub struct UringConfig {
    /// Ask the kernel for FUSE over io_uring at INIT (it agrees only when
    /// /sys/module/fuse/parameters/enable_uring is set).
    pub enabled: bool,
    /// Ring entries per queue: requests one CPU can have in flight at once.
    pub depth: usize,
    pub priority: Priority,
}

impl Default for UringConfig {
    fn default() -> Self {
        UringConfig { enabled: false, depth: 4, priority: Priority::Adaptive }
    }
}

/// How often the adaptive policy looks at the queue threads.
const ADAPTIVE_TICK: Duration = Duration::from_millis(100);
/// A queue is contended when its requests waited this long for the CPU on
/// average over a tick. Handing the CPU over costs a few microseconds; a
/// CPU-bound neighbour makes it milliseconds.
const CONTENDED_WAIT_NS: u64 = 200_000;
/// ... and when they waited this share of the tick in all. A queue that
/// served a handful of requests, one of which waited behind a short burst of
/// other work, is not starved; moving it to normal priority would make the
/// scheduler bounce its caller between CPUs (untar of /usr/include: 2.6-2.7 s
/// without a switch, 4.3-5.2 s after two to four).
const CONTENDED_SHARE: u64 = 4; // a quarter of the tick
/// How long a contended queue stays at normal priority before trying idle again.
const ADAPTIVE_HOLD: Duration = Duration::from_secs(5);

/// What the adaptive policy knows of one queue thread.
#[derive(Default)]
struct QueueState {
    tid: AtomicI32,
    served: AtomicU64,
    idle: AtomicBool,
}

/// Start one thread per possible CPU; returns once every queue is registered.
pub(crate) fn start<H: Handler>(
    h: Arc<H>,
    dev: Arc<File>,
    cfg: &UringConfig,
    payload: usize,
    counters: Arc<Counters>,
) -> io::Result<Vec<JoinHandle<io::Result<()>>>> {
    let cpus = possible_cpus()?;
    let mut threads = Vec::new();
    let states: Arc<Vec<QueueState>> = Arc::new((0..cpus).map(|_| QueueState::default()).collect());
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
    for qid in 0..cpus {
        let (h, dev, cfg, tx, states, counters) =
            (h.clone(), dev.clone(), *cfg, tx.clone(), states.clone(), counters.clone());
        threads.push(std::thread::Builder::new().name(format!("fuse-uring-{qid}")).spawn(move || {
            let state = &states[qid];
            // SAFETY: gettid has no preconditions.
            state.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
            if cfg.priority != Priority::Normal {
                match set_priority(0, true) {
                    Ok(()) => state.idle.store(true, Ordering::Relaxed),
                    Err(e) => log::warn!("io_uring queue {qid}: cannot run at idle priority: {e}"),
                }
            }
            let queue = Queue::new(qid as u16, &dev, &cfg, payload);
            let mut queue = match queue {
                Ok(q) => q,
                Err(e) => {
                    let msg = e.to_string();
                    let _ = tx.send(Err(e));
                    return Err(io::Error::other(msg));
                }
            };
            let _ = tx.send(Ok(()));
            drop(tx);
            counters.uring_queues.fetch_add(1, Ordering::Relaxed);
            let served = queue.serve(&*h, state, &counters);
            state.tid.store(0, Ordering::Relaxed);
            served
        })?);
    }
    drop(tx);
    for _ in 0..cpus {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("an io_uring queue thread died")),
        }
    }
    if cfg.priority == Priority::Adaptive {
        // Detached: it ends when every queue thread has.
        std::thread::Builder::new().name("fuse-uring-prio".into()).spawn(move || adapt(&states, &counters))?;
    }
    Ok(threads)
}

/// Nanoseconds thread `tid` of this process has spent runnable but waiting
/// for a CPU (the second field of its schedstat).
fn run_delay_ns(tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().nth(1)?.parse().ok()
}

/// The adaptive policy (`Priority::Adaptive`): every tick, a queue at idle
/// priority whose requests waited more than `CONTENDED_WAIT_NS` each, and a
/// `CONTENDED_SHARE` of the tick in all, for the CPU goes to normal priority;
/// after `ADAPTIVE_HOLD` it tries idle again.
fn adapt(states: &[QueueState], counters: &Counters) {
    let mut last: Vec<(u64, u64)> = vec![(0, 0); states.len()];
    let mut normal_since: Vec<Option<Instant>> = vec![None; states.len()];
    loop {
        std::thread::sleep(ADAPTIVE_TICK);
        let mut running = false;
        for (q, st) in states.iter().enumerate() {
            let tid = st.tid.load(Ordering::Relaxed);
            if tid == 0 {
                continue;
            }
            running = true;
            // Without schedstat there is nothing to go by: stay at normal priority.
            let Some(delay) = run_delay_ns(tid) else {
                if st.idle.swap(false, Ordering::Relaxed) && set_priority(tid, false).is_ok() {
                    counters.priority_switches.fetch_add(1, Ordering::Relaxed);
                }
                normal_since[q] = Some(Instant::now() + Duration::from_secs(1 << 30));
                continue;
            };
            let served = st.served.load(Ordering::Relaxed);
            let (d_delay, d_served) = (delay.saturating_sub(last[q].0), served.saturating_sub(last[q].1));
            last[q] = (delay, served);
            let idle = st.idle.load(Ordering::Relaxed);
            let switch_to = if idle && starved(d_delay, d_served) {
                Some(false)
            } else if !idle && normal_since[q].is_some_and(|t| t.elapsed() >= ADAPTIVE_HOLD) {
                Some(true)
            } else {
                None
            };
            if let Some(to_idle) = switch_to {
                match set_priority(tid, to_idle) {
                    Ok(()) => {
                        st.idle.store(to_idle, Ordering::Relaxed);
                        normal_since[q] = (!to_idle).then(Instant::now);
                        counters.priority_switches.fetch_add(1, Ordering::Relaxed);
                        log::debug!("io_uring queue {q}: {} priority", if to_idle { "idle" } else { "normal" });
                    }
                    Err(e) => log::warn!("io_uring queue {q}: cannot change priority: {e}"),
                }
            }
        }
        if !running {
            return;
        }
    }
}

/// Whether a queue that served `served` requests in a tick, which waited
/// `delay_ns` in all for the CPU, is starved at idle priority.
fn starved(delay_ns: u64, served: u64) -> bool {
    delay_ns / served.max(1) > CONTENDED_WAIT_NS && delay_ns > ADAPTIVE_TICK.as_nanos() as u64 / CONTENDED_SHARE
}

/// Number of possible CPUs: the kernel makes one queue for each.
fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let last = s.trim().rsplit([',', '-']).next().and_then(|n| n.parse::<usize>().ok());
    last.map(|n| n + 1).ok_or_else(|| io::Error::other(format!("cannot parse /sys/devices/system/cpu/possible: {s:?}")))
}

/// The payload buffer starts on a page: a READ served into it straight
/// from an O_DIRECT image needs no bounce copy (`Handler::read_into`).
const PAYLOAD_ALIGN: usize = 4096;

struct Entry {
    /// u64s keep the header 8-byte aligned, as the kernel's structs are.
    header: Box<[u64; HEADER / 8]>,
    /// The payload buffer is `storage[at..at + len]`, page-aligned.
    storage: Vec<u8>,
    at: usize,
    len: usize,
    iov: Box<[libc::iovec; 2]>,
    live: bool,
}

impl Entry {
    fn payload(&self) -> &[u8] {
        &self.storage[self.at..self.at + self.len]
    }
    fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.at..self.at + self.len]
    }
    fn header_bytes(&self) -> &[u8] {
        // SAFETY: a u64 array viewed as its bytes.
        unsafe { std::slice::from_raw_parts(self.header.as_ptr().cast::<u8>(), HEADER) }
    }
    fn header_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.header.as_mut_ptr().cast::<u8>(), HEADER) }
    }
}

struct Queue {
    qid: u16,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// /dev/fuse as the commands name it: its index in the ring's fixed-file
    /// table when registered there, else the descriptor.
    fuse: FuseFile,
    /// The ring's own descriptor as registered with IORING_REGISTER_RING_FDS.
    ring_index: Option<u32>,
    entries: Vec<Entry>,
}

/// How the commands name /dev/fuse.
#[derive(Clone, Copy)]
enum FuseFile {
    /// Slot 0 of the ring's fixed-file table: the kernel skips the
    /// descriptor lookup (and its reference count) for every command.
    Fixed,
    Fd(i32),
}

/// From include/uapi/linux/io_uring.h.
const IORING_REGISTER_RING_FDS: libc::c_uint = 20;
const IORING_ENTER_GETEVENTS: libc::c_uint = 1 << 0;
const IORING_ENTER_REGISTERED_RING: libc::c_uint = 1 << 4;

/// Register the ring's own descriptor, so that io_uring_enter takes its
/// index instead of looking the descriptor up (twice per request: one
/// enter submits the reply and waits for the next request). Returns the index.
fn register_ring_fd(ring_fd: i32) -> io::Result<u32> {
    // struct io_uring_rsrc_update: offset (u32::MAX: any free slot, the kernel writes back which), resv, data (the fd).
    #[repr(C)]
    struct RsrcUpdate {
        offset: u32,
        resv: u32,
        data: u64,
    }
    let mut up = RsrcUpdate { offset: u32::MAX, resv: 0, data: ring_fd as u64 };
    // SAFETY: io_uring_register with a valid ring descriptor and one update record that outlives the call.
    let r = unsafe {
        libc::syscall(libc::SYS_io_uring_register, ring_fd, IORING_REGISTER_RING_FDS, &mut up as *mut RsrcUpdate, 1)
    };
    if r != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(up.offset)
}

fn bind_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::other("CPU number beyond cpu_set_t"));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// SCHED_IDLE or SCHED_OTHER for thread `tid` (0: the calling thread).
fn set_priority(tid: i32, idle: bool) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: 0 };
    let policy = if idle { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
    // SAFETY: a thread id of this process (or 0), a valid parameter struct.
    if unsafe { libc::sched_setscheduler(tid, policy, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// struct fuse_uring_cmd_req in the SQE's command area.
fn cmd_req(qid: u16, commit_id: u64) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

/// Set the SQE's `len` (offset 24 in struct io_uring_sqe), which the io-uring
/// crate's URING_CMD builder leaves 0; FUSE wants the iovec count there.
fn set_len(sqe: &mut squeue::Entry128, len: u32) {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is #[repr(C)] around struct io_uring_sqe, whose `len`
    // field is the u32 at byte 24 (include/uapi/linux/io_uring.h).
    unsafe { (sqe as *mut squeue::Entry128).cast::<u8>().add(24).cast::<u32>().write_unaligned(len) }
}

impl Queue {
    fn new(qid: u16, dev: &File, cfg: &UringConfig, payload: usize) -> io::Result<Queue> {
        if let Err(e) = bind_to_cpu(usize::from(qid)) {
            log::warn!("io_uring queue {qid}: cannot bind to its CPU: {e}");
        }
        let depth = cfg.depth.max(1);
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            // The kernel copies each request into our buffers as task work; run
            // it when we ask for completions anyway, not by interrupting us.
            .setup_defer_taskrun()
            .build((depth * 2).next_power_of_two() as u32)?;
        // Both registrations only save work per request: without them (an old
        // kernel, a seccomp filter), the descriptors serve as well.
        let fuse = match ring.submitter().register_files(&[dev.as_raw_fd()]) {
            Ok(()) => FuseFile::Fixed,
            Err(e) => {
                log::debug!("io_uring queue {qid}: /dev/fuse not registered as a fixed file: {e}");
                FuseFile::Fd(dev.as_raw_fd())
            }
        };
        let ring_index = register_ring_fd(ring.as_raw_fd())
            .map_err(|e| log::debug!("io_uring queue {qid}: ring descriptor not registered: {e}"))
            .ok();
        let mut q = Queue { qid, ring, fuse, ring_index, entries: Vec::with_capacity(depth) };
        for _ in 0..depth {
            let storage = vec![0u8; payload + PAYLOAD_ALIGN];
            let at = storage.as_ptr().align_offset(PAYLOAD_ALIGN);
            let mut e = Entry {
                header: Box::new([0u64; HEADER / 8]),
                storage,
                at,
                len: payload,
                iov: Box::new([libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2]),
                live: true,
            };
            e.iov[0] = libc::iovec { iov_base: e.header.as_mut_ptr().cast(), iov_len: HEADER };
            let p = e.payload_mut();
            e.iov[1] = libc::iovec { iov_base: p.as_mut_ptr().cast(), iov_len: p.len() };
            q.entries.push(e);
        }
        for i in 0..depth {
            q.push(i, CMD_REGISTER, 0)?;
        }
        q.ring.submit()?;
        Ok(q)
    }

    fn push(&mut self, i: usize, cmd: u32, commit_id: u64) -> io::Result<()> {
        let iov = self.entries[i].iov.as_ptr() as u64;
        let cmd = match self.fuse {
            FuseFile::Fixed => opcode::UringCmd80::new(types::Fixed(0), cmd),
            FuseFile::Fd(fd) => opcode::UringCmd80::new(types::Fd(fd), cmd),
        };
        let mut sqe = cmd.cmd(cmd_req(self.qid, commit_id)).addr(Some(iov)).build().user_data(i as u64);
        set_len(&mut sqe, 2);
        // SAFETY: the entry's buffers and iovecs live as long as the queue,
        // which outlives the ring's use of them (the ring is dropped first).
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    fn serve<H: Handler + ?Sized>(&mut self, h: &H, state: &QueueState, counters: &Counters) -> io::Result<()> {
        let mut out = Vec::new();
        let mut done = Vec::new();
        while self.entries.iter().any(|e| e.live) {
            match self.submit_and_wait() {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(self.ring.completion().map(|c| (c.user_data() as usize, c.result())));
            for &(i, res) in &done {
                if res < 0 {
                    self.failed(i, res)?;
                    continue;
                }
                let commit_id = self.answer(h, i, &mut out, counters);
                state.served.fetch_add(1, Ordering::Relaxed);
                counters.uring_requests.fetch_add(1, Ordering::Relaxed);
                self.push(i, CMD_COMMIT_AND_FETCH, commit_id)?;
            }
        }
        Ok(())
    }

    /// Submit what is queued (the replies) and wait for at least one completion (a request).
    fn submit_and_wait(&mut self) -> io::Result<()> {
        let Some(index) = self.ring_index else {
            return self.ring.submit_and_wait(1).map(drop);
        };
        let to_submit = self.ring.submission().len() as libc::c_uint;
        let flags = IORING_ENTER_GETEVENTS | IORING_ENTER_REGISTERED_RING;
        // SAFETY: io_uring_enter on our registered ring, with no argument
        // struct; the queued entries' buffers live as long as the queue.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                index,
                to_submit,
                1 as libc::c_uint,
                flags,
                std::ptr::null::<u8>(),
                0usize,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// A command ended with an error: the connection is going away, or not.
    fn failed(&mut self, i: usize, res: i32) -> io::Result<()> {
        match -res {
            libc::EINTR | libc::EAGAIN => self.push(i, CMD_REGISTER, 0),
            // Unmounted, or the daemon is going away.
            libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => {
                self.entries[i].live = false;
                Ok(())
            }
            e => {
                self.entries[i].live = false;
                Err(io::Error::from_raw_os_error(e))
            }
        }
    }

    /// Serve the request entry `i` holds and leave the reply in it; returns its commit id.
    fn answer<H: Handler + ?Sized>(&mut self, h: &H, i: usize, out: &mut Vec<u8>, counters: &Counters) -> u64 {
        let e = &mut self.entries[i];
        let hb = e.header_bytes();
        let ring = Fields::new(&hb[ENT_IN_OUT..], 32).expect("fixed-size header");
        let commit_id = ring.u64(8);
        let payload_len = (ring.u32(16) as usize).min(e.len);
        let header = InHeader::parse(hb).unwrap_or_default();
        // A copy (on the stack): the payload buffer is borrowed mutably below.
        let mut fixed = [0u8; OP_IN];
        let fixed_len = abi::fixed_size(header.opcode).min(OP_IN);
        fixed[..fixed_len].copy_from_slice(&hb[OP_IN..OP_IN + fixed_len]);
        let fixed = &fixed[..fixed_len];
        // A READ goes straight into the payload buffer where the handler can.
        let direct = if header.opcode == abi::op::READ {
            crate::serve_read_into(h, &header, fixed, e.payload_mut(), counters)
        } else {
            None
        };
        let (error, len) = match direct {
            Some(served) => served,
            None => {
                // Requests without a reply (FORGET, INTERRUPT) come through /dev/fuse, never here.
                let mut error =
                    serve(h, &header, fixed, &e.payload()[..payload_len], out, counters).unwrap_or(-libc::ENOSYS);
                if out.len() > e.len {
                    log::error!("FUSE reply of {} bytes exceeds the ring's payload buffer", out.len());
                    out.clear();
                    error = -libc::EIO;
                }
                e.payload_mut()[..out.len()].copy_from_slice(out);
                (error, out.len())
            }
        };
        let hb = e.header_bytes_mut();
        hb[..OUT_HEADER].copy_from_slice(&out_header(OUT_HEADER + len, error, header.unique));
        hb[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(len as u32).to_ne_bytes());
        commit_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_queue_that_waits_long_and_often_is_starved() {
        let ms = 1_000_000;
        // A CPU hog: few requests, each waiting milliseconds, most of the tick.
        assert!(starved(80 * ms, 20));
        assert!(starved(99 * ms, 0));
        // An untar sharing its CPU with the queue: thousands of short waits.
        assert!(!starved(30 * ms, 20_000));
        // A quiet queue: one request that waited behind a burst of other work.
        assert!(!starved(ms, 1));
        assert!(!starved(20 * ms, 10));
    }

    #[test]
    fn command_area_layout() {
        let c = cmd_req(3, 0x1122);
        assert_eq!(&c[8..16], &0x1122u64.to_ne_bytes());
        assert_eq!(&c[16..18], &3u16.to_ne_bytes());
        assert!(c[..8].iter().chain(&c[18..]).all(|&b| b == 0));
    }

    #[test]
    fn possible_cpus_is_at_least_one() {
        assert!(possible_cpus().unwrap() >= 1);
    }
}
