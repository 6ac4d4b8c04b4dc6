//! `ext4lazy`: mount an ext4 volume through FUSE, inspect it, emulate disks,
//! run the benchmarks. Each subcommand lives in its own module under `cmd/`.

mod cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "ext4lazy", version, about = "A userspace ext4 with lazy writeback journaling", long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mount IMAGE at MOUNTPOINT; returns once the mount is live.
    Mount {
        /// Comma-separated options: ro, rw, allow_other, default_permissions, foreground, cache_mb=N, ... (README).
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        image: PathBuf,
        mountpoint: PathBuf,
    },
    /// Unmount MOUNTPOINT; returns once the daemon has written everything and exited.
    Umount { mountpoint: PathBuf },
    /// Show a volume's features, sizes and journal state; for a mount point,
    /// its daemon's live figures.
    Stat {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        image: PathBuf,
    },
    /// Write every journalled metadata block home and empty the journal
    /// (a lazy volume then needs no recovery).
    Checkpoint { image: PathBuf },
    /// Install the binary in /usr/local/bin and the mount(8) helper /sbin/mount.fuse.ext4lazy.
    Install,
    /// Remove what `install` put in place.
    Uninstall,
    /// The papers' benchmarks, side by side: `bench list`, `bench run --suite S --device D --systems A,B
    /// [--scale X] [--speed S] --out DIR`, `bench report DIR` (see docs/BENCH.md).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Disk models: random-write runs, an image server for kernel file systems, reports.
    Emu {
        #[command(subcommand)]
        cmd: diskmodel::cli::EmuCommand,
    },
}

fn main() -> ExitCode {
    if let Some(h) = cmd::helper::invoked_as() {
        let (name, r) = match h {
            cmd::helper::Helper::Mount => ("mount.fuse.ext4lazy", cmd::helper::run_helper()),
            cmd::helper::Helper::Umount => ("umount.fuse.ext4lazy", cmd::helper::run_umount_helper()),
        };
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: {e:#}");
                // mount(8)'s "mount failure" status (umount(8) also takes any non-zero).
                ExitCode::from(32)
            }
        };
    }
    let cli = Cli::parse();
    if !matches!(cli.cmd, Command::Mount { .. }) {
        // A reporting command piped into `head` ends quietly, as other tools do.
        // SAFETY: resetting a signal disposition before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.cmd {
        Command::Mount { options, image, mountpoint } => cmd::mount::run(&options, &image, &mountpoint),
        Command::Umount { mountpoint } => cmd::umount::run(&mountpoint),
        Command::Stat { json, image } => cmd::stat::run(&image, json),
        Command::Checkpoint { image } => cmd::checkpoint::run(&image),
        Command::Emu { cmd } => diskmodel::cli::run(cmd),
        Command::Bench { args } => cmd::bench::run(&args),
        Command::Install => cmd::install::install(),
        Command::Uninstall => cmd::install::uninstall(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One clear line: the chain of causes joined.
            eprintln!("ext4lazy: {e:#}");
            ExitCode::FAILURE
        }
    }
}
