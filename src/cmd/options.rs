//! Mount options: parsed once, validated with clear messages.

use anyhow::{bail, Context, Result};

#[derive(Clone, Debug)]
pub struct MountOptions {
    pub read_only: bool,
    pub allow_other: bool,
    pub foreground: bool,
    /// Metadata cache (`cache_mb=`); None: an eighth of the daemon's memory
    /// budget, at least 256 MiB (`memory::cache_bytes`).
    pub cache_mb: Option<usize>,
    /// File data gathered in memory before it goes out sorted (`writeback_mb=`, 0: off).
    pub writeback_mb: usize,
    /// File data written into holes that waits without blocks (`delalloc_mb=`, 0: off).
    pub delalloc_mb: u64,
    /// Seconds delayed file data may wait before it goes out (`data_expire=`, 5).
    pub data_expire_s: u64,
    /// KiB the kernel reads ahead in a file read in sequence (`readahead_kb=`, 1024; 0: the kernel's 128).
    pub readahead_kb: u64,
    /// How the daemon reads and writes its image (`image_io=direct|buffered|auto`).
    pub image_io: ImageIo,
    /// Lazy mode: KiB of the log a metadata miss reads at once (`log_readahead_kb=`, 256).
    pub log_readahead_kb: u64,
    /// Worker threads serving FUSE requests on /dev/fuse.
    pub threads: usize,
    /// FUSE over io_uring, one queue per CPU, when the kernel offers it (`transport=uring|dev`).
    pub uring: bool,
    /// Scheduling class of the io_uring queue threads (`uring_sched=auto|idle|normal`).
    pub uring_sched: fusewire::Priority,
    /// Seconds between commits (`commit=`, as ext4).
    pub commit_s: u64,
    /// Seconds before committed metadata is written home (`dirty_expire=`).
    pub dirty_expire_s: u64,
    /// Run on a disk model (`device=cmr|smr-seagate|smr-wd`) instead of the image directly.
    pub device: Option<String>,
    /// Options for the disk model (speed=, trace=, bucket=, param.NAME=...).
    pub model: diskmodel::ModelOptions,
    /// Show the mount as type `fuse` (no subtype).
    pub no_subtype: bool,
    /// MS_* flags for the kernel (nosuid, nodev, noatime, sync, ...).
    pub kernel_flags: libc::c_ulong,
    /// noatime / relatime (default) / strictatime.
    pub atime: fuse::AtimePolicy,
    /// Lazy writeback journaling (`journal=lazy`).
    pub lazy: bool,
    /// Lazy mode: while idle, migrate home metadata unchanged for this many
    /// seconds (`cold_age=S`; hot/cold separation, docs/LAZY.md). Off by default.
    pub cold_age_s: Option<u64>,
    /// Write the engine's counters here as JSON at unmount (`stats=PATH`).
    pub stats: Option<std::path::PathBuf>,
    /// StepAhead prefetching (`stepahead`, `stepahead_budget=BLOCKS`, `stepahead_depth=LEVELS`,
    /// `stepahead_paths=ahead|exact`, `stepahead_kb_mb=MIB`).
    pub stepahead: Option<fs::stepahead::StepAheadOptions>,
    /// The kernel opens files without asking the daemon (`kernel_opens`;
    /// always so on read-only mounts): see fuse::CachePolicy::kernel_opens.
    pub kernel_opens: bool,
    /// Requests that panic on purpose (`inject_panic=OP[@INO|/NAME]`, for
    /// tests of the request boundary; see crates/fuse/src/inject.rs).
    pub inject_panic: Option<fuse::PanicTrigger>,
    /// Serve an in-memory file system that drops file data instead of the
    /// volume (`floor`, for measurement: what the FUSE round trips alone
    /// cost; crates/fuse/src/floor.rs). The image is not read.
    pub floor: bool,
    /// `floor=data`: the floor keeps file data, in a sparse file beside the
    /// image (`<image>.floor-data`, removed at unmount), through the host's
    /// page cache.
    pub floor_data: bool,
}

/// How the daemon reaches its image file or block device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageIo {
    /// O_DIRECT: no second copy in the host's page cache (blockdev's
    /// direct.rs says why); refused where the file system has no direct I/O.
    Direct,
    /// Through the host's page cache.
    Buffered,
    /// Direct where the image's file system offers it, else buffered.
    Auto,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: true,
            allow_other: false,
            foreground: false,
            cache_mb: None,
            writeback_mb: 64,
            delalloc_mb: 256,
            data_expire_s: 5,
            image_io: ImageIo::Buffered,
            readahead_kb: 1024,
            log_readahead_kb: fs::JOURNAL_READAHEAD_BYTES >> 10,
            // More workers than CPUs only spin on the write lock (measured:
            // CreateFiles 1.05 s with 1 worker vs 1.29 s with 8 on 2 CPUs).
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            uring: true,
            uring_sched: fusewire::Priority::Adaptive,
            device: None,
            model: diskmodel::ModelOptions::default(),
            commit_s: 5,
            dirty_expire_s: 30,
            no_subtype: false,
            kernel_flags: 0,
            atime: fuse::AtimePolicy::RelAtime,
            lazy: false,
            cold_age_s: None,
            stats: None,
            stepahead: None,
            kernel_opens: false,
            inject_panic: None,
            floor: false,
            floor_data: false,
        }
    }
}

impl MountOptions {
    /// Parse `-o` arguments (each comma-separated). Unknown options are refused.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut o = MountOptions::default();
        for opt in args.iter().flat_map(|a| a.split(',')).filter(|s| !s.is_empty()) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let number = |v: Option<&str>| -> Result<usize> {
                let v = v.with_context(|| format!("mount option {key} needs a value ({key}=N)"))?;
                v.parse::<usize>().with_context(|| format!("mount option {key}: {v:?} is not a number"))
            };
            match key {
                // The last of ro/rw wins, as with mount(8) (the helper prepends its rw default).
                "ro" => o.read_only = true,
                "rw" => o.read_only = false,
                "allow_other" => o.allow_other = true,
                // Permissions are always checked by the kernel (as ext4 does); accepted for compatibility.
                "default_permissions" => {}
                "foreground" => o.foreground = true,
                "cache_mb" => o.cache_mb = Some(number(value)?.max(1)),
                "writeback_mb" => o.writeback_mb = number(value)?,
                "delalloc_mb" => o.delalloc_mb = number(value)? as u64,
                "data_expire" => o.data_expire_s = number(value)? as u64,
                "readahead_kb" => o.readahead_kb = (number(value)? as u64).min(1 << 20),
                "image_io" => match value {
                    Some("direct") => o.image_io = ImageIo::Direct,
                    Some("buffered") => o.image_io = ImageIo::Buffered,
                    Some("auto") => o.image_io = ImageIo::Auto,
                    _ => bail!(
                        "mount option image_io= takes direct (O_DIRECT), buffered (the host's page cache) or auto"
                    ),
                },
                "log_readahead_kb" => o.log_readahead_kb = (number(value)? as u64).clamp(4, 1 << 20),
                "threads" => o.threads = number(value)?.clamp(1, 64),
                "transport" => match value {
                    Some("uring") => o.uring = true,
                    Some("dev") => o.uring = false,
                    _ => bail!("mount option transport= takes uring (FUSE over io_uring) or dev (/dev/fuse)"),
                },
                "uring_sched" => match value {
                    Some("auto") => o.uring_sched = fusewire::Priority::Adaptive,
                    Some("idle") => o.uring_sched = fusewire::Priority::Idle,
                    Some("normal") => o.uring_sched = fusewire::Priority::Normal,
                    _ => bail!("mount option uring_sched= takes auto, idle or normal"),
                },
                "commit" => o.commit_s = (number(value)? as u64).max(1),
                "dirty_expire" => o.dirty_expire_s = number(value)? as u64,
                "cold_age" => o.cold_age_s = Some(number(value)? as u64),
                "nosubtype" => o.no_subtype = true,
                "kernel_opens" if value.is_none() => o.kernel_opens = true,
                "floor" => match value {
                    None => o.floor = true,
                    Some("data") => (o.floor, o.floor_data) = (true, true),
                    Some(_) => bail!("mount option floor takes no value, or floor=data"),
                },
                "nokernel_opens" if value.is_none() => o.kernel_opens = false,
                "stepahead" if value.is_none() => {
                    o.stepahead.get_or_insert_with(Default::default);
                }
                "nostepahead" if value.is_none() => o.stepahead = None,
                "stepahead_budget" => {
                    o.stepahead.get_or_insert_with(Default::default).budget_blocks = number(value)?.max(1);
                }
                "stepahead_paths" => {
                    let sa = o.stepahead.get_or_insert_with(Default::default);
                    sa.path_ahead = match value {
                        Some("ahead") => true,
                        Some("exact") => false,
                        _ => bail!("mount option stepahead_paths needs a value: stepahead_paths=ahead or stepahead_paths=exact"),
                    };
                }
                "stepahead_kb_mb" => {
                    o.stepahead.get_or_insert_with(Default::default).kb_bytes = number(value)?.clamp(1, 1 << 20) << 20;
                }
                "stepahead_depth" => {
                    o.stepahead.get_or_insert_with(Default::default).depth = number(value)?.clamp(1, 16);
                }
                "inject_panic" => {
                    let spec = value
                        .context("mount option inject_panic needs a value (inject_panic=OP, OP@INO or OP/NAME)")?;
                    o.inject_panic =
                        Some(spec.parse().map_err(|e| anyhow::anyhow!("mount option inject_panic={spec}: {e}"))?);
                }
                "stats" => match value {
                    Some(p) if !p.is_empty() => o.stats = Some(p.into()),
                    _ => bail!("mount option stats= takes a file name"),
                },
                // errors=: the write path turns the volume read-only on an I/O error in every case.
                "errors" => match value {
                    Some("remount-ro" | "continue" | "panic") => {}
                    _ => bail!("mount option errors= takes remount-ro, continue or panic"),
                },
                // Options meant for mount(8), fstab or systemd, not for the file system.
                "_netdev" | "nofail" | "auto" | "noauto" | "user" | "users" | "nouser" | "owner" | "group"
                | "defaults" | "comment" | "loop" => {}
                k if k.starts_with("x-") => {}
                k if value.is_none() && super::fusemount::flag_option(k).is_some() => {
                    match k {
                        "noatime" => o.atime = fuse::AtimePolicy::NoAtime,
                        "relatime" => o.atime = fuse::AtimePolicy::RelAtime,
                        "strictatime" => o.atime = fuse::AtimePolicy::StrictAtime,
                        _ => {}
                    }
                    o.kernel_flags |= super::fusemount::flag_option(k).unwrap_or(0);
                }
                // journal=: how metadata reaches its home; data=: the kernel's data mode.
                "journal" => match value {
                    Some("ordered") => o.lazy = false,
                    Some("lazy") => o.lazy = true,
                    Some(v) => bail!("mount option journal={v}: journal= takes ordered or lazy"),
                    None => bail!("mount option journal needs a value (journal=ordered or journal=lazy)"),
                },
                "data" => match value {
                    Some("ordered") => {}
                    Some(v) => bail!("mount option data={v}: only data=ordered is available"),
                    None => bail!("mount option data needs a value (data=ordered)"),
                },
                "device" => {
                    let m = value.context("mount option device needs a model name (device=MODEL)")?;
                    if m != "file" {
                        if !diskmodel::MODEL_NAMES.contains(&m) {
                            bail!("unknown device model {m:?} (models: file, {})", diskmodel::MODEL_NAMES.join(", "));
                        }
                        o.device = Some(m.to_string());
                    }
                }
                _ => {
                    let owned = match value {
                        Some(v) => o.model.set(key, v).map_err(|e| anyhow::anyhow!("mount option {opt:?}: {e}"))?,
                        None => false,
                    };
                    if !owned {
                        bail!("unknown mount option {opt:?}");
                    }
                }
            }
        }
        if o.device.is_none() && o.model.trace.is_some() {
            bail!("mount option trace= needs device=MODEL");
        }
        if o.device.is_some() && o.image_io != ImageIo::Buffered {
            bail!("mount option image_io= applies to an image read directly, not through device=MODEL");
        }
        if o.cold_age_s.is_some() && !o.lazy {
            bail!("mount option cold_age= applies to journal=lazy only (ordered mode writes everything home anyway)");
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<MountOptions> {
        MountOptions::parse(&[s.to_string()])
    }

    #[test]
    fn parses_known_options() {
        let o = p("ro,allow_other,default_permissions,cache_mb=64,threads=4").unwrap();
        assert!(o.read_only && o.allow_other && !o.foreground);
        assert_eq!((o.cache_mb, o.threads), (Some(64), 4));
        assert_eq!(o.writeback_mb, 64, "data write-back on by default");
        assert_eq!(p("rw,writeback_mb=0").unwrap().writeback_mb, 0);
        assert_eq!(o.delalloc_mb, 256, "delayed allocation on by default");
        assert_eq!(p("rw,delalloc_mb=0").unwrap().delalloc_mb, 0);
        assert!(p("writeback_mb=some").is_err());
        assert_eq!(p("log_readahead_kb=2048").unwrap().log_readahead_kb, 2048);
        assert_eq!(p("rw").unwrap().log_readahead_kb, 256);
        assert!(p("log_readahead_kb=big").is_err());
        assert_eq!(p("rw").unwrap().image_io, ImageIo::Buffered, "the host's page cache by default");
        assert_eq!(p("image_io=direct").unwrap().image_io, ImageIo::Direct);
        assert_eq!(p("image_io=direct,image_io=auto").unwrap().image_io, ImageIo::Auto);
        assert!(p("image_io=odirect").is_err());
        assert!(p("image_io=direct,device=cmr").is_err(), "a model has its own backing file");
        assert_eq!(p("rw").unwrap().readahead_kb, 1024);
        assert_eq!(p("readahead_kb=0").unwrap().readahead_kb, 0);
    }

    #[test]
    fn last_of_ro_and_rw_wins() {
        assert!(p("rw,ro").unwrap().read_only);
        assert!(!p("ro,rw").unwrap().read_only);
        assert!(MountOptions::parse(&["rw".into(), "ro,strictatime".into()]).unwrap().read_only);
    }

    #[test]
    fn device_model_options() {
        let o = p("ro,device=smr-seagate,speed=10,param.idle_delay_s=2").unwrap();
        assert_eq!(o.device.as_deref(), Some("smr-seagate"));
        assert_eq!(o.model.speed, Some(10.0));
        assert!(p("device=floppy").is_err());
        assert!(p("device=cmr,speed=-1").is_err());
    }

    #[test]
    fn cold_age_needs_lazy_mode() {
        assert_eq!(p("rw,cold_age=600,journal=lazy").unwrap().cold_age_s, Some(600));
        assert!(p("rw,cold_age=600").unwrap_err().to_string().contains("journal=lazy"));
        assert!(p("rw,journal=lazy,cold_age=soon").is_err());
    }

    #[test]
    fn stepahead_options() {
        assert!(p("ro").unwrap().stepahead.is_none());
        assert_eq!(p("ro,stepahead").unwrap().stepahead, Some(Default::default()));
        assert_eq!(p("stepahead_budget=64").unwrap().stepahead.map(|s| s.budget_blocks), Some(64));
        assert!(p("stepahead,nostepahead").unwrap().stepahead.is_none());
        assert!(p("stepahead=yes").is_err());
        assert_eq!(p("stepahead").unwrap().stepahead.map(|s| s.path_ahead), Some(true));
        assert_eq!(p("stepahead_paths=exact").unwrap().stepahead.map(|s| s.path_ahead), Some(false));
        assert!(p("stepahead_paths=some").is_err());
        assert!(p("stepahead_paths").is_err());
        assert!(p("stepahead_budget=x").is_err());
        assert_eq!(p("stepahead_kb_mb=16").unwrap().stepahead.map(|s| s.kb_bytes), Some(16 << 20));
        assert_eq!(p("stepahead").unwrap().stepahead.map(|s| s.kb_bytes), Some(128 << 20));
        assert!(p("stepahead_kb_mb=lots").is_err());
    }

    #[test]
    fn kernel_opens_is_a_flag() {
        assert!(!p("rw").unwrap().kernel_opens);
        assert!(p("rw,kernel_opens").unwrap().kernel_opens);
        assert!(!p("rw,kernel_opens,nokernel_opens").unwrap().kernel_opens);
        assert!(!p("rw").unwrap().floor);
        assert!(p("rw,floor").unwrap().floor);
        assert!(p("floor=1").is_err(), "a flag takes no value");
        let data = p("floor=data").unwrap();
        assert!(data.floor && data.floor_data, "floor=data: the floor, keeping file data");
        assert!(!p("floor").unwrap().floor_data);
        assert!(p("rw,kernel_opens=1").is_err());
    }

    #[test]
    fn inject_panic_takes_a_trigger() {
        assert!(p("rw").unwrap().inject_panic.is_none());
        assert_eq!(
            p("rw,inject_panic=WRITE@12").unwrap().inject_panic.map(|t| t.to_string()).as_deref(),
            Some("WRITE@12")
        );
        assert_eq!(
            p("inject_panic=CREATE/boom").unwrap().inject_panic.map(|t| t.to_string()).as_deref(),
            Some("CREATE/boom")
        );
        assert!(p("inject_panic=SCRIBBLE").unwrap_err().to_string().contains("unknown FUSE opcode"));
        assert!(p("inject_panic").is_err());
    }

    #[test]
    fn refuses_unknown_and_malformed() {
        assert!(p("bogus").unwrap_err().to_string().contains("bogus"));
        assert!(p("cache_mb=lots").is_err());
        assert!(p("cache_mb").is_err());
    }
}
