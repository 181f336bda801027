//! After a device replace or remove: does every chunk still have the
//! redundancy its type has elsewhere in the filesystem, and a stripe on a
//! present device only? (btrfs-progs #1077: after a replace on RAID1, data
//! written while degraded stayed in SINGLE chunks on one disk and was lost
//! with it later.) Pure code over the chunk tree.

use serde::{Deserialize, Serialize};

use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::sys::kernel::btrfs::{ChunkRecord, bg_type_of, profile_of};

/// Chunks of one type and profile that lack redundancy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WeakChunks {
    /// `data`, `metadata`, `system`.
    pub kind: BgType,
    /// Their profile.
    pub profile: Profile,
    /// How many chunks.
    pub chunks: u64,
    /// Their logical bytes.
    pub bytes: u64,
    /// Why they are weak: `fewer-copies` (a profile with fewer copies than
    /// the type's other chunks: written while degraded) or `missing-device`
    /// (a stripe on a device that is not there).
    pub reason: String,
}

/// The verdict on the chunk tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RedundancyCheck {
    /// Every chunk has its type's redundancy and only present devices.
    pub ok: bool,
    /// The chunks that do not.
    pub weak: Vec<WeakChunks>,
    /// The soft conversion that gives them back their redundancy (it only
    /// relocates the chunks not yet in the profile), when one does.
    pub fix: Option<Vec<String>>,
}

/// Checks `chunks` with `present` the devids that are there.
pub fn check(chunks: &[ChunkRecord], present: &[u64], mount: &str) -> RedundancyCheck {
    let mut weak: Vec<WeakChunks> = Vec::new();
    let mut add = |kind: BgType, profile: Profile, bytes: u64, reason: &str| match weak
        .iter_mut()
        .find(|w| w.kind == kind && w.profile == profile && w.reason == reason)
    {
        Some(w) => {
            w.chunks += 1;
            w.bytes += bytes;
        }
        None => weak.push(WeakChunks {
            kind,
            profile,
            chunks: 1,
            bytes,
            reason: reason.to_owned(),
        }),
    };
    let mut best: Vec<(BgType, Profile)> = Vec::new();
    for c in chunks {
        let kind = bg_type_of(c.flags);
        let p = profile_of(c.flags);
        match best.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, b)) if tolerance(p) > tolerance(*b) => *b = p,
            Some(_) => {}
            None => best.push((kind, p)),
        }
    }
    for c in chunks {
        let kind = bg_type_of(c.flags);
        let p = profile_of(c.flags);
        if c.devids.iter().any(|d| !present.contains(d)) {
            add(kind, p, c.length, "missing-device");
        }
        let b = best.iter().find(|(k, _)| *k == kind).map_or(p, |(_, b)| *b);
        if tolerance(p) < tolerance(b) {
            add(kind, p, c.length, "fewer-copies");
        }
    }
    let target = |k: BgType| {
        weak.iter()
            .any(|w| w.kind == k && w.reason == "fewer-copies")
            .then(|| best.iter().find(|(b, _)| *b == k).map(|(_, p)| *p))
            .flatten()
    };
    let data = target(BgType::Data);
    let metadata = target(BgType::Metadata).or(target(BgType::System));
    let fix = (data.is_some() || metadata.is_some()).then(|| {
        let mut v = vec![
            "btrfs-lab".to_owned(),
            "convert".to_owned(),
            mount.to_owned(),
        ];
        if let Some(d) = data {
            v.extend(["--data".to_owned(), d.name().to_owned()]);
        }
        if let Some(m) = metadata {
            v.extend(["--metadata".to_owned(), m.name().to_owned()]);
        }
        v
    });
    RedundancyCheck {
        ok: weak.is_empty(),
        weak,
        fix,
    }
}

/// Devices a profile survives losing.
fn tolerance(p: Profile) -> u32 {
    p.geometry().tolerated_failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use btrfs_uapi::space::BlockGroupFlags as F;

    fn chunk(flags: F, devids: &[u64]) -> ChunkRecord {
        ChunkRecord {
            flags,
            logical: 0,
            length: 1 << 30,
            stripe_len: 64 << 10,
            num_stripes: devids.len() as u16,
            sub_stripes: 1,
            devids: devids.to_vec(),
        }
    }

    #[test]
    fn single_chunks_next_to_raid1_are_weak_and_a_soft_convert_fixes_them() {
        let chunks = [
            chunk(F::DATA | F::RAID1, &[1, 2]),
            chunk(F::DATA, &[1]),
            chunk(F::DATA, &[2]),
            chunk(F::METADATA | F::RAID1, &[1, 2]),
            chunk(F::SYSTEM | F::RAID1, &[1, 2]),
        ];
        let c = check(&chunks, &[1, 2], "/mnt");
        assert!(!c.ok);
        assert_eq!(c.weak.len(), 1);
        assert_eq!(c.weak[0].chunks, 2);
        assert_eq!(c.weak[0].profile, Profile::Single);
        assert_eq!(c.weak[0].reason, "fewer-copies");
        assert_eq!(
            c.fix.unwrap(),
            ["btrfs-lab", "convert", "/mnt", "--data", "raid1"]
        );
    }

    #[test]
    fn a_clean_raid1_and_a_stripe_on_a_missing_device() {
        let chunks = [
            chunk(F::DATA | F::RAID1, &[1, 3]),
            chunk(F::METADATA | F::RAID1, &[1, 3]),
        ];
        assert!(check(&chunks, &[1, 3], "/mnt").ok);
        let c = check(&chunks, &[1], "/mnt");
        assert!(!c.ok);
        assert!(c.weak.iter().all(|w| w.reason == "missing-device"));
        assert!(c.fix.is_none());
        // A deliberate RAID0 everywhere is not weak: nothing has more copies.
        let c = check(&[chunk(F::DATA | F::RAID0, &[1, 2, 3])], &[1, 2, 3], "/m");
        assert!(c.ok);
    }
}
