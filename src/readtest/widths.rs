//! How wide the file is striped: its extents' filesystem addresses (FIEMAP)
//! mapped to the data chunks holding them ([`crate::model::stripes`]),
//! against the width a new chunk gets on this array. Pure code.

use std::path::Path;

use super::report::{StripeWidths, WidthBytes};
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;
use crate::sys::kernel::btrfs::{ChunkRecord, data_chunk_map};
use crate::sys::tools::display_argv;

/// The striped profile holding most of the file's bytes in `extents`
/// (filesystem address, length), by stripe count, against the full width
/// of an array of `present` devices. `None` when no byte is in a striped
/// chunk, or the profile cannot be allocated on `present` devices.
pub(crate) fn stripe_widths(
    extents: &[(u64, u64)],
    chunks: &[ChunkRecord],
    present: u32,
    kernel: KernelVersion,
) -> Option<StripeWidths> {
    let by = data_chunk_map(chunks).bytes_by_width(extents);
    let mut per_profile: Vec<(Profile, u64)> = Vec::new();
    for (&(p, _), &b) in by
        .iter()
        .filter(|((p, _), _)| crate::balance::plan::striped(*p))
    {
        match per_profile.iter_mut().find(|(q, _)| *q == p) {
            Some(e) => e.1 += b,
            None => per_profile.push((p, b)),
        }
    }
    let (profile, total) = per_profile.into_iter().max_by_key(|&(p, b)| (b, p))?;
    let full_width = profile.stripes_on(present, kernel)?;
    let bytes_by_width: Vec<WidthBytes> = by
        .iter()
        .filter(|((p, _), b)| *p == profile && **b > 0)
        .map(|(&(_, stripes), &bytes)| WidthBytes { stripes, bytes })
        .collect();
    let narrow_bytes = bytes_by_width
        .iter()
        .filter(|w| w.stripes < full_width)
        .map(|w| w.bytes)
        .sum();
    let weighted: f64 = bytes_by_width
        .iter()
        .map(|w| w.bytes as f64 * f64::from(profile.data_stripes(w.stripes)))
        .sum();
    Some(StripeWidths {
        profile,
        full_width,
        bytes_by_width,
        narrow_bytes,
        read_stripes: if total == 0 {
            0.0
        } else {
            weighted / total as f64
        },
        full_read_stripes: profile.data_stripes(full_width),
    })
}

/// The note when part of the file is in narrow chunks (`None` otherwise).
pub(crate) fn note(w: &StripeWidths, size: u64, mount: &Path) -> Option<String> {
    if w.narrow_bytes == 0 {
        return None;
    }
    let narrowest = w.bytes_by_width.first().map_or(w.full_width, |x| x.stripes);
    let width = |v: f64| {
        if (v - v.round()).abs() < 0.05 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    };
    Some(format!(
        "{} of the file ({:.0}%) is in {} chunks striped over fewer devices than the array has ({} of {} stripes, written before a device was added): its reads use {} devices on average, not {}; `{}` restripes them.",
        crate::parse::size::format_iec(w.narrow_bytes),
        100.0 * w.narrow_bytes as f64 / size.max(1) as f64,
        w.profile,
        narrowest,
        w.full_width,
        width(w.read_stripes),
        w.full_read_stripes,
        display_argv(&["btrfs-lab", "balance", &mount.to_string_lossy()])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use btrfs_uapi::space::BlockGroupFlags as F;

    const MIB: u64 = 1 << 20;
    const G: u64 = 1 << 30;
    const K: KernelVersion = KernelVersion::new(6, 18);

    fn chunk(flags: F, logical: u64, length: u64, devids: &[u64]) -> ChunkRecord {
        ChunkRecord {
            flags: F::DATA | flags,
            logical,
            length,
            stripe_len: 64 << 10,
            num_stripes: devids.len() as u16,
            sub_stripes: if flags.contains(F::RAID10) { 2 } else { 1 },
            devids: devids.to_vec(),
        }
    }

    #[test]
    fn a_file_written_before_a_device_add_is_narrow_in_part() {
        let chunks = [
            chunk(F::RAID0, G, 768 * MIB, &[1, 2, 3]),
            chunk(F::RAID0, G + 768 * MIB, G, &[1, 2, 3, 4]),
        ];
        // 512 MiB in the 3-wide chunk, 512 MiB in the 4-wide one.
        let extents = [(G + 256 * MIB, 1024 * MIB)];
        let w = stripe_widths(&extents, &chunks, 4, K).unwrap();
        assert_eq!(w.profile, Profile::Raid0);
        assert_eq!(w.full_width, 4);
        assert_eq!(
            w.bytes_by_width,
            [
                WidthBytes {
                    stripes: 3,
                    bytes: 512 * MIB
                },
                WidthBytes {
                    stripes: 4,
                    bytes: 512 * MIB
                }
            ]
        );
        assert_eq!(w.narrow_bytes, 512 * MIB);
        assert!((w.read_stripes - 3.5).abs() < 1e-9);
        assert_eq!(w.full_read_stripes, 4);
        let n = note(&w, 1024 * MIB, Path::new("/mnt/my array")).unwrap();
        assert!(
            n.starts_with("512.00MiB of the file (50%) is in raid0 chunks"),
            "{n}"
        );
        assert!(n.contains("(3 of 4 stripes"), "{n}");
        assert!(n.contains("use 3.5 devices on average, not 4"), "{n}");
        assert!(n.contains("`btrfs-lab balance '/mnt/my array'`"), "{n}");
        // Once balanced, or on an array of three: nothing to say.
        let w = stripe_widths(&extents[..], &chunks[..1], 3, K);
        assert_eq!(w.as_ref().map(|w| w.narrow_bytes), Some(0));
        assert_eq!(note(&w.unwrap(), 1024 * MIB, Path::new("/mnt")), None);
    }

    #[test]
    fn fixed_width_profiles_and_raid10_halves() {
        // raid1 is two wide on any array: no stripe widths.
        let chunks = [chunk(F::RAID1, G, 512 * MIB, &[1, 2])];
        assert_eq!(stripe_widths(&[(G, MIB)], &chunks, 4, K), None);
        // raid10 on 4 of 6: reads use 2 devices, 3 at full width.
        let chunks = [chunk(F::RAID10, G, 512 * MIB, &[1, 2, 3, 4])];
        let w = stripe_widths(&[(G, 8 * MIB)], &chunks, 6, K).unwrap();
        assert_eq!((w.full_width, w.full_read_stripes), (6, 3));
        assert!((w.read_stripes - 2.0).abs() < 1e-9);
        assert_eq!(w.narrow_bytes, 8 * MIB);
    }
}
