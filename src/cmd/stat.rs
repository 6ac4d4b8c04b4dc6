//! `ext4lazy stat IMAGE`: what the volume is, in words or as JSON.
//! `ext4lazy stat MOUNTPOINT`: the live figures of a mounted volume, which its
//! daemon refreshes every second (root only: the file is 0600).

use anyhow::{Context, Result};
use blockdev::FileDevice;
use fs::{Volume, VolumeOptions};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

pub fn run(image: &Path, as_json: bool) -> Result<()> {
    if image.is_dir() {
        return live(image, as_json);
    }
    let dev = FileDevice::open(image, false).with_context(|| format!("{}", image.display()))?;
    let vol = Volume::open(Arc::new(dev), VolumeOptions { cache_bytes: 8 << 20, ..Default::default() })
        .with_context(|| format!("{} is not a usable ext4 volume", image.display()))?;
    let v = describe(&vol);
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_human(&v);
    }
    Ok(())
}

fn live(mountpoint: &Path, as_json: bool) -> Result<()> {
    let path = super::mount::live_stats_path(mountpoint);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        // They tell what the daemon read and learnt, names included: root's only.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            anyhow::bail!("the live figures of {} ({}) are readable by root only", mountpoint.display(), path.display())
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "{} is not an ext4lazy mount point (no live figures at {})",
                    mountpoint.display(),
                    path.display()
                )
            })
        }
    };
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (k, val) in v.as_object().into_iter().flatten() {
            println!("{k:<24} {val}");
        }
    }
    Ok(())
}

fn describe(vol: &Volume) -> serde_json::Value {
    let sb = &vol.sb;
    let st = vol.statfs();
    let uuid: String = sb.f.uuid.iter().map(|b| format!("{b:02x}")).collect();
    let label = String::from_utf8_lossy(sb.f.volume_name.split(|&c| c == 0).next().unwrap_or(&[])).into_owned();
    let journal = vol.journal().map(|j| {
        json!({
            "journal_blocks": j.len_blocks,
            "journal_bytes": j.len_blocks * u64::from(vol.block_size()),
            "sequence": j.superblock.sequence,
            "start": j.superblock.start,
            "state": if sb.needs_recovery() { "needs_recovery" } else if j.is_empty() { "clean" } else { "in_use" },
            "replayed_transactions": j.replayed_transactions,
            "replayed_blocks": j.replayed_blocks,
        })
    });
    let mut v = json!({
        "uuid": uuid,
        "label": label,
        "features": sb.feature_names(),
        "block_size": vol.block_size(),
        "blocks_count": sb.blocks_count(),
        "free_blocks": st.bfree,
        "reserved_blocks": sb.r_blocks_count(),
        "inodes_count": sb.f.inodes_count,
        "free_inodes": st.ffree,
        "inode_size": sb.inode_size(),
        "groups": vol.group_count(),
        "blocks_per_group": sb.f.blocks_per_group,
        "inodes_per_group": sb.f.inodes_per_group,
        "needs_recovery": sb.needs_recovery(),
        "journal": journal,
    });
    if let Some(m) = v.as_object_mut() {
        m.extend(super::mount::journal_keys(vol));
    }
    v
}

fn print_human(v: &serde_json::Value) {
    let g = |k: &str| v[k].to_string().trim_matches('"').to_string();
    println!("UUID:            {}", g("uuid"));
    println!("Label:           {}", g("label"));
    let feats: Vec<String> =
        v["features"].as_array().into_iter().flatten().filter_map(|f| f.as_str().map(String::from)).collect();
    println!("Features:        {}", feats.join(" "));
    println!("Block size:      {}", g("block_size"));
    println!("Blocks:          {} ({} free, {} reserved)", g("blocks_count"), g("free_blocks"), g("reserved_blocks"));
    println!("Inodes:          {} ({} free, {} bytes each)", g("inodes_count"), g("free_inodes"), g("inode_size"));
    println!(
        "Groups:          {} ({} blocks, {} inodes per group)",
        g("groups"),
        g("blocks_per_group"),
        g("inodes_per_group")
    );
    match v["journal"].as_object() {
        None => println!("Journal:         none"),
        Some(j) => println!(
            "Journal:         {} blocks ({} MiB), {}, sequence {}, start {}",
            j["journal_blocks"],
            j["journal_bytes"].as_u64().unwrap_or(0) >> 20,
            j["state"].as_str().unwrap_or("?"),
            j["sequence"],
            j["start"]
        ),
    }
    if v["journal"].is_object() {
        println!(
            "Journal use:     {} of {} blocks in use (tail {}, head {}), {} live ({:.0}%; {} jmap entries, {} bytes)",
            g("journal_used_blocks"),
            g("journal_blocks"),
            g("journal_tail"),
            g("journal_head"),
            g("journal_live_blocks"),
            v["journal_live_ratio"].as_f64().unwrap_or(0.0) * 100.0,
            g("jmap_entries"),
            g("jmap_bytes")
        );
    }
    if v["needs_recovery"].as_bool() == Some(true) {
        println!(
            "Recovery:        {} transactions, {} blocks replayed in memory (image not written)",
            v["journal"]["replayed_transactions"], v["journal"]["replayed_blocks"]
        );
    }
}
