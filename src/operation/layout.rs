//! The chunks of a held filesystem as the replay of a relocation reads
//! them ([`crate::model::relocate`]): what convert, balance and doctor plan
//! on.

use crate::model::alloc::ChunkKind;
use crate::model::relocate::{Layout, LayoutChunk};
use crate::model::space::BgType;
use crate::operation::state::FsState;
use crate::sys::kernel::btrfs::{self, FsHandle};
use crate::sys::kernel::ioctl::BalanceState;

/// Extents read at most for the replay; beyond, chunks are taken as full
/// of the largest extents.
const MAX_EXTENTS_READ: usize = 1_000_000;

/// The chunks of the filesystem held open, for the replay of a conversion
/// ([`crate::model::relocate::simulate`]); `None` when they cannot be read (not root),
/// the filesystem has mixed block groups (not modelled), or a balance runs
/// (then or by the time they were read: see [`balance_in_flux`]).
pub fn read_layout(fs: &FsHandle, state: &FsState) -> Option<Layout> {
    if state.mixed_block_groups() || balance_in_flux(state) {
        return None;
    }
    let bgt = state.features.iter().any(|f| f == "block_group_tree");
    let records = fs.chunk_layout(bgt, MAX_EXTENTS_READ).ok()??;
    // One that started while they were read: they may be mid-relocation.
    let running = fs
        .balance_status()
        .map(|s| {
            s.is_some_and(|s| {
                s.state
                    .intersects(BalanceState::RUNNING | BalanceState::CANCEL_REQ)
            })
        })
        .unwrap_or(true);
    if running {
        return None;
    }
    layout_of(state, records)
}

/// A balance runs, or is being cancelled, on `fs` (not one that is
/// paused): the chunks are not in a state the replay can start from. While
/// the kernel relocates a chunk, its data is both in the chunk and, partly
/// or wholly, in the copy the relocation is writing into chunks of the
/// target profile; a cancelled relocation (`btrfs balance cancel`, or the
/// process running the balance killed) frees that copy when it ends.
/// Measured (3 × 2 GiB, raid0 → raid1 data, the convert process killed
/// after the first chunk): read right after the kill, a second raid1 chunk
/// showed 512 MiB used by the copy of the chunk being relocated, and the
/// replay, counting that data twice, ran out of space; once the kernel had
/// ended the balance that chunk was empty again, the replay fitted and the
/// kernel completed the conversion. A paused balance stops between chunks:
/// its state is settled.
pub fn balance_in_flux(state: &FsState) -> bool {
    state.balance.is_some_and(|b| b.running || b.cancelling)
}

/// The replay's view of `records` on the devices of `fs`.
pub(crate) fn layout_of(fs: &FsState, records: btrfs::ChunkLayout) -> Option<Layout> {
    let mut chunks = Vec::with_capacity(records.len());
    for (c, used, extents) in records {
        let kind = match btrfs::bg_type_of(c.flags) {
            BgType::Data => ChunkKind::Data,
            BgType::Metadata => ChunkKind::Metadata,
            BgType::System => ChunkKind::System,
            _ => return None,
        };
        let profile = btrfs::profile_of(c.flags);
        let stripe = c.length / u64::from(profile.data_stripes(u32::from(c.num_stripes)));
        let stripes = c
            .devids
            .iter()
            .map(|id| {
                fs.devices
                    .iter()
                    .position(|d| d.devid == *id)
                    .map(|i| (i, stripe))
            })
            .collect::<Option<Vec<_>>>()?;
        chunks.push(LayoutChunk {
            kind,
            profile,
            logical: c.logical,
            length: c.length,
            used,
            stripes,
            extents,
        });
    }
    Some(Layout {
        // The first MiB of every device is never allocated
        // (BTRFS_DEVICE_RANGE_RESERVED).
        free: fs
            .devices
            .iter()
            .map(|d| d.unallocated().saturating_sub(1 << 20))
            .collect(),
        chunks,
        total_bytes: fs.raw_size(),
        kernel: fs.kernel,
        global_reserve: fs
            .spaces
            .iter()
            .filter(|s| btrfs::bg_type_of(s.flags) == BgType::GlobalReserve)
            .map(|s| s.total_bytes)
            .sum(),
    })
}
