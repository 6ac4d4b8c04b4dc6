//! `ext4lazy mount`: open the volume, mount it through FUSE, and (unless
//! `foreground`) keep serving from a detached daemon.
//!
//! Daemonising: the command re-executes itself with `foreground` and a
//! readiness pipe (fork() in a multi-threaded program is unsafe). The child
//! writes "OK" once the kernel has the mount, or the error; the parent relays
//! that and exits, so `mount` returns only when the mount is live.
//! The daemon holds an exclusive flock on the image for its whole life: a
//! second mount is refused, and `umount` waits on that lock to know the
//! daemon has finished.

use super::options::MountOptions;
use anyhow::{bail, Context, Result};
use blockdev::FileDevice;
use fs::{Volume, VolumeOptions};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const READY_FD_ENV: &str = "EXT4LAZY_READY_FD";

/// How long the kernel may cache entries and attributes: every change goes
/// through this mount, and the kernel updates or drops what it caches for
/// the inodes an operation touches (we notify it of the one change it
/// cannot see, atime), so long timeouts are safe read-write too, and save
/// the revalidation LOOKUPs a short one costs.
const MOUNT_TTL: Duration = Duration::from_secs(3600);

pub fn run(option_args: &[String], image: &Path, mountpoint: &Path) -> Result<()> {
    let opts = MountOptions::parse(option_args)?;
    if let Ok(fd) = std::env::var(READY_FD_ENV) {
        let fd: i32 = fd.parse().context("bad readiness descriptor")?;
        // SAFETY: the parent created this pipe end for us and passed its number.
        let ready = unsafe { File::from_raw_fd(fd) };
        return serve(&opts, image, mountpoint, Some(ready));
    }
    if opts.foreground {
        return serve(&opts, image, mountpoint, None);
    }
    spawn_daemon(option_args, image, mountpoint)
}

fn spawn_daemon(option_args: &[String], image: &Path, mountpoint: &Path) -> Result<()> {
    let (mut rd, wr) = pipe()?;
    let exe = std::env::current_exe().context("cannot find the ext4lazy executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount");
    for o in option_args {
        cmd.arg("-o").arg(o);
    }
    cmd.arg(image).arg(mountpoint);
    cmd.env(READY_FD_ENV, wr.as_raw_fd().to_string());
    // The child reports startup errors through the pipe, never on our stderr;
    // once live it writes its log file (`log_path`).
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = cmd.spawn().context("cannot start the ext4lazy daemon")?;
    drop(wr); // only the child holds the write end now: EOF means it is gone
    let mut msg = String::new();
    rd.read_to_string(&mut msg).context("reading the daemon's status")?;
    if msg.trim() == "OK" {
        return Ok(());
    }
    let _ = child.wait();
    let msg = msg.trim();
    if msg.is_empty() {
        bail!("the daemon exited before the mount was live");
    }
    bail!("{msg}")
}

/// Open, mount and serve until unmounted. Reports readiness or the first error on `ready`.
fn serve(opts: &MountOptions, image: &Path, mountpoint: &Path, mut ready: Option<File>) -> Result<()> {
    super::memory::tune_malloc(super::memory::budget().unwrap_or(u64::MAX));
    if opts.floor {
        return serve_floor(opts, image, mountpoint, ready);
    }
    let session = reported(prepare(opts, image, mountpoint), &mut ready)?;
    // Held until the final write-back is done: a daemon that dies first leaves "running".
    let outcome = super::outcome::Outcome::claim(mountpoint);
    let live = live_stats_path(mountpoint);
    let hints = if let Some(mut r) = ready.take() {
        detach(mountpoint)?;
        let hints = start_hints(opts, &session.vol, mountpoint);
        // Live figures exist as soon as `mount` returns.
        let _ = write_stats(&session.vol, &session.devices, &live);
        let _ = r.write_all(b"OK");
        hints
    } else {
        start_hints(opts, &session.vol, mountpoint)
    };
    if let Some(why) = session.vol.journal().and_then(|j| j.snapshot_refused.as_ref()) {
        fuse::report(format_args!("{}: {why}; the log was scanned instead", image.display()));
    }
    if let Some(t) = &opts.inject_panic {
        fuse::report(format_args!("fault injection on (for tests): requests matching inject_panic={t} will panic"));
    }
    let Prepared { session, vol, devices, lock } = session;
    let ticker = {
        let vol = vol.clone();
        let image_name = image.display().to_string();
        let mut reported = false;
        every(Duration::from_millis(250), move || {
            if let Err(e) = vol.background_tick() {
                fuse::report(format_args!("background commit/write-back failed: {e}"));
            }
            if let (false, Some(why)) = (reported, vol.failure()) {
                fuse::report(format_args!(
                    "{}: the volume is now read-only ({why}); the journal will be replayed at the next mount",
                    image_name
                ));
                reported = true;
            }
        })
    };
    // On threads of their own: a background tick that writes back a lot
    // would otherwise leave the figures stale for seconds (the bench's
    // per-second samples read them). The figures behind the write lock or
    // the journal's come from a second thread, which may wait for a long
    // commit; the file keeps their last values meanwhile, and the counters
    // of I/O and requests stay current.
    let last_locked = Arc::new(std::sync::Mutex::new(locked_keys(&vol)));
    let locked_figures = {
        let (vol, last) = (vol.clone(), last_locked.clone());
        every(Duration::from_secs(1), move || {
            let keys = locked_keys(&vol);
            *last.lock().unwrap_or_else(|e| e.into_inner()) = keys;
        })
    };
    let live_figures = {
        let (vol, live, devices) = (vol.clone(), live.clone(), devices.clone());
        every(Duration::from_secs(1), move || {
            let mut j = unlocked_json(&vol, &devices, false);
            if let Some(m) = j.as_object_mut() {
                m.extend(last_locked.lock().unwrap_or_else(|e| e.into_inner()).clone());
            }
            // Best effort: /run may be missing or read-only in odd setups.
            let _ = write_json(&j, &live);
        })
    };
    // Free heap memory goes back to the page cache (`memory::Trimmer`).
    let trim = super::memory::Trimmer::new(super::memory::budget().unwrap_or(u64::MAX));
    let trimmer = every(Duration::from_secs(1), move || {
        trim.tick();
    });
    let served = session.run().context("serving FUSE requests");
    trimmer.stop();
    drop(hints);
    ticker.stop();
    live_figures.stop();
    locked_figures.stop();
    let _ = std::fs::remove_file(&live);
    served?;
    // The kernel has let go: write everything home and mark the volume clean.
    // Only then release the image lock: `umount` waits on it.
    let done = if vol.is_read_only() { Ok(()) } else { vol.shutdown().context("final write-back") };
    if let Some(path) = &opts.stats {
        // On an SMR model, the drive's cleaning after the run is part of the
        // result (`ext4lazy bench` reports it): let it finish before the last
        // figures, at once in model time since nothing more reaches the drive,
        // and say how long that took so the caller can leave it out.
        if let Some(model) = &devices.model {
            let t = std::time::Instant::now();
            let cleaning_s = model.skip_to_idle();
            let mut d = devices.idle.lock().unwrap_or_else(|e| e.into_inner());
            *d = Some((cleaning_s, t.elapsed().as_secs_f64()));
        }
        if let Err(e) = write_final_stats(&vol, &devices, path) {
            fuse::report(format_args!("cannot write the stats file {}: {e:#}", path.display()));
        }
    }
    // Before the image's lock goes: `umount` reads it, then waits for that one.
    if let Some(o) = outcome {
        o.settle(&done);
    }
    drop(lock);
    done
}

/// Run `work` now and then every `period` on a thread of its own, until
/// [`Periodic::stop`] (which also cuts the wait short).
fn every(period: Duration, mut work: impl FnMut() + Send + 'static) -> Periodic {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || loop {
        work();
        match stopped.recv_timeout(period) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            _ => break,
        }
    });
    Periodic { stop, thread }
}

/// A thread started by [`every`].
struct Periodic {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Periodic {
    /// Stop it and wait for its current round to end.
    fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

/// `-o floor`: serve the in-memory floor file system (fuse::FloorFs) on the
/// mount point, through the same mount, transport and daemon life as the
/// volume, holding the image's lock as a volume's daemon does (`umount`
/// waits on it).
fn serve_floor(opts: &MountOptions, image: &Path, mountpoint: &Path, mut ready: Option<File>) -> Result<()> {
    let counters = Arc::new(fusewire::Counters::default());
    // The figures `ext4lazy bench` reads of every ext4lazy mount: no device
    // I/O at all, and the requests served.
    let stats = |c: &fusewire::Counters| serde_json::json!({ "floor": true, "io": io_json(&blockdev::IoCounts::default()), "fuse": fuse_json(c) });
    let start = || -> Result<(fusewire::Session<fuse::FloorFs>, File)> {
        let (image, mnt, lock) = claim(image, mountpoint)?;
        // Removed when the session, which owns it, ends (`HostFile`'s drop).
        let data = match opts.floor_data {
            true => Some(Box::new(super::floor_data::HostFile::create_beside(&image)?) as Box<dyn fuse::FloorData>),
            false => None,
        };
        let fs = fuse::FloorFs::new(MOUNT_TTL, opts.kernel_opens || opts.read_only, data);
        Ok((mount_session(opts, &image, &mnt, fs, counters.clone())?, lock))
    };
    let (session, lock) = reported(start(), &mut ready)?;
    // Nothing to write back: it only tells `umount` the daemon did not die first.
    let outcome = super::outcome::Outcome::claim(mountpoint);
    let live = live_stats_path(mountpoint);
    if let Some(mut r) = ready.take() {
        detach(mountpoint)?;
        let _ = write_json(&stats(&counters), &live);
        let _ = r.write_all(b"OK");
    }
    let served = session.run().context("serving FUSE requests");
    let _ = std::fs::remove_file(&live);
    if let Some(path) = &opts.stats {
        if let Err(e) = write_json(&stats(&counters), path) {
            fuse::report(format_args!("cannot write the stats file {}: {e:#}", path.display()));
        }
    }
    if let Some(o) = outcome {
        o.settle(&served);
    }
    drop(lock);
    served
}

/// Full-path hints (`-o stepahead`), listening before `mount` returns so that
/// programs started right after it can send them. Best effort: without the
/// socket the mount works, with the FUSE hints only.
fn start_hints(opts: &MountOptions, vol: &Arc<Volume>, mountpoint: &Path) -> Option<super::hints::HintListener> {
    opts.stepahead?;
    let mnt = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    match super::hints::HintListener::start(vol.clone(), &mnt, opts.allow_other) {
        Ok(h) => Some(h),
        Err(e) => {
            fuse::report(format_args!("no path hints for {}: {e:#}", mnt.display()));
            None
        }
    }
}

/// Replace `path` with the engine's counters as JSON, atomically (a reader
/// never sees half a file).
fn write_stats(vol: &Volume, devices: &Devices, path: &Path) -> Result<()> {
    write_json(&stats_json(vol, devices, false), path)
}

/// The figures at unmount: prefetched blocks never used count as wasted.
fn write_final_stats(vol: &Volume, devices: &Devices, path: &Path) -> Result<()> {
    write_json(&stats_json(vol, devices, true), path)
}

/// Readable by root only: the counters show what the daemon read and learnt
/// (StepAhead's KB, hits and misses), which would tell other users whether
/// names exist in directories they may not search. Written 0600 through no
/// symlink (`fs::safefile::replace`).
fn write_json(v: &serde_json::Value, path: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(v)? + "\n";
    fs::safefile::replace(path, text.as_bytes()).with_context(|| format!("{}", path.display()))
}

/// The engine's counters (`-o stats=PATH` at unmount, the live file while
/// mounted); `final_figures` at unmount.
pub fn stats_json(vol: &Volume, devices: &Devices, final_figures: bool) -> serde_json::Value {
    let mut j = unlocked_json(vol, devices, final_figures);
    if let Some(m) = j.as_object_mut() {
        m.extend(locked_keys(vol));
    }
    j
}

/// The figures that take the write lock or the journal's: the volume's
/// failure, the write path's counters and the journal's.
fn locked_keys(vol: &Volume) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("failure".into(), vol.failure().into());
    if let Some(w) = vol.write_stats() {
        m.insert(
            "write".into(),
            serde_json::json!({
                "commits": w.commits,
                "background_commits": w.background_commits,
                "journal_blocks_logged": w.journal_blocks_logged,
                "forced_checkpoints": w.checkpoints,
                "blocks_written_home": w.blocks_written_home,
            }),
        );
    }
    m.extend(journal_keys(vol));
    m
}

/// The figures that wait for neither the write lock nor the journal's.
fn unlocked_json(vol: &Volume, devices: &Devices, final_figures: bool) -> serde_json::Value {
    let cache = vol.cache_stats();
    let stalls = vol.delalloc_stalls();
    let mut j = serde_json::json!({
        "read_only": vol.is_read_only(),
        "block_size": vol.block_size(),
        "cache": {
            "hits": cache.hits, "misses": cache.misses, "evictions": cache.evictions,
            "blocks": cache.blocks, "capacity_blocks": cache.capacity,
        },
        "tail_hits": vol.tail_hits(),
        "delalloc_bytes_waiting": vol.delayed_bytes(),
        "delalloc_writer_stalls": stalls.0,
        "delalloc_writer_stall_s": stalls.1,
        "fuse": fuse_json(&devices.fuse),
    });
    if let Some(m) = j.as_object_mut() {
        let (in_use, free_held, mmapped) = super::memory::malloc_figures();
        m.insert("malloc".into(), serde_json::json!({ "in_use": in_use, "free_held": free_held, "mmapped": mmapped }));
        m.extend(stepahead_keys(vol, final_figures));
    }
    j["io"] = io_json(&devices.counting.counts());
    if let Some(model) = &devices.model {
        let mut d = serde_json::to_value(model.report()).unwrap_or(serde_json::Value::Null);
        let (bucket_s, series) = model.series();
        d["bucket_s"] = bucket_s.into();
        d["series"] = serde_json::to_value(series).unwrap_or(serde_json::Value::Null);
        if let Some((cleaning_s, waited_s)) = *devices.idle.lock().unwrap_or_else(|e| e.into_inner()) {
            d["cleaning_after_run_s"] = cleaning_s.into();
            d["wait_idle_real_s"] = waited_s.into();
        }
        j["device"] = d;
    }
    j
}

/// What the engine asked of its device, by class and direction (bytes and requests).
fn io_json(c: &blockdev::IoCounts) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for class in blockdev::IoClass::ALL {
        let dir = |write: bool| {
            let n = c.get(class, write);
            serde_json::json!({ "requests": n.requests, "bytes": n.bytes })
        };
        m.insert(class.name().into(), serde_json::json!({ "read": dir(false), "write": dir(true) }));
    }
    m.insert("flushes".into(), c.flushes.into());
    serde_json::Value::Object(m)
}

fn fuse_json(c: &fusewire::Counters) -> serde_json::Value {
    use std::sync::atomic::Ordering::Relaxed;
    serde_json::json!({
        "requests_dev": c.dev_requests.load(Relaxed),
        "requests_uring": c.uring_requests.load(Relaxed),
        "uring_queues": c.uring_queues.load(Relaxed),
        "priority_switches": c.priority_switches.load(Relaxed),
        "panics": c.panics.load(Relaxed),
        "requests_by_op": c.requests_by_op().into_iter().map(|(op, n)| (op, n.into())).collect::<serde_json::Map<_, _>>(),
        // Time the daemon spent serving each kind of request (waits for the image included).
        "busy_s_by_op": c.busy_ns_by_op().into_iter().map(|(op, ns)| (op, (ns as f64 / 1e9).into())).collect::<serde_json::Map<_, _>>(),
    })
}

/// The device stack under the volume, kept for its figures.
#[derive(Clone)]
pub struct Devices {
    /// Counts every request the engine makes (top of the stack).
    counting: Arc<blockdev::CountingDevice>,
    /// The disk model, when mounted with `device=MODEL`.
    model: Option<Arc<diskmodel::ModelDevice>>,
    /// (cleaning model seconds after the run, real seconds waited), once waited for.
    idle: Arc<std::sync::Mutex<Option<(f64, f64)>>>,
    /// Requests served per FUSE transport.
    fuse: Arc<fusewire::Counters>,
}

/// The journal figures every stat report carries at its top level (the
/// interface external checks rely on). Cleaner work is only known while the
/// volume is mounted: an image reports zero.
pub fn journal_keys(vol: &Volume) -> serde_json::Map<String, serde_json::Value> {
    let j = vol.journal_stats().unwrap_or_default();
    let w = vol.write_stats().unwrap_or_default();
    let v = serde_json::json!({
        "journal_blocks": j.journal_blocks,
        "journal_used_blocks": j.journal_used_blocks,
        "journal_tail": j.journal_tail,
        "journal_head": j.journal_head,
        "journal_live_blocks": j.journal_live_blocks,
        // Live share of the used log: what moving the tail along would cost.
        "journal_live_ratio": if j.journal_used_blocks == 0 { 0.0 } else { j.journal_live_blocks as f64 / j.journal_used_blocks as f64 },
        "jmap_entries": j.jmap_entries,
        "jmap_bytes": j.jmap_bytes,
        "cleaner_blocks_moved": w.cleaner_blocks_moved,
        "cleaner_steps_cut_short": w.cleaner_steps_cut_short,
        "blocks_migrated_home": w.blocks_migrated_home,
    });
    match v {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("built as an object"),
    }
}

/// StepAhead's figures, at the top level (the bench suite reads them there).
/// The hit rate is counted with StepAhead off too, as the baseline.
fn stepahead_keys(vol: &Volume, final_figures: bool) -> serde_json::Map<String, serde_json::Value> {
    let s = vol.stepahead_stats(final_figures);
    let v = serde_json::json!({
        "stepahead": s.enabled,
        "hit_rate": s.hit_rate(),
        "translation_hits": s.translation_hits,
        "translation_misses": s.translation_misses,
        "lookup_hit_rate": s.lookup_hit_rate(),
        "lookup_hits": s.lookup_hits,
        "lookup_misses": s.lookup_misses,
        "prefetch_blocks": s.prefetch_blocks,
        "prefetch_used_blocks": s.prefetch_used_blocks,
        "prefetch_wasted_blocks": s.prefetch_wasted_blocks,
        "prefetch_unused_blocks": s.prefetch_unused_blocks,
        "prefetch_batches": s.prefetch_batches,
        "prefetch_backoffs": s.prefetch_backoffs,
        "prefetch_lone_skips": s.prefetch_lone_skips,
        "path_hints": s.path_hints,
        "path_hints_dropped": s.path_hints_dropped,
        "path_hints_denied": s.path_hints_denied,
        "path_hint_blocks": s.path_hint_blocks,
        "kb_entries": s.kb_entries,
        "kb_dirs": s.kb_dirs,
        "kb_bytes": s.kb_bytes,
        "kb_dirs_evicted": s.kb_dirs_evicted,
    });
    match v {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("built as an object"),
    }
}

struct Prepared {
    session: fusewire::Session<fuse::Ext4Fuse>,
    vol: Arc<Volume>,
    devices: Devices,
    /// Held until the daemon has written everything: see the module comment.
    lock: File,
}

/// The image as a device, direct or through the host's page cache as
/// `image_io=` asks (`auto`: direct where its file system allows).
fn open_image(image: &Path, opts: &MountOptions) -> Result<FileDevice> {
    use super::options::ImageIo;
    let writable = !opts.read_only;
    let context = || format!("{}", image.display());
    match opts.image_io {
        ImageIo::Buffered => FileDevice::open(image, writable).with_context(context),
        ImageIo::Direct => FileDevice::open_direct(image, writable).with_context(context),
        ImageIo::Auto => FileDevice::open_direct(image, writable).or_else(|e| {
            eprintln!("ext4lazy: {}: {e}; the image goes through the page cache", image.display());
            FileDevice::open(image, writable).with_context(context)
        }),
    }
}

fn prepare(opts: &MountOptions, image: &Path, mountpoint: &Path) -> Result<Prepared> {
    let (image, mnt, lock) = claim(image, mountpoint)?;
    let (base, model): (Arc<dyn blockdev::BlockDevice>, _) = match &opts.device {
        None => (Arc::new(open_image(&image, opts)?), None),
        Some(name) => {
            let m = diskmodel::open_model_device(name, &image, &opts.model)
                .map_err(|e| anyhow::anyhow!("{}: disk model {name}: {e}", image.display()))?;
            (m.clone() as Arc<dyn blockdev::BlockDevice>, Some(m))
        }
    };
    let counting = Arc::new(blockdev::CountingDevice::new(base));
    let devices = Devices { counting: counting.clone(), model, idle: Default::default(), fuse: Default::default() };
    let dev: Arc<dyn blockdev::BlockDevice> = counting;
    // Buffers fit the memory the daemon may use: the cache a quarter of it,
    // gathered and delayed data an eighth each (`memory.rs`).
    let known = super::memory::budget();
    let budget = known.unwrap_or(u64::MAX);
    let cap = |bytes: u64, share: u64| bytes.min(budget / share);
    let cache = opts.cache_mb.map_or_else(|| super::memory::cache_bytes(known), |mb| (mb as u64) << 20);
    let vopts = VolumeOptions {
        read_only: opts.read_only,
        cache_bytes: cap(cache, 4) as usize,
        data_writeback_bytes: cap((opts.writeback_mb as u64) << 20, 8) as usize,
        delalloc_bytes: cap(opts.delalloc_mb << 20, 8),
        data_expire: Duration::from_secs(opts.data_expire_s),
        log_readahead_bytes: opts.log_readahead_kb << 10,
        commit_interval: Duration::from_secs(opts.commit_s),
        dirty_expire: Duration::from_secs(opts.dirty_expire_s),
        lazy: opts.lazy,
        jmap_snapshot: opts.lazy.then(|| jmap_snapshot_path(&image)),
        cleaner: fs::CleanerPolicy { cold_age: opts.cold_age_s.map(Duration::from_secs), ..Default::default() },
        stepahead: opts.stepahead,
        ..Default::default()
    };
    let vol = Volume::open(dev, vopts).with_context(|| format!("{} is not a usable ext4 volume", image.display()))?;
    let vol = Arc::new(vol);
    let policy = fuse::CachePolicy { ttl: MOUNT_TTL, atime: opts.atime, kernel_opens: opts.kernel_opens };
    let mut fs = fuse::Ext4Fuse::new(vol.clone(), policy);
    if let Some(t) = &opts.inject_panic {
        fs = fs.with_panic_trigger(t.clone());
    }
    let notifier_slot = fs.notifier_slot();
    let session = mount_session(opts, &image, &mnt, fs, devices.fuse.clone())?;
    let _ = notifier_slot.set(session.notifier());
    Ok(Prepared { session, vol, devices, lock })
}

/// `r`, its error also told to the parent waiting on `ready` (`spawn_daemon`).
fn reported<T>(r: Result<T>, ready: &mut Option<File>) -> Result<T> {
    if let (Err(e), Some(w)) = (&r, ready.as_mut()) {
        let _ = write!(w, "{e:#}");
    }
    r
}

/// The image and the mount point, canonical and checked, with the image's
/// lock taken (held for the daemon's life).
fn claim(image: &Path, mountpoint: &Path) -> Result<(PathBuf, PathBuf, File)> {
    let image = std::fs::canonicalize(image).with_context(|| format!("cannot open {}", image.display()))?;
    let mnt = std::fs::canonicalize(mountpoint).with_context(|| format!("mount point {}", mountpoint.display()))?;
    if !mnt.is_dir() {
        bail!("mount point {} is not a directory", mnt.display());
    }
    if let Some(at) = super::umount::mounted_at(&image)? {
        bail!("{} is already mounted on {}", image.display(), at.display());
    }
    let lock = File::open(&image).with_context(|| format!("cannot open {}", image.display()))?;
    lock_exclusive(&lock, &image)?;
    Ok((image, mnt, lock))
}

/// Mount `handler` on `mnt` through FUSE as `opts` says (kernel mount, the
/// transport, read-ahead), counting its requests in `counters`. The
/// handshake (FUSE INIT) happens here: once it returns, the kernel has our
/// INIT reply (requests are served from `run`, later). Without allow_other
/// the kernel itself admits only the mount's owner.
fn mount_session<H: fusewire::Handler>(
    opts: &MountOptions,
    image: &Path,
    mnt: &Path,
    handler: H,
    counters: Arc<fusewire::Counters>,
) -> Result<fusewire::Session<H>> {
    let km = super::fusemount::KernelMount {
        read_only: opts.read_only,
        allow_other: opts.allow_other,
        no_subtype: opts.no_subtype,
        flags: opts.kernel_flags,
    };
    let fd = super::fusemount::mount(image, mnt, &km)?;
    let uring = fusewire::UringConfig { enabled: opts.uring, priority: opts.uring_sched, ..Default::default() };
    let config = fusewire::Config { threads: opts.threads, uring, counters, ..Default::default() };
    let session = match fusewire::Session::new(fd, Arc::new(handler), config) {
        Ok(s) => s,
        Err(e) => {
            let _ = super::umount::detach(mnt);
            return Err(e).with_context(|| format!("FUSE handshake on {}", mnt.display()));
        }
    };
    if opts.readahead_kb > 0 {
        if let Err(e) = raise_readahead(mnt, opts.readahead_kb) {
            fuse::report(format_args!("{}: file read-ahead left at the kernel's default: {e:#}", mnt.display()));
        }
    }
    Ok(session)
}

/// Let the kernel read ahead `kb` KiB of a file read in sequence, in one
/// READ of up to 1 MiB, instead of the 128 KiB the kernel gives a FUSE mount
/// (the INIT reply can only lower it). A cold `dd` of a 2 GiB file took
/// 1.7-2.6 s with 1 MiB against 2.7-3.2 s with 128 KiB (docs/ARCHITECTURE.md).
/// Needs root, as writing /sys does; the mount works without it.
fn raise_readahead(mnt: &Path, kb: u64) -> Result<()> {
    let entry = super::umount::mounts()?
        .into_iter()
        .rfind(|m| m.target == mnt && m.fstype.starts_with("fuse"))
        .context("the mount is not in /proc/self/mountinfo")?;
    let knob = PathBuf::from(format!("/sys/class/bdi/{}/read_ahead_kb", entry.dev));
    std::fs::write(&knob, format!("{kb}\n")).with_context(|| format!("{}", knob.display()))
}

/// Take the image's lock, waiting up to 30 s for a previous daemon that is
/// still writing back after its unmount.
fn lock_exclusive(f: &File, image: &Path) -> Result<()> {
    let start = std::time::Instant::now();
    // SAFETY: flock on a descriptor we own.
    while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if start.elapsed() > Duration::from_secs(30) {
            bail!("{} is in use by another ext4lazy daemon", image.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Become a daemon: own session, stdio to the log file.
fn detach(mountpoint: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let log = log_path(mountpoint);
    if let Some(dir) = log.parent() {
        let _ = std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir);
    }
    let f = fs::safefile::open_log(&log).or_else(|_| File::create("/dev/null"))?;
    // SAFETY: plain syscalls on descriptors we own.
    unsafe {
        libc::setsid();
        libc::dup2(f.as_raw_fd(), 1);
        libc::dup2(f.as_raw_fd(), 2);
    }
    Ok(())
}

/// Where a daemon's messages go: /run/ext4lazy/<mount point with / as _>.log
pub fn log_path(mountpoint: &Path) -> PathBuf {
    run_file(mountpoint, "log")
}

/// Where a lazy volume's jmap snapshot lives: beside an image file
/// (`IMAGE.jmap`), under /var/lib/ext4lazy for a device.
pub fn jmap_snapshot_path(image: &Path) -> PathBuf {
    if image.is_file() {
        let mut name = image.as_os_str().to_owned();
        name.push(".jmap");
        return PathBuf::from(name);
    }
    let flat: String = image.display().to_string().chars().map(|c| if c == '/' { '_' } else { c }).collect();
    PathBuf::from("/var/lib/ext4lazy").join(format!("{}.jmap", flat.trim_start_matches('_')))
}

/// Where a daemon keeps its live figures (`ext4lazy stat MOUNTPOINT`).
pub fn live_stats_path(mountpoint: &Path) -> PathBuf {
    run_file(mountpoint, "stats.json")
}

fn run_file(mountpoint: &Path, ext: &str) -> PathBuf {
    let m = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name: String = m.display().to_string().chars().map(|c| if c == '/' { '_' } else { c }).collect();
    PathBuf::from("/run/ext4lazy").join(format!("{}.{ext}", name.trim_start_matches('_')))
}

fn pipe() -> Result<(File, File)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors. Only the read end is close-on-exec:
    // the write end must survive into the child.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    unsafe { libc::fcntl(fds[0], libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: both descriptors were just created and are owned here.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}
