//! A model of btrfs' chunk allocator (`btrfs_create_chunk` in the kernel's
//! volumes.c), used to check before a conversion that the converted chunks
//! fit, and to show usable capacity before and after. It works on total free
//! space per device, not on contiguous holes, so it is an estimate; the
//! kernel has the last word (a balance that runs out of space stops cleanly
//! and can be resumed after freeing space).

use crate::model::kernel::{DEGENERATE_RAID, KernelVersion};
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

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// Smallest stripe the allocator hands out (BTRFS_STRIPE_LEN).
const STRIPE_LEN: u64 = 64 << 10;

/// The fewest devices `p` needs on this kernel (RAID0 and RAID10 needed 2
/// and 4 before Linux 5.15).
pub fn min_devices(p: Profile, kernel: KernelVersion) -> u32 {
    if kernel < DEGENERATE_RAID {
        match p {
            Profile::Raid0 => return 2,
            Profile::Raid10 => return 4,
            _ => {}
        }
    }
    p.min_devices()
}

struct Rules {
    devs_max: usize, // 0: all
    dev_stripes: u64,
    ncopies: u64,
    nparity: u64,
    devs_increment: usize,
}

fn rules(p: Profile) -> Rules {
    let r = |devs_max, dev_stripes, ncopies, nparity, devs_increment| Rules {
        devs_max,
        dev_stripes,
        ncopies,
        nparity,
        devs_increment,
    };
    match p {
        Profile::Single => r(1, 1, 1, 0, 1),
        Profile::Dup => r(1, 2, 2, 0, 1),
        Profile::Raid0 => r(0, 1, 1, 0, 1),
        Profile::Raid1 => r(2, 1, 2, 0, 1),
        Profile::Raid1c3 => r(3, 1, 3, 0, 1),
        Profile::Raid1c4 => r(4, 1, 4, 0, 1),
        Profile::Raid10 => r(0, 1, 2, 0, 2),
        Profile::Raid5 => r(0, 1, 1, 1, 1),
        Profile::Raid6 => r(0, 1, 1, 2, 1),
    }
}

/// Largest stripe and chunk the kernel allocates for `kind` on a filesystem
/// of `total_bytes` raw size: data stripes up to 1 GiB, metadata 256 MiB
/// (1 GiB above 50 GiB), system 32 MiB; no chunk above 10% of the filesystem.
fn limits(kind: ChunkKind, total_bytes: u64) -> (u64, u64) {
    let (stripe, chunk) = match kind {
        ChunkKind::Data => (GIB, 10 * GIB),
        ChunkKind::Metadata if total_bytes > 50 * GIB => (GIB, GIB),
        ChunkKind::Metadata => (256 * MIB, 256 * MIB),
        ChunkKind::System => (32 * MIB, 2 * 32 * MIB),
    };
    let tenth = (total_bytes / 10).max(STRIPE_LEN);
    (stripe, chunk.min(tenth))
}

/// Allocates one chunk: devices with the most free space first, as many as
/// the profile takes, stripes as large as the limits and the smallest chosen
/// device allow. Updates `free` and returns the chunk's logical size, or
/// `None` when the profile cannot be allocated any more.
pub fn allocate_chunk(
    free: &mut [u64],
    p: Profile,
    kind: ChunkKind,
    total_bytes: u64,
    kernel: KernelVersion,
) -> Option<u64> {
    let r = rules(p);
    let (max_stripe, max_chunk) = limits(kind, total_bytes);
    let min_avail = STRIPE_LEN * r.dev_stripes;
    let mut order: Vec<usize> = (0..free.len()).filter(|&i| free[i] >= min_avail).collect();
    order.sort_by(|&a, &b| free[b].cmp(&free[a]).then(a.cmp(&b)));
    let mut ndevs = order.len();
    if r.devs_max > 0 {
        ndevs = ndevs.min(r.devs_max);
    }
    ndevs -= ndevs % r.devs_increment;
    if ndevs < min_devices(p, kernel) as usize || ndevs == 0 {
        return None;
    }
    let chosen = &order[..ndevs];
    let total_stripes = ndevs as u64 * r.dev_stripes;
    let data_stripes = (total_stripes.saturating_sub(r.nparity) / r.ncopies).max(1);
    let smallest = chosen.iter().map(|&i| free[i]).min().unwrap_or(0);
    let mut stripe = (smallest / r.dev_stripes).min(max_stripe);
    if stripe * data_stripes > max_chunk {
        stripe = max_chunk / data_stripes;
    }
    stripe -= stripe % STRIPE_LEN;
    if stripe == 0 {
        return None;
    }
    for &i in chosen {
        free[i] -= stripe * r.dev_stripes;
    }
    Some(stripe * data_stripes)
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
pub fn capacity(
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
        let mut small = [2 * GIB];
        // 10% of a 2 GiB filesystem.
        let n = allocate_chunk(&mut small, Profile::Single, ChunkKind::Data, 2 * GIB, K).unwrap();
        assert!(n <= 2 * GIB / 10 && n > 200 * MIB, "{n}");
        let mut one = [GIB];
        assert_eq!(
            allocate_chunk(&mut one, Profile::Raid1, ChunkKind::Data, GIB, K),
            None
        );
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
    fn min_devices_depend_on_the_kernel() {
        assert_eq!(min_devices(Profile::Raid10, K), 2);
        assert_eq!(min_devices(Profile::Raid10, KernelVersion::new(5, 4)), 4);
        assert_eq!(min_devices(Profile::Raid6, K), 3);
    }
}
