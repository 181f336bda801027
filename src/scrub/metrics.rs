//! The Prometheus metrics of the last scrub, for node_exporter's textfile
//! collector.

use std::path::Path;

use super::SavedScrub;
use crate::report::metrics::Metrics;

/// The metrics of the last scrub of a filesystem (`last`: what btrfs-lab
/// saved of it, the sums of every run of a resumed scrub) and whether one
/// runs now, as Prometheus text for node_exporter's textfile collector.
/// Labelled as doctor's (`mountpoint`, `uuid`, then `devid`), and with
/// names of their own (doctor's `btrfs_lab_scrub_errors` and
/// `btrfs_lab_scrub_last_end_timestamp_seconds` are the record of any
/// scrub, btrfs-progs' too): both files can sit in one collector directory.
pub fn metrics(mount_point: &Path, fsid: &str, last: Option<&SavedScrub>, running: bool) -> String {
    let mp = mount_point.display().to_string();
    let fs: [(&str, &str); 2] = [("mountpoint", &mp), ("uuid", fsid)];
    let mut m = Metrics::default();
    m.add(
        "btrfs_lab_scrub_running",
        "gauge",
        "Whether btrfs-lab scrub runs on the filesystem (1 from its start, 0 once it ended).",
        &fs,
        f64::from(u8::from(running)),
    );
    let Some(last) = last else {
        return m.render();
    };
    m.add(
        "btrfs_lab_scrub_last_start_timestamp_seconds",
        "gauge",
        "When the last btrfs-lab scrub started (its first run when resumed), seconds since the epoch.",
        &fs,
        last.started_at as f64,
    );
    m.add(
        "btrfs_lab_scrub_last_saved_timestamp_seconds",
        "gauge",
        "When the last btrfs-lab scrub run ended (finished or interrupted), seconds since the epoch.",
        &fs,
        last.saved_at as f64,
    );
    m.add(
        "btrfs_lab_scrub_last_duration_seconds",
        "gauge",
        "How long the runs of the last btrfs-lab scrub took together.",
        &fs,
        last.duration_seconds,
    );
    m.add(
        "btrfs_lab_scrub_last_finished",
        "gauge",
        "Whether the last btrfs-lab scrub read every device to its end (1) or was interrupted (0: --resume continues it).",
        &fs,
        f64::from(u8::from(last.finished)),
    );
    for d in &last.devices {
        let devid = d.devid.to_string();
        let dev = [fs[0], fs[1], ("devid", devid.as_str())];
        m.add(
            "btrfs_lab_scrub_device_bytes_scrubbed",
            "gauge",
            "Bytes the last btrfs-lab scrub read on a device.",
            &dev,
            d.bytes_scrubbed as f64,
        );
        for (kind, v) in [
            ("read", d.read_errors),
            ("csum", d.csum_errors),
            ("verify", d.verify_errors),
            ("super", d.super_errors),
        ] {
            m.add(
                "btrfs_lab_scrub_device_errors",
                "gauge",
                "Errors the last btrfs-lab scrub found on a device, by kind.",
                &[dev[0], dev[1], dev[2], ("kind", kind)],
                v as f64,
            );
        }
        m.add(
            "btrfs_lab_scrub_device_corrected_errors",
            "gauge",
            "Errors the last btrfs-lab scrub repaired on a device.",
            &dev,
            d.corrected as f64,
        );
        m.add(
            "btrfs_lab_scrub_device_uncorrectable_errors",
            "gauge",
            "Errors the last btrfs-lab scrub found no good copy for on a device.",
            &dev,
            d.uncorrectable as f64,
        );
    }
    m.render()
}
