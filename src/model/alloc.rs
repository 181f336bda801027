//! btrfs' chunk allocator, modelled on the kernel's (`btrfs_create_chunk`
//! in fs/btrfs/volumes.c: `init_alloc_chunk_ctl_policy_regular`,
//! `gather_device_info`, `decide_stripe_size_regular`) over the profile
//! table in [`super::profile`]. Planners use it to check before a conversion
//! that the converted chunks fit, and to show usable capacity before and
//! after. It works on total free space per device, not on contiguous holes,
//! so it is an estimate; the kernel has the last word (a balance that runs
//! out of space stops cleanly and can be resumed after freeing space).
//!
//! The chunk-size rule, and where it changed:
//! - data: stripes up to 1 GiB, chunks up to 10 GiB (`BTRFS_MAX_DATA_CHUNK_SIZE`);
//! - metadata: 256 MiB, 1 GiB when the devices hold more than 50 GiB;
//! - system: stripes of 32 MiB; chunks up to 64 MiB before Linux 6.0, 32 MiB
//!   since (the per-space-info `chunk_size` of kernel commit f6fca3917b4d,
//!   "btrfs: store chunk size in space-info struct"; its data-chunk
//!   regression, 1 GiB chunks, was fixed by 5da431b71d4b in the same cycle,
//!   which also caps every stripe at 1 GiB);
//! - no chunk above 10% of the devices' total size, but a stripe cut down to
//!   that cap is rounded *up* to 16 MiB (never above what it was), then down
//!   to the 64 KiB stripe length: on small filesystems chunks are a little
//!   larger than 10%.
//!
//! mkfs.btrfs allocates the first chunks with btrfs-progs' own copy
//! (kernel-shared/volumes.c `init_alloc_chunk_ctl_policy_regular`), which
//! differs: system chunks of 8 MiB stripes and at most 16 MiB, a minimum
//! stripe (data 64 MiB, metadata 32 MiB, system 1 MiB) instead of the 16 MiB
//! rounding, and stripes cut by the number of stripes rather than of data
//! stripes. This model is the kernel's: it predicts every chunk a mounted
//! filesystem allocates (writes, balance, conversion), not mkfs's first ones.

use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;

/// What kind of chunk: they differ in size limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    /// Data.
    Data,
    /// Metadata.
    Metadata,
    /// System.
    System,
}

impl ChunkKind {
    /// Its name in messages: `data`, `metadata`, `system`.
    pub fn name(self) -> &'static str {
        match self {
            ChunkKind::Data => "data",
            ChunkKind::Metadata => "metadata",
            ChunkKind::System => "system",
        }
    }
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// The unit stripes are aligned to (BTRFS_STRIPE_LEN).
pub(crate) const STRIPE_LEN: u64 = 64 << 10;
/// Above this much raw space metadata chunks grow from 256 MiB to 1 GiB.
pub(crate) const LARGE_FS_BYTES: u64 = 50 * GIB;
/// A stripe cut down to the chunk cap is rounded up to this.
const STRIPE_ROUND: u64 = 16 * MIB;
/// Since this kernel system chunks are at most 32 MiB (64 MiB before).
pub(crate) const SYSTEM_CHUNK_32M: KernelVersion = KernelVersion::new(6, 0);

/// The largest stripe and chunk the kernel allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkLimits {
    /// Bytes of one stripe on one device.
    pub(crate) max_stripe: u64,
    /// Logical bytes of one chunk (after the 10% cap).
    pub(crate) max_chunk: u64,
}

/// The limits for `kind` on a filesystem whose devices hold `total_bytes`
/// (the kernel's `total_rw_bytes`).
pub(crate) fn chunk_limits(
    kind: ChunkKind,
    total_bytes: u64,
    kernel: KernelVersion,
) -> ChunkLimits {
    let (max_stripe, max_chunk) = match kind {
        ChunkKind::Data => (GIB, 10 * GIB),
        ChunkKind::Metadata if total_bytes > LARGE_FS_BYTES => (GIB, GIB),
        ChunkKind::Metadata => (256 * MIB, 256 * MIB),
        ChunkKind::System if kernel >= SYSTEM_CHUNK_32M => (32 * MIB, 32 * MIB),
        ChunkKind::System => (32 * MIB, 64 * MIB),
    };
    ChunkLimits {
        max_stripe,
        max_chunk: max_chunk.min(total_bytes / 10),
    }
}

/// One chunk the model allocates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Logical length.
    pub length: u64,
    /// Bytes of each stripe on its device.
    pub stripe: u64,
    /// Stripes (DUP: two on its one device).
    pub num_stripes: u32,
    /// Indexes of the devices used, most free first.
    pub devices: Vec<usize>,
}

/// The chunk the kernel would allocate on devices with `free` unallocated
/// bytes, without allocating it: devices with the most room first, as many
/// as the profile takes, stripes as large as the limits and the smallest
/// chosen device allow. `None` when the profile cannot be allocated.
pub fn next_chunk(
    free: &[u64],
    p: Profile,
    kind: ChunkKind,
    total_bytes: u64,
    kernel: KernelVersion,
) -> Option<Chunk> {
    let g = p.geometry();
    let dev_stripes = u64::from(g.dev_stripes);
    let lim = chunk_limits(kind, total_bytes, kernel);
    let want = lim.max_stripe * dev_stripes;
    // gather_device_info: room up to what a full stripe wants, most first.
    let mut avail: Vec<(u64, usize)> = free
        .iter()
        .enumerate()
        .filter(|&(_, &f)| f >= STRIPE_LEN * dev_stripes)
        .map(|(i, &f)| (f.min(want), i))
        .collect();
    avail.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(free[b.1].cmp(&free[a.1]))
            .then(a.1.cmp(&b.1))
    });
    let num_stripes = p.stripes_on(u32::try_from(avail.len()).ok()?, kernel)?;
    let ndevs = (num_stripes / g.dev_stripes) as usize;
    let chosen = &avail[..ndevs];
    let data_stripes = u64::from(p.data_stripes(num_stripes));
    // decide_stripe_size_regular.
    let mut stripe = chosen[ndevs - 1].0 / dev_stripes;
    if stripe * data_stripes > lim.max_chunk {
        stripe = (lim.max_chunk / data_stripes)
            .div_ceil(STRIPE_ROUND)
            .saturating_mul(STRIPE_ROUND)
            .min(stripe);
    }
    stripe = stripe.min(GIB);
    chunk_of(stripe, data_stripes, num_stripes, chosen)
}

/// The chunk mkfs.btrfs (btrfs-progs 5.15 to 6.x, kernel-shared/volumes.c)
/// makes for a new filesystem's first chunk of `kind`, on devices with
/// `free` bytes (index 0 is devid 1): measured on loop devices and read in
/// its source. Its rules differ from [`next_chunk`]'s:
/// - a profile of `single` keeps mkfs's temporary chunk on devid 1 (system
///   4 MiB, metadata and data 8 MiB);
/// - devices with room for the stripe it decided (below) all rank alike
///   and the last added comes first (its device list is built head first):
///   devid 1 is used last, whatever its size; the others rank by room;
/// - stripes: system 8 MiB; metadata 256 MiB (1 GiB above 50 GiB); data
///   1 GiB; a full stripe whose chunk is above 10% of the devices' total is
///   cut to 10% divided by the number of stripes (not of data stripes),
///   never below the minimum stripe (system 1 MiB, metadata 32 MiB, data
///   64 MiB), before the devices' room is looked at; then it is cut to that
///   room and rounded down to 64 KiB.
pub fn mkfs_chunk(free: &[u64], p: Profile, kind: ChunkKind, total_bytes: u64) -> Option<Chunk> {
    if p == Profile::Single {
        let size = if kind == ChunkKind::System {
            4 * MIB
        } else {
            8 * MIB
        };
        return (free.first()? >= &size).then(|| Chunk {
            length: size,
            stripe: size,
            num_stripes: 1,
            devices: vec![0],
        });
    }
    let g = p.geometry();
    let dev_stripes = u64::from(g.dev_stripes);
    let (max_stripe, max_chunk, min_stripe) = match kind {
        ChunkKind::Data => (GIB, 10 * GIB, 64 * MIB),
        ChunkKind::Metadata if total_bytes > LARGE_FS_BYTES => (GIB, GIB, 32 * MIB),
        ChunkKind::Metadata => (256 * MIB, 256 * MIB, 32 * MIB),
        ChunkKind::System => (8 * MIB, 16 * MIB, MIB),
    };
    let max_chunk = max_chunk.min(total_bytes / 10);
    let eligible = free
        .iter()
        .filter(|&&f| f >= STRIPE_LEN * dev_stripes)
        .count();
    let num_stripes = p.stripes_on(
        u32::try_from(eligible).ok()?,
        crate::model::kernel::KernelVersion::new(6, 1),
    )?;
    let data_stripes = u64::from(p.data_stripes(num_stripes));
    // The full stripe is cut before the devices' room is looked at.
    let mut stripe = max_stripe;
    if stripe * data_stripes > max_chunk {
        stripe = (max_chunk / u64::from(num_stripes)).max(min_stripe);
    }
    // Devices with room for that stripe tie, the last added first.
    let want = stripe * dev_stripes;
    let mut avail: Vec<(u64, usize)> = free
        .iter()
        .enumerate()
        .filter(|&(_, &f)| f >= STRIPE_LEN * dev_stripes)
        .map(|(i, &f)| (f.min(want), i))
        .collect();
    avail.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    let ndevs = (num_stripes / g.dev_stripes) as usize;
    let chosen = &avail[..ndevs];
    let room = chosen.iter().map(|&(_, i)| free[i]).min()? / dev_stripes;
    stripe = stripe.min(room);
    chunk_of(stripe, data_stripes, num_stripes, chosen)
}

/// The chunk of stripes of `stripe` bytes (rounded down to the stripe
/// length) on the `chosen` devices; `None` when nothing is left of it.
fn chunk_of(
    stripe: u64,
    data_stripes: u64,
    num_stripes: u32,
    chosen: &[(u64, usize)],
) -> Option<Chunk> {
    let stripe = stripe - stripe % STRIPE_LEN;
    if stripe == 0 {
        return None;
    }
    Some(Chunk {
        length: stripe * data_stripes,
        stripe,
        num_stripes,
        devices: chosen.iter().map(|&(_, i)| i).collect(),
    })
}

/// Allocates one chunk ([`next_chunk`]): takes its stripes from `free` and
/// returns its logical size, or `None` when the profile cannot be allocated
/// any more.
pub(crate) fn allocate_chunk(
    free: &mut [u64],
    p: Profile,
    kind: ChunkKind,
    total_bytes: u64,
    kernel: KernelVersion,
) -> Option<u64> {
    let c = next_chunk(free, p, kind, total_bytes, kernel)?;
    take(free, &c, p);
    Some(c.length)
}

/// Takes the stripes of chunk `c` of profile `p` ([`next_chunk`]) from
/// `free`.
pub fn take(free: &mut [u64], c: &Chunk, p: Profile) {
    let per_device = c.stripe * u64::from(p.geometry().dev_stripes);
    for &i in &c.devices {
        free[i] -= per_device;
    }
}

/// Allocates chunks until `bytes` of logical space are covered; `false` if
/// the devices run out first.
pub fn reserve(
    free: &mut [u64],
    p: Profile,
    kind: ChunkKind,
    bytes: u64,
    total_bytes: u64,
    kernel: KernelVersion,
) -> bool {
    let mut covered = 0u64;
    while covered < bytes {
        match allocate_chunk(free, p, kind, total_bytes, kernel) {
            Some(n) => covered += n,
            None => return false,
        }
    }
    true
}

/// Logical bytes that chunks of `p` could still take on devices with `free`.
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) fn capacity(
    free: &[u64],
    p: Profile,
    kind: ChunkKind,
    total_bytes: u64,
    kernel: KernelVersion,
) -> u64 {
    let mut f = free.to_vec();
    let mut total = 0u64;
    while let Some(n) = allocate_chunk(&mut f, p, kind, total_bytes, kernel) {
        total += n;
    }
    total
}

/// Raw bytes the devices give per logical byte of a new chunk of `p`.
pub(crate) fn raw_per_logical(p: Profile, devices: usize, kernel: KernelVersion) -> f64 {
    let n = u32::try_from(devices).unwrap_or(u32::MAX);
    let stripes = p
        .stripes_on(n, kernel)
        .unwrap_or(p.geometry().ncopies.max(1));
    f64::from(stripes) / f64::from(p.data_stripes(stripes))
}

/// Mirrored copies on distinct devices: the largest logical size that fits
/// `unalloc` (no device holds two copies of a chunk).
fn mirrored(unalloc: &[u64], copies: usize) -> u64 {
    let mut v = unalloc.to_vec();
    v.sort_unstable_by(|a, b| b.cmp(a));
    if v.len() < copies {
        return 0;
    }
    let sum: u64 = v.iter().sum();
    let mut best = sum / copies as u64;
    for j in 1..copies {
        let rest: u64 = v.iter().skip(j).sum();
        best = best.min(rest / (copies - j) as u64);
    }
    best
}

/// Logical bytes new chunks of `p` can still get from the unallocated space
/// of the devices, smaller chunks included (the closed form of repeated
/// [`next_chunk`], as `btrfs filesystem usage` estimates it; linear
/// in the devices, so a paste of hundreds of them stays fast).
pub(crate) fn growth(p: Profile, unalloc: &[u64]) -> u64 {
    let g = p.geometry();
    let sum: u64 = unalloc.iter().sum();
    if p.is_parity() {
        let n = unalloc.iter().filter(|&&u| u >= 1 << 20).count() as u64;
        if n < u64::from(p.min_devices()) {
            return 0;
        }
        return sum / n * (n - u64::from(g.nparity));
    }
    if g.dev_stripes > 1 {
        return unalloc.iter().map(|u| u / u64::from(g.dev_stripes)).sum();
    }
    if g.ncopies > 1 {
        return mirrored(unalloc, g.ncopies as usize);
    }
    sum
}

/// Size of a full metadata chunk: sysfs `allocation/metadata/chunk_size`
/// when the kernel has it, else the kernel's default (1 GiB above 50 GiB of
/// writable space, else 256 MiB), capped at 10% of the writable space as
/// the allocator caps it.
pub(crate) fn metadata_chunk_size(sysfs: Option<u64>, devices_bytes: u64) -> u64 {
    sysfs
        .unwrap_or(if devices_bytes > LARGE_FS_BYTES {
            1 << 30
        } else {
            256 << 20
        })
        .min(devices_bytes / 10)
        .max(1 << 20)
}

/// Devices (and raw bytes on each) a full-size chunk of `p` of `chunk`
/// logical bytes needs, and how many have it: `(needed, have, per)`.
pub(crate) fn chunk_room(p: Profile, chunk: u64, unalloc: &[u64]) -> (usize, usize, u64) {
    let g = p.geometry();
    let count = |need: u64| unalloc.iter().filter(|&&u| u >= need).count();
    if g.devs_max != 0 {
        // A fixed number of stripes (single, DUP, RAID1*): each a whole
        // copy of the chunk, DUP's two on one device.
        let per = chunk * u64::from(g.dev_stripes);
        return (p.min_devices() as usize, count(per), per);
    }
    // Striped over every device with room (RAID0/10/5/6).
    let n = count(1 << 20).max(1) as u32;
    let per = chunk.div_ceil(u64::from(p.data_stripes(n)));
    (p.min_devices() as usize, count(per), per)
}

/// The profile the kernel gives new chunks of a type from the profiles its
/// chunks have: the most redundant one (`btrfs_reduce_alloc_profile`).
pub(crate) fn new_chunk_profile(used: &[Profile]) -> Option<Profile> {
    use Profile::*;
    [
        Raid6, Raid1c4, Raid5, Raid1c3, Raid10, Raid1, Dup, Raid0, Single,
    ]
    .into_iter()
    .find(|p| used.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: KernelVersion = KernelVersion::new(6, 18);
    const TIB: u64 = 1 << 40;

    #[test]
    fn capacity_of_three_equal_devices() {
        let devs = [TIB; 3];
        let total = 3 * TIB;
        let cap = |p| capacity(&devs, p, ChunkKind::Data, total, K);
        assert_eq!(cap(Profile::Single), 3 * TIB);
        assert_eq!(cap(Profile::Raid0), 3 * TIB);
        assert_eq!(cap(Profile::Raid1), 3 * TIB / 2);
        assert_eq!(cap(Profile::Raid1c3), TIB);
        assert_eq!(cap(Profile::Dup), 3 * TIB / 2);
        assert_eq!(cap(Profile::Raid5), 2 * TIB);
        assert_eq!(cap(Profile::Raid1c4), 0, "needs four devices");
    }

    #[test]
    fn mismatched_devices() {
        // 1 + 1 + 2 TiB: RAID1 pairs the big one with each small one.
        let devs = [TIB, TIB, 2 * TIB];
        assert_eq!(
            capacity(&devs, Profile::Raid1, ChunkKind::Data, 4 * TIB, K),
            2 * TIB
        );
        // RAID0 stripes over all three, then over the big one alone (5.15+)...
        assert_eq!(
            capacity(&devs, Profile::Raid0, ChunkKind::Data, 4 * TIB, K),
            4 * TIB
        );
        // ...but older kernels need two devices per RAID0 chunk.
        let old = KernelVersion::new(5, 10);
        assert_eq!(
            capacity(&devs, Profile::Raid0, ChunkKind::Data, 4 * TIB, old),
            3 * TIB
        );
    }

    #[test]
    fn chunk_sizes_follow_the_kernel_limits() {
        let mut free = [TIB, TIB];
        assert_eq!(
            allocate_chunk(&mut free, Profile::Raid1, ChunkKind::Metadata, 2 * TIB, K),
            Some(GIB)
        );
        // 10% of a 2 GiB filesystem (214748364 bytes), rounded up to 16 MiB:
        // 208 MiB, a little over the cap, as the kernel does.
        let mut small = [2 * GIB];
        let n = allocate_chunk(&mut small, Profile::Single, ChunkKind::Data, 2 * GIB, K);
        assert_eq!(n, Some(208 * MIB));
        let mut one = [GIB];
        assert_eq!(
            allocate_chunk(&mut one, Profile::Raid1, ChunkKind::Data, GIB, K),
            None
        );
    }

    #[test]
    fn system_chunks_shrank_in_6_0() {
        let free = [TIB, TIB];
        let sys = |k| next_chunk(&free, Profile::Raid0, ChunkKind::System, 2 * TIB, k);
        let new = sys(K).unwrap();
        assert_eq!(
            (new.stripe, new.length, new.num_stripes),
            (16 * MIB, 32 * MIB, 2)
        );
        let old = sys(KernelVersion::new(5, 15)).unwrap();
        assert_eq!((old.stripe, old.length), (32 * MIB, 64 * MIB));
    }

    #[test]
    fn a_device_short_of_a_full_stripe_sets_the_stripe() {
        // RAID0 over 10 GiB + 100 MiB: both used, stripes of 100 MiB.
        let c = next_chunk(
            &[10 * GIB, 100 * MIB],
            Profile::Raid0,
            ChunkKind::Data,
            TIB,
            K,
        )
        .unwrap();
        assert_eq!(
            (c.stripe, c.num_stripes, c.length),
            (100 * MIB, 2, 200 * MIB)
        );
        assert_eq!(c.devices, vec![0, 1]);
        // DUP halves what its one device has.
        let d = next_chunk(&[100 * MIB], Profile::Dup, ChunkKind::Data, TIB, K).unwrap();
        assert_eq!((d.stripe, d.num_stripes, d.length), (50 * MIB, 2, 50 * MIB));
    }

    #[test]
    fn mkfs_chunks_as_measured() {
        // btrfs-progs 6.2 on 1024 + 768 + 512 MiB (less the reserved MiB):
        // RAID1 metadata on devids 3 and 2 (devid 1 last), 10% of the
        // total cut by the number of stripes; RAID0 data over all three.
        let free = [1023 * MIB, 767 * MIB, 511 * MIB];
        let total = 2304 * MIB;
        let m = mkfs_chunk(&free, Profile::Raid1, ChunkKind::Metadata, total).unwrap();
        assert_eq!((m.stripe, m.devices), (120_782_848, vec![2, 1]));
        let d = mkfs_chunk(&free, Profile::Raid0, ChunkKind::Data, total).unwrap();
        assert_eq!((d.stripe, d.num_stripes), (80_478_208, 3));
        let s = mkfs_chunk(&free, Profile::Dup, ChunkKind::System, total).unwrap();
        assert_eq!((s.stripe, s.num_stripes, s.devices), (8 * MIB, 2, vec![2]));
        // 5000 + 300 MiB, DUP metadata: a 256 MiB stripe pair fits only
        // on devid 1, which comes first then (measured).
        let two = [4999 * MIB, 283 * MIB];
        let d = mkfs_chunk(&two, Profile::Dup, ChunkKind::Metadata, 5300 * MIB).unwrap();
        assert_eq!((d.stripe, d.devices), (256 * MIB, vec![0]));
        // Single keeps mkfs's temporary chunk on devid 1.
        let t = mkfs_chunk(&free, Profile::Single, ChunkKind::Data, total).unwrap();
        assert_eq!((t.length, t.devices), (8 * MIB, vec![0]));
    }

    #[test]
    fn reserve_reports_shortfall() {
        let mut free = [GIB, GIB];
        assert!(reserve(
            &mut free,
            Profile::Raid1,
            ChunkKind::Data,
            900 * MIB,
            2 * GIB,
            K
        ));
        let mut free = [GIB, GIB];
        assert!(!reserve(
            &mut free,
            Profile::Raid1,
            ChunkKind::Data,
            1100 * MIB,
            2 * GIB,
            K
        ));
    }

    #[test]
    fn raid1c3_needs_5_5() {
        let free = [TIB; 3];
        let old = KernelVersion::new(5, 4);
        assert!(next_chunk(&free, Profile::Raid1c3, ChunkKind::Data, 3 * TIB, old).is_none());
        assert!(next_chunk(&free, Profile::Raid1c3, ChunkKind::Data, 3 * TIB, K).is_some());
    }

    fn kinds() -> [ChunkKind; 3] {
        [ChunkKind::Data, ChunkKind::Metadata, ChunkKind::System]
    }

    proptest::proptest! {
        /// Whatever the devices hold: a chunk uses the stripes the profile
        /// table gives for the devices with room, distinct devices that can
        /// hold their stripes, aligned stripes within the limits, and takes
        /// exactly its stripes from the free space.
        #[test]
        fn every_chunk_keeps_the_rules(
            free in proptest::collection::vec(0u64..(64 * GIB), 1..=8),
            extra in 0u64..TIB,
            p in 0usize..9,
            kind in 0usize..3,
            kernel in proptest::sample::select(vec![(5, 4), (5, 10), (5, 15), (6, 1), (6, 18)]),
        ) {
            let p = Profile::ALL[p];
            let kind = kinds()[kind];
            let kernel = KernelVersion::new(kernel.0, kernel.1);
            let total = free.iter().sum::<u64>() + extra;
            let g = p.geometry();
            let dev_stripes = u64::from(g.dev_stripes);
            let eligible = free.iter().filter(|&&f| f >= STRIPE_LEN * dev_stripes).count() as u32;
            let lim = chunk_limits(kind, total, kernel);
            match next_chunk(&free, p, kind, total, kernel) {
                None => {
                    // Too few devices, or too little room for one stripe.
                    let stripes = p.stripes_on(eligible, kernel);
                    proptest::prop_assert!(stripes.is_none() || lim.max_chunk < STRIPE_LEN);
                }
                Some(c) => {
                    proptest::prop_assert_eq!(Some(c.num_stripes), p.stripes_on(eligible, kernel));
                    let mut devs = c.devices.clone();
                    devs.sort_unstable();
                    devs.dedup();
                    proptest::prop_assert_eq!(devs.len() as u32, c.num_stripes / g.dev_stripes);
                    for &i in &c.devices {
                        proptest::prop_assert!(free[i] >= c.stripe * dev_stripes);
                    }
                    proptest::prop_assert!(c.stripe > 0 && c.stripe % STRIPE_LEN == 0);
                    proptest::prop_assert!(c.stripe <= lim.max_stripe);
                    let data = u64::from(p.data_stripes(c.num_stripes));
                    proptest::prop_assert_eq!(c.length, c.stripe * data);
                    // Over the cap only by the 16 MiB rounding of the stripe.
                    proptest::prop_assert!(
                        c.length <= lim.max_chunk || c.stripe <= (lim.max_chunk / data).div_ceil(STRIPE_ROUND) * STRIPE_ROUND
                    );
                    let mut after = free.clone();
                    proptest::prop_assert_eq!(
                        allocate_chunk(&mut after, p, kind, total, kernel),
                        Some(c.length)
                    );
                    let taken: u64 = free.iter().sum::<u64>() - after.iter().sum::<u64>();
                    proptest::prop_assert_eq!(taken, c.stripe * u64::from(c.num_stripes));
                }
            }
        }
    }

    #[test]
    fn growth_estimates() {
        assert_eq!(growth(Profile::Raid1, &[10, 10]), 10);
        assert_eq!(growth(Profile::Raid1, &[30, 10]), 10);
        assert_eq!(growth(Profile::Raid1c3, &[10, 10, 10]), 10);
        assert_eq!(growth(Profile::Raid1c3, &[10, 10]), 0);
        assert_eq!(growth(Profile::Dup, &[10, 10]), 10);
        assert_eq!(growth(Profile::Raid0, &[10, 20]), 30);
        // The same as the allocator model, chunk by chunk.
        for (p, un) in [
            (Profile::Raid1, vec![3 * GIB, GIB, 2 * GIB]),
            (Profile::Dup, vec![GIB + 5 * MIB]),
            (Profile::Raid1c3, vec![GIB, GIB, 2 * GIB]),
        ] {
            let total = 10 * GIB;
            assert_eq!(
                growth(p, &un) >> 20,
                capacity(&un, p, ChunkKind::Metadata, total, K) >> 20,
                "{p} {un:?}"
            );
        }
    }
}
