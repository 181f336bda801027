//! Data in chunks narrower than the array: striped data (RAID0, RAID10,
//! RAID5/6) written before a device was added keeps the stripes it had, and
//! reads of it use those devices alone. Read from the chunk tree with the
//! balance planner's view ([`crate::balance::plan`]); the finding is
//! `data-narrow-chunks` ([`super::analyse`]).

use serde::{Deserialize, Serialize};

use crate::balance::plan::{self, Kind, Member, Spread};
use crate::model::relocate::Layout;
use crate::operation::state::FsState;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;

/// Striped data that sits (partly) in chunks narrower than a new chunk on
/// this array would be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NarrowData {
    /// How the data of that profile lies now (the balance planner's spread:
    /// chunks by stripe count, the full width, the average read width).
    pub spread: Spread,
    /// The devices a read uses on average once `btrfs-lab balance` has
    /// relocated the narrow chunks, as its replay leaves them (absent: the
    /// replay runs out of space).
    pub read_stripes_after: Option<f64>,
    /// One reader's read ceiling of the array at full width, from the
    /// members' PCIe links (`links`, encoded bytes per second; absent when
    /// a member has no link information).
    pub full_ceiling_bytes_per_sec: Option<u64>,
}

impl NarrowData {
    /// Bytes used in the narrow chunks, and the chunks.
    pub fn narrow(&self) -> (u64, u64) {
        let full = self.spread.full_width.unwrap_or(0);
        self.spread
            .widths
            .iter()
            .filter(|w| w.stripes < full)
            .fold((0, 0), |(b, c), w| (b + w.used_bytes, c + w.chunks))
    }

    /// The devices a read of the narrow data uses, on average over its
    /// bytes.
    pub fn narrow_read_stripes(&self) -> f64 {
        let full = self.spread.full_width.unwrap_or(0);
        let (bytes, _) = self.narrow();
        if bytes == 0 {
            return 0.0;
        }
        let weighted: f64 = self
            .spread
            .widths
            .iter()
            .filter(|w| w.stripes < full)
            .map(|w| w.used_bytes as f64 * f64::from(self.spread.profile.data_stripes(w.stripes)))
            .sum();
        weighted / bytes as f64
    }

    /// The devices a read of a full-width chunk uses.
    pub fn full_read_stripes(&self) -> u32 {
        self.spread
            .profile
            .data_stripes(self.spread.full_width.unwrap_or(1))
    }
}

/// The striped data of `layout` in chunks narrower than the array (pure):
/// `None` when every used byte of it is in full-width chunks, or when the
/// planner's replay of `btrfs-lab balance` would not widen it (the devices
/// a new chunk needs have no room). `members` is aligned with
/// [`Layout::free`].
pub fn narrow_data(layout: &Layout, members: &[Member]) -> Option<NarrowData> {
    let spread = plan::spread(layout, members).into_iter().find(|s| {
        s.kind == Kind::Data
            && plan::striped(s.profile)
            && s.full_width.is_some_and(|full| {
                s.widths
                    .iter()
                    .any(|w| w.stripes < full && w.used_bytes > 0)
            })
    })?;
    let read_stripes_after = match plan::plan(layout, members) {
        Ok(p) => {
            let after = p
                .after
                .iter()
                .find(|a| a.kind == Kind::Data && a.profile == spread.profile)
                .map_or(spread.read_stripes, |a| a.read_stripes);
            // Nothing a balance can change (no room where a wider chunk
            // needs it): not a finding.
            if after <= spread.read_stripes + 0.01 {
                return None;
            }
            Some(after)
        }
        Err(_) => None,
    };
    Some(NarrowData {
        spread,
        read_stripes_after,
        full_ceiling_bytes_per_sec: None,
    })
}

/// Reads the chunk tree of the filesystem at `state` (root only) and finds
/// its narrow data, with the read ceiling `links` knows for the members.
/// `None` when there is none, while a balance exists (its finding says
/// what to do), or when the chunks cannot be read.
pub(crate) fn read(root: &SysRoot, state: &FsState) -> Option<NarrowData> {
    if state.balance.is_some() || state.mixed_block_groups() {
        return None;
    }
    // The chunks and their usage, without the data extents (a budget of 0):
    // the spread needs no more, and doctor stays cheap on a large array.
    let bgt = state.features.iter().any(|f| f == "block_group_tree");
    let records = FsHandle::open(&state.path)
        .ok()?
        .chunk_layout(bgt, 0)
        .ok()??;
    let layout = crate::operation::layout::layout_of(state, records)?;
    let members = Member::of_state(state);
    let mut n = narrow_data(&layout, &members)?;
    let paths: Vec<std::path::PathBuf> = state
        .devices
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| std::path::PathBuf::from(&d.path))
        .collect();
    n.full_ceiling_bytes_per_sec =
        crate::hw::array_ceiling_for_block_devices(root, &paths, n.spread.profile)
            .ok()
            .and_then(|c| c.one_reader)
            .map(|b| b.encoded_bytes_per_sec)
            .filter(|&b| b > 0);
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::alloc::ChunkKind;
    use crate::model::kernel::KernelVersion;
    use crate::model::profile::Profile;
    use crate::model::relocate::LayoutChunk;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn members(n: usize) -> Vec<Member> {
        (0..n)
            .map(|i| Member {
                devid: i as u64 + 1,
                present: true,
            })
            .collect()
    }

    /// `devices` of `size`; data chunks of `profile` as (devices, used),
    /// 256 MiB stripes, and a raid1 metadata chunk on the first two.
    fn layout(devices: usize, size: u64, profile: Profile, data: &[(&[usize], u64)]) -> Layout {
        let mut free = vec![size - MIB; devices];
        let mut logical = 30 * MIB;
        let mut chunks = Vec::new();
        let mut push = |kind, profile: Profile, devs: &[usize], used: u64| {
            let stripe = 256 * MIB;
            for &d in devs {
                free[d] -= stripe;
            }
            let length = stripe * u64::from(profile.data_stripes(devs.len() as u32));
            chunks.push(LayoutChunk {
                kind,
                profile,
                logical,
                length,
                used: used.min(length),
                stripes: devs.iter().map(|&d| (d, stripe)).collect(),
                extents: None,
            });
            logical += length;
        };
        push(ChunkKind::Metadata, Profile::Raid1, &[0, 1], 8 * MIB);
        for &(devs, used) in data {
            push(ChunkKind::Data, profile, devs, used);
        }
        Layout {
            free,
            chunks,
            total_bytes: size * devices as u64,
            kernel: KernelVersion::new(6, 18),
            global_reserve: 16 * MIB,
        }
    }

    #[test]
    fn raid0_written_on_three_then_a_fourth_added_is_narrow() {
        let three: &[usize] = &[0, 1, 2];
        let four: &[usize] = &[0, 1, 2, 3];
        let l = layout(
            4,
            4 * GIB,
            Profile::Raid0,
            &[(three, 768 * MIB), (three, 512 * MIB), (four, GIB)],
        );
        let n = narrow_data(&l, &members(4)).unwrap();
        assert_eq!(n.spread.profile, Profile::Raid0);
        assert_eq!(n.spread.full_width, Some(4));
        assert_eq!(n.narrow(), (1280 * MIB, 2));
        assert!((n.narrow_read_stripes() - 3.0).abs() < 1e-9);
        assert_eq!(n.full_read_stripes(), 4);
        // The whole: 1.25 GiB on 3, 1 GiB on 4.
        let avg = (1280.0 * 3.0 + 1024.0 * 4.0) / 2304.0;
        assert!((n.spread.read_stripes - avg).abs() < 1e-9);
        // The balance's replay puts it on all four.
        let after = n.read_stripes_after.unwrap();
        assert!((after - 4.0).abs() < 1e-9, "{after}");
    }

    #[test]
    fn full_width_data_or_a_fixed_width_profile_is_not_narrow() {
        let four: &[usize] = &[0, 1, 2, 3];
        let l = layout(4, 4 * GIB, Profile::Raid0, &[(four, GIB), (four, GIB)]);
        assert_eq!(narrow_data(&l, &members(4)), None);
        // raid1 on two of four devices is its width, not a narrow chunk.
        let two: &[usize] = &[0, 1];
        let l = layout(4, 4 * GIB, Profile::Raid1, &[(two, 256 * MIB); 3]);
        assert_eq!(narrow_data(&l, &members(4)), None);
        // Empty narrow chunks hold nothing a read would use.
        let three: &[usize] = &[0, 1, 2];
        let l = layout(4, 4 * GIB, Profile::Raid0, &[(three, 0), (four, GIB)]);
        assert_eq!(narrow_data(&l, &members(4)), None);
    }

    #[test]
    fn raid10_reads_half_its_stripes() {
        let four: &[usize] = &[0, 1, 2, 3];
        let l = layout(6, 4 * GIB, Profile::Raid10, &[(four, 512 * MIB)]);
        let n = narrow_data(&l, &members(6)).unwrap();
        assert_eq!(n.spread.full_width, Some(6));
        assert!((n.narrow_read_stripes() - 2.0).abs() < 1e-9);
        assert_eq!(n.full_read_stripes(), 3);
    }

    #[test]
    fn narrow_chunks_a_balance_cannot_widen_are_not_a_finding() {
        // The fourth device has no room: a new chunk is as narrow.
        let three: &[usize] = &[0, 1, 2];
        let mut l = layout(4, 4 * GIB, Profile::Raid0, &[(three, 768 * MIB)]);
        l.free[3] = 0;
        assert_eq!(narrow_data(&l, &members(4)), None);
        // A missing fourth device: three is the full width.
        let mut m = members(4);
        m[3].present = false;
        let l = layout(4, 4 * GIB, Profile::Raid0, &[(three, 768 * MIB)]);
        assert_eq!(narrow_data(&l, &m), None);
    }
}
