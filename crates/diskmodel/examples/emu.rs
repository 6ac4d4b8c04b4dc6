//! Stand-alone front end for `ext4lazy emu ...` until the root binary wires it.

use clap::Parser;

#[derive(Parser)]
#[command(name = "emu", about = "ext4lazy disk models")]
struct Args {
    #[command(subcommand)]
    cmd: diskmodel::cli::EmuCommand,
}

fn main() -> anyhow::Result<()> {
    diskmodel::cli::run(Args::parse().cmd)
}
