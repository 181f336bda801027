//! A profile conversion replayed chunk by chunk, as the kernel's balance
//! does it (fs/btrfs/volumes.c `__btrfs_balance`, relocation.c
//! `btrfs_relocate_block_group`, block-group.c `btrfs_inc_block_group_ro`),
//! over the chunk allocator of [`super::alloc`]. Whether the converted
//! chunks fit *at the end* is not enough: relocation needs room while both
//! the old and the new copies exist, and the kernel wastes some of it.
//!
//! What the kernel does, and the model replays:
//! - balance walks the chunk tree from the highest logical address down and
//!   relocates each chunk its filters select (soft conversion: those not in
//!   the target profile yet), data, metadata and system in one walk;
//! - before relocating a chunk whose profile is not the target,
//!   `btrfs_inc_block_group_ro` *forces* the allocation of a new chunk of the
//!   target profile (an ENOSPC there is ignored), whether or not the chunks
//!   of the target profile still have room: each converted chunk allocates
//!   one chunk of the target profile while there is unallocated space;
//! - the data of the chunk is copied extent by extent, each extent into one
//!   contiguous free range of a chunk of the target profile
//!   (`prealloc_file_extent_cluster` asks for the whole extent at once, up
//!   to 128 MiB): when no chunk has such a range, a new chunk is allocated,
//!   and when that fails the balance stops with ENOSPC, although the free
//!   space summed over the chunks could have held the extent;
//! - a metadata or system chunk must then be made read-only, which needs
//!   room for the reservations elsewhere: in other chunks of its type, or
//!   by overcommitting on unallocated space (`btrfs_can_overcommit`:
//!   what the target profile gets from it, less one data chunk, halved);
//!   system chunks are never force-allocated (`btrfs_chunk_alloc` refuses
//!   them), so the last system chunk fails there when the devices are
//!   nearly full although a system chunk would fit;
//! - metadata and system chunks hold tree blocks of a few KiB: they fill
//!   any free space, new chunks are allocated as needed;
//! - only then is the old chunk freed; its device space is taken again
//!   only once a transaction commit has come (the chunk allocator searches
//!   the device tree's commit root, `find_free_dev_extent`): not by the next
//!   chunk's forced allocation, by its extents, after the relocation's first
//!   commit ([`Reuse::AfterForced`]; measured: a model that reuses it at
//!   once predicts conversions that the kernel fails, one that reuses it
//!   only after the next chunk refuses conversions the kernel completes);
//! - every stripe is one contiguous range of its device, and a DUP chunk
//!   takes both its stripes from one: the space a relocated chunk frees is
//!   a range of its own ([`Free::Holes`]).
//!
//! Simplifications: each chunk's free space is one range at its end (new
//! chunks are filled from their start; an existing chunk's free space is
//! taken as one range, which overestimates room in a fragmented one); the
//! metadata the relocation itself writes (reloc trees, extent-tree updates)
//! is not counted; free space per device is a total ([`super::alloc`]),
//! except for DUP targets (ranges: what was unallocated at the start as
//! one, each relocated chunk's as another, never merged); the kernel picks among chunks with room by its own
//! hints (the model: lowest address first); empty chunks the cleaner may
//! delete meanwhile are taken as they are. The extents of the kernel's
//! relocation were checked in its source: `prealloc_file_extent_cluster`
//! preallocates each extent with `btrfs_prealloc_file_range(.., num_bytes,
//! min_size = num_bytes, ..)`, and `btrfs_reserve_extent` never goes below
//! `min_size` when it retries smaller after ENOSPC, so an extent is never
//! split. It is an estimate, checked against the kernel on loop devices
//! (tests/it/admin.rs, `the_conversion_plan_predicts_the_kernels_enospc`,
//! from freshly filled and from partly converted filesystems); a refusal
//! gives the step and the numbers.
//!
//! When the replay may refuse (the callers, `convert`): only from a
//! state it reads whole and settled. While a balance runs or is being
//! cancelled the chunk being relocated and its partial copy in the target
//! chunks both hold its data (the copy is freed when a cancel ends): no
//! replay then, it is made once that balance has ended. Data chunks whose
//! extents were not read (beyond a budget) are replayed both with the
//! largest and with the smallest extents ([`Unread`]): a refusal only when
//! even the smallest run out, a warning when only the largest do. In
//! general the replay takes what it cannot know as the least favourable
//! ([`Assume::WORST`]: extents not read, where free space lies for DUP,
//! when freed space is reused), and the callers refuse only when it runs
//! out under every combination ([`Assume::all`]), warn otherwise.

use crate::model::alloc::{self, ChunkKind};
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;

/// The largest data extent btrfs writes (`BTRFS_MAX_EXTENT_SIZE`).
pub const MAX_EXTENT: u64 = 128 << 20;

/// One chunk as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutChunk {
    /// Its type.
    pub kind: ChunkKind,
    /// Its profile.
    pub profile: Profile,
    /// Logical start.
    pub logical: u64,
    /// Logical length.
    pub length: u64,
    /// Bytes used in it.
    pub used: u64,
    /// Raw bytes of each of its stripes, by device index (a device holding
    /// two stripes, as DUP does, appears twice).
    pub stripes: Vec<(usize, u64)>,
    /// Data chunks: the sizes of its extents in address order, when known
    /// (`None`: taken as pieces of [`MAX_EXTENT`], the largest).
    pub extents: Option<Vec<u64>>,
}

/// The filesystem the conversion starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Allocatable bytes of each device (unallocated, less the first MiB
    /// the kernel never allocates).
    pub free: Vec<u64>,
    /// Every chunk.
    pub chunks: Vec<LayoutChunk>,
    /// The devices' total size (the chunk size caps).
    pub total_bytes: u64,
    /// Running kernel.
    pub kernel: KernelVersion,
    /// The global block reserve (metadata that must stay reservable).
    pub global_reserve: u64,
}

/// Where a conversion runs out of space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// 1-based number of the chunk being relocated.
    pub step: usize,
    /// Chunks the conversion relocates.
    pub steps: usize,
    /// The chunk being relocated.
    pub kind: ChunkKind,
    /// Its logical start.
    pub logical: u64,
    /// Its profile and the target.
    pub from: Profile,
    /// The target profile.
    pub to: Profile,
    /// Bytes that did not find room: the extent (data) or the tree blocks
    /// left (metadata, system).
    pub wanted: u64,
    /// The largest free range in a chunk of the target profile then.
    pub largest_free: u64,
    /// Free bytes summed over the chunks of the target profile then.
    pub free_in_target: u64,
    /// Unallocated bytes on the devices then.
    pub unallocated: u64,
    /// The chunk could not be made read-only (metadata, system): nothing
    /// else could take its reservations.
    pub read_only: bool,
}

impl Shortfall {
    /// Why the replay stops at this chunk, with the numbers (the text of
    /// convert's and remove's refusals); `unallocated_on` says where the
    /// unallocated space was counted ("" for every device).
    pub fn why(&self, unallocated_on: &str) -> String {
        use crate::parse::size::format_iec;
        if self.read_only {
            return format!(
                "it cannot be made read-only: nothing else takes its reservations ({} free in other {} chunks, {} unallocated is too little to overcommit)",
                format_iec(self.free_in_target),
                self.kind.name(),
                format_iec(self.unallocated),
            );
        }
        let part = if self.kind == ChunkKind::Data {
            format!(
                "its {} extent finds no free range that large",
                format_iec(self.wanted)
            )
        } else {
            format!(
                "{} of its tree blocks find no room",
                format_iec(self.wanted)
            )
        };
        format!(
            "{part} in the {to} chunks (largest free range {}, {} free in all) and the {} unallocated{unallocated_on} does not take a new {to} chunk",
            format_iec(self.largest_free),
            format_iec(self.free_in_target),
            format_iec(self.unallocated),
            to = self.to,
        )
    }
}

/// A chunk of the target profile during the replay.
#[derive(Debug, Clone)]
struct Target {
    kind: ChunkKind,
    profile: Profile,
    room: u64,
}

/// What the replay takes for the extents of a data chunk that were not
/// read ([`LayoutChunk::extents`] `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// The largest ([`MAX_EXTENT`]): the least favourable.
    Largest,
    /// The smallest: they fill any free range, the most favourable.
    Smallest,
}

/// Replays the conversion of `layout` to `data` and `metadata` (system
/// follows metadata; `None`: that type stays), taking what it cannot know
/// as the least favourable ([`Assume::WORST`]). `Ok(chunks relocated)` or
/// where it runs out of space.
pub fn simulate(
    layout: &Layout,
    data: Option<Profile>,
    metadata: Option<Profile>,
) -> Result<usize, Shortfall> {
    simulate_with(layout, data, metadata, Unread::Largest)
}

/// Whether a data chunk the conversion relocates has extents that were not
/// read: the replay then depends on [`Unread`].
pub fn has_unread_extents(layout: &Layout, data: Option<Profile>) -> bool {
    data.is_some_and(|to| {
        layout
            .chunks
            .iter()
            .any(|c| c.kind == ChunkKind::Data && c.profile != to && c.extents.is_none())
    })
}

/// How the replay takes the devices' unallocated space when a chunk of
/// the target profile is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Free {
    /// As contiguous ranges, when a target is DUP: a DUP chunk takes both
    /// its stripes from one free range of its device (`gather_device_info`
    /// sizes a device by its largest hole, `find_free_dev_extent`, and
    /// `decide_stripe_size_regular` halves it for the two stripes), and the
    /// ranges the relocated chunks free are not contiguous with the rest
    /// (the new chunks were allocated between them), nor, here, with each
    /// other (where they are on the device is not read): the least
    /// favourable. Measured (1 × 1 GiB, single data with 200 MiB in 64 and
    /// 72 MiB extents → dup): the third forced dup chunk was 56 MiB, half of
    /// the 112 MiB range the first relocated chunk freed, although 225 MiB
    /// were unallocated, the next two as small, and the kernel's balance
    /// ran out of space where the model counting totals converted it all.
    /// Other targets: as [`Free::Total`] (their stripes are as large as
    /// the ones the relocated chunks free).
    Holes,
    /// As a total per device ([`super::alloc`]): the most favourable.
    Total,
}

/// The devices' unallocated space during a replay.
struct Space {
    /// Bytes of each device.
    free: Vec<u64>,
    /// The contiguous free ranges of each device, when tracked
    /// ([`Free::Holes`]): all that is unallocated at the start is taken as
    /// one range.
    holes: Option<Vec<Vec<u64>>>,
    /// The chunks allocated, in order ([`simulate_balance`] reports them).
    made: Vec<Made>,
}

impl Space {
    /// The devices' unallocated space as a replay starts, its ranges
    /// tracked when `holes`.
    fn new(free: &[u64], holes: bool) -> Self {
        Space {
            free: free.to_vec(),
            holes: holes.then(|| free.iter().map(|&f| vec![f]).collect()),
            made: Vec::new(),
        }
    }

    /// Allocates a chunk of `p` ([`alloc::allocate_chunk`]); its logical
    /// size, or `None`.
    fn allocate(
        &mut self,
        p: Profile,
        kind: ChunkKind,
        total: u64,
        kernel: KernelVersion,
    ) -> Option<u64> {
        let per_device = |c: &alloc::Chunk| c.stripe * u64::from(p.geometry().dev_stripes);
        let c = match &mut self.holes {
            None => {
                let c = alloc::next_chunk(&self.free, p, kind, total, kernel)?;
                for &d in &c.devices {
                    self.free[d] -= per_device(&c);
                }
                c
            }
            Some(holes) => {
                let largest: Vec<u64> = holes
                    .iter()
                    .map(|h| h.iter().copied().max().unwrap_or(0))
                    .collect();
                let c = alloc::next_chunk(&largest, p, kind, total, kernel)?;
                for &d in &c.devices {
                    // The largest range (no range holds the largest chunk
                    // wanted when the largest is what sized it).
                    let h = holes[d].iter_mut().max()?;
                    *h -= per_device(&c);
                    self.free[d] -= per_device(&c);
                }
                c
            }
        };
        let length = c.length;
        self.made.push(Made {
            kind,
            profile: p,
            chunk: c,
        });
        Some(length)
    }

    /// Allocates a chunk of `p` for `kind` and adds it to `pool` as a
    /// target with all its room; false when it does not fit.
    fn grow(
        &mut self,
        pool: &mut Vec<Target>,
        p: Profile,
        kind: ChunkKind,
        total: u64,
        kernel: KernelVersion,
    ) -> bool {
        let Some(room) = self.allocate(p, kind, total, kernel) else {
            return false;
        };
        pool.push(Target {
            kind,
            profile: p,
            room,
        });
        true
    }

    /// The stripes of a relocated chunk are free again: one range on each
    /// of its devices (DUP's two stripes are contiguous).
    fn release(&mut self, stripes: &[(usize, u64)]) {
        let mut by_device: Vec<(usize, u64)> = Vec::new();
        for &(d, b) in stripes {
            let Some(f) = self.free.get_mut(d) else {
                continue;
            };
            *f += b;
            match by_device.iter_mut().find(|(e, _)| *e == d) {
                Some((_, n)) => *n += b,
                None => by_device.push((d, b)),
            }
        }
        if let Some(holes) = &mut self.holes {
            for (d, b) in by_device {
                holes[d].push(b);
            }
        }
    }

    /// Unallocated bytes in all.
    fn total(&self) -> u64 {
        self.free.iter().sum()
    }
}

/// When the device space of a relocated chunk can be allocated again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Once the next chunk was relocated: the least favourable (no
    /// replay of the space matrix needed it).
    AfterNext,
    /// After the next chunk's forced allocation, before its extents are
    /// copied: the allocator searches the device tree's commit root
    /// (`find_free_dev_extent`), the old chunk is removed in a transaction
    /// that is not committed, the next chunk's forced allocation
    /// (`btrfs_inc_block_group_ro`) comes before the relocation's first
    /// commit (`prepare_to_relocate` commits before the extents are
    /// copied). Measured: 4 × 1 GiB raid1 data with 1000 MiB → raid10,
    /// and 3 × 2 GiB raid0 with 2000 MiB → raid1, which the kernel
    /// converts and [`Reuse::AfterNext`] ran out of; every case of the
    /// space matrix agrees.
    AfterForced,
    /// At once, as if a transaction commit came between the two chunks
    /// (the transaction kthread commits every 30 s whatever the balance
    /// does): the most favourable.
    AtOnce,
}

/// What a replay takes for what it cannot know: the least favourable
/// ([`Assume::WORST`], the model's prediction) or others ([`Assume::all`]:
/// a conversion that runs out under every one of them is a sure refusal;
/// they are not ordered, a replay that fits under one may run out under a
/// "more favourable" one, as chunks sized differently pack differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assume {
    /// Extents that were not read.
    pub unread: Unread,
    /// Unallocated space.
    pub free: Free,
    /// Space relocated chunks free.
    pub reuse: Reuse,
    /// A system chunk of the target profile that the kernel allocates by
    /// itself while it converts ([`Self::early_system`]).
    pub early_system: bool,
}

impl Assume {
    /// The least favourable.
    pub const WORST: Assume = Assume {
        unread: Unread::Largest,
        free: Free::Holes,
        reuse: Reuse::AfterForced,
        early_system: false,
    };
    /// The most favourable.
    pub const BEST: Assume = Assume {
        unread: Unread::Smallest,
        free: Free::Total,
        reuse: Reuse::AtOnce,
        early_system: true,
    };

    /// `early_system`: system chunks are never force-allocated
    /// (`btrfs_chunk_alloc` refuses them), but creating any chunk reserves
    /// system space for its chunk item (`reserve_chunk_space`), and when the
    /// system space left is short that allocates a system chunk of the
    /// system profile then in force, the target's during a conversion. When
    /// that happens before the last old system chunk is relocated, that
    /// chunk has room elsewhere and can be made read-only. Whether it
    /// happens depends on reservations the model does not see. Measured
    /// (3 × 1 GiB raid1, 300-600 MiB of data, `--metadata raid1c3`): during
    /// a metadata chunk's relocation the kernel allocated a 29.44 MiB
    /// raid1c3 system chunk and completed the conversion, which a replay
    /// without it refused; on 2 × 2 GiB `-m single` → raid1 it did not, and
    /// the kernel ran out as the replay without it says. Taken, it comes
    /// with the conversion's first new chunk, where the unallocated space
    /// takes one.
    ///
    /// Every combination.
    pub fn all() -> impl Iterator<Item = Assume> {
        [Unread::Largest, Unread::Smallest]
            .into_iter()
            .flat_map(|unread| {
                [Free::Holes, Free::Total]
                    .into_iter()
                    .flat_map(move |free| {
                        [Reuse::AfterNext, Reuse::AfterForced, Reuse::AtOnce]
                            .into_iter()
                            .flat_map(move |reuse| {
                                [false, true].map(move |early_system| Assume {
                                    unread,
                                    free,
                                    reuse,
                                    early_system,
                                })
                            })
                    })
            })
    }
}

/// [`simulate`], taking the extents that were not read as `unread` says.
pub fn simulate_with(
    layout: &Layout,
    data: Option<Profile>,
    metadata: Option<Profile>,
    unread: Unread,
) -> Result<usize, Shortfall> {
    simulate_in(
        layout,
        data,
        metadata,
        Assume {
            unread,
            ..Assume::WORST
        },
    )
}

/// [`simulate`], with what it cannot know taken as `assume` says.
pub fn simulate_in(
    layout: &Layout,
    data: Option<Profile>,
    metadata: Option<Profile>,
    assume: Assume,
) -> Result<usize, Shortfall> {
    let target_of = |k: ChunkKind| match k {
        ChunkKind::Data => data,
        ChunkKind::Metadata | ChunkKind::System => metadata,
    };
    let mut by_logical: Vec<&LayoutChunk> = layout.chunks.iter().collect();
    by_logical.sort_by_key(|c| c.logical);
    // Chunks already in their target profile take the relocated bytes too.
    let pool = by_logical
        .iter()
        .filter(|c| target_of(c.kind) == Some(c.profile))
        .map(|c| Target {
            kind: c.kind,
            profile: c.profile,
            room: c.length.saturating_sub(c.used),
        })
        .collect();
    let mut order: Vec<(&LayoutChunk, Profile)> = by_logical
        .iter()
        .filter_map(|c| {
            target_of(c.kind)
                .filter(|&t| t != c.profile)
                .map(|t| (*c, t))
        })
        .collect();
    order.reverse();
    replay(
        layout,
        Job {
            order,
            pool,
            forced: true,
            gone: Vec::new(),
            total: layout.total_bytes,
            system: metadata,
        },
        assume,
    )
}

/// Replays `btrfs device remove` of the devices `gone` (indexes into
/// [`Layout::free`], together `gone_bytes` of the devices' total size):
/// the kernel (`btrfs_rm_device`, `btrfs_shrink_device`) takes them out of
/// the allocator first (no new chunk on them, the total size the chunk
/// caps come from shrinks), then relocates every chunk with a stripe on
/// them, one after the other, from the highest device offset down
/// (`order`: their logical starts in that order), into chunks of the same
/// profile on the devices that stay. A relocation in the same profile
/// forces no new chunk (`btrfs_inc_block_group_ro` allocates one only when
/// the profile changes, or when the chunk cannot be made read-only
/// otherwise, never a system chunk); a relocated chunk frees its stripes on
/// the devices that stay (when [`Assume::reuse`] says). Several devices are
/// replayed as one removal (the devices removed later take no chunk of the
/// earlier ones: what would move twice is not counted). `Ok(chunks
/// relocated)` or where it runs out of space.
pub fn simulate_remove(
    layout: &Layout,
    gone: &[usize],
    gone_bytes: u64,
    order: &[u64],
    assume: Assume,
) -> Result<usize, Shortfall> {
    let on_gone = |c: &LayoutChunk| c.stripes.iter().any(|(d, _)| gone.contains(d));
    let mut by_logical: Vec<&LayoutChunk> = layout.chunks.iter().collect();
    by_logical.sort_by_key(|c| c.logical);
    let pool = by_logical
        .iter()
        .filter(|c| !on_gone(c))
        .map(|c| Target {
            kind: c.kind,
            profile: c.profile,
            room: c.length.saturating_sub(c.used),
        })
        .collect();
    let mut order: Vec<(&LayoutChunk, Profile)> = order
        .iter()
        .filter_map(|l| layout.chunks.iter().find(|c| c.logical == *l))
        .filter(|c| on_gone(c))
        .map(|c| (c, c.profile))
        .collect();
    // Chunks on a device that goes that `order` did not name: last.
    for c in by_logical.iter().rev() {
        if on_gone(c) && !order.iter().any(|(o, _)| o.logical == c.logical) {
            order.push((c, c.profile));
        }
    }
    let system = order
        .iter()
        .find(|(c, _)| c.kind == ChunkKind::System)
        .map(|(c, _)| c.profile);
    let mut l = layout.clone();
    for &g in gone {
        if let Some(f) = l.free.get_mut(g) {
            *f = 0;
        }
    }
    replay(
        &l,
        Job {
            order,
            pool,
            forced: false,
            gone: gone.to_vec(),
            total: layout.total_bytes.saturating_sub(gone_bytes),
            system,
        },
        assume,
    )
}

/// A chunk a replay allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    /// Its type.
    pub kind: ChunkKind,
    /// Its profile.
    pub profile: Profile,
    /// Its size, stripes and devices (indexes into [`Layout::free`]).
    pub chunk: alloc::Chunk,
}

/// What a replay that fitted did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Chunks relocated.
    pub steps: usize,
    /// Chunks allocated to take their bytes, in order.
    pub made: Vec<Made>,
}

/// Replays a balance that relocates the chunks starting at `selected`
/// (logical addresses), each into chunks of its own profile, on the same
/// devices: the kernel walks them from the highest address down
/// (`__btrfs_balance`), forces no chunk first (the profile does not
/// change: `btrfs_inc_block_group_ro` allocates one only when the chunk
/// cannot be made read-only otherwise), and the chunks it does not
/// relocate take bytes first. `Ok` with the chunks it allocated (where the
/// relocated bytes went: how wide the new chunks are, on which devices) or
/// where it runs out of space.
pub fn simulate_balance(
    layout: &Layout,
    selected: &[u64],
    assume: Assume,
) -> Result<Moved, Shortfall> {
    let chosen = |c: &LayoutChunk| selected.contains(&c.logical);
    let mut by_logical: Vec<&LayoutChunk> = layout.chunks.iter().collect();
    by_logical.sort_by_key(|c| c.logical);
    let pool = by_logical
        .iter()
        .filter(|c| !chosen(c))
        .map(|c| Target {
            kind: c.kind,
            profile: c.profile,
            room: c.length.saturating_sub(c.used),
        })
        .collect();
    let order: Vec<(&LayoutChunk, Profile)> = by_logical
        .iter()
        .rev()
        .filter(|c| chosen(c))
        .map(|c| (*c, c.profile))
        .collect();
    let system = order
        .iter()
        .find(|(c, _)| c.kind == ChunkKind::System)
        .map(|(c, _)| c.profile);
    replay_made(
        layout,
        Job {
            order,
            pool,
            forced: false,
            gone: Vec::new(),
            total: layout.total_bytes,
            system,
        },
        assume,
    )
}

/// What a replay relocates, and how.
struct Job<'a> {
    /// The chunks in the order the kernel relocates them, each with the
    /// profile it is relocated into.
    order: Vec<(&'a LayoutChunk, Profile)>,
    /// The chunks that take relocated bytes from the start, by address.
    pool: Vec<Target>,
    /// Each relocation forces a chunk of its target profile first (a
    /// conversion: `btrfs_inc_block_group_ro` when the profile changes).
    forced: bool,
    /// Devices that go: their stripes are not freed for reuse.
    gone: Vec<usize>,
    /// The devices' total size during the replay (the chunk size caps).
    total: u64,
    /// The profile of the system chunks the kernel may make on the way
    /// ([`Assume::early_system`]).
    system: Option<Profile>,
}

/// Moves the used bytes of chunk `c` into target chunks of profile `to`,
/// growing the pool from unallocated space as needed: data extent by
/// extent (when known, or taken as the largest), tree blocks anywhere.
/// `Err` holds the bytes that found no room.
fn place(
    c: &LayoutChunk,
    to: Profile,
    unread: Unread,
    pool: &mut Vec<Target>,
    space: &mut Space,
    total: u64,
    kernel: KernelVersion,
) -> Result<(), u64> {
    if c.kind == ChunkKind::Data && (c.extents.is_some() || unread == Unread::Largest) {
        let pieces: Vec<u64> = match &c.extents {
            Some(e) => e.clone(),
            None => {
                let mut v = vec![MAX_EXTENT; (c.used / MAX_EXTENT) as usize];
                if !c.used.is_multiple_of(MAX_EXTENT) {
                    v.push(c.used % MAX_EXTENT);
                }
                v
            }
        };
        for e in pieces {
            loop {
                if let Some(t) = pool
                    .iter_mut()
                    .find(|t| t.kind == c.kind && t.profile == to && t.room >= e)
                {
                    t.room -= e;
                    break;
                }
                if !space.grow(pool, to, c.kind, total, kernel) {
                    return Err(e);
                }
            }
        }
    } else {
        // Tree blocks, or data extents taken as the smallest: they
        // fill any room.
        let mut left = c.used;
        loop {
            for t in pool
                .iter_mut()
                .filter(|t| t.kind == c.kind && t.profile == to)
            {
                let n = t.room.min(left);
                t.room -= n;
                left -= n;
            }
            if left == 0 {
                break;
            }
            if !space.grow(pool, to, c.kind, total, kernel) {
                return Err(left);
            }
        }
    }
    Ok(())
}

/// The replay of `job` on `layout`: the chunks relocated.
fn replay(layout: &Layout, job: Job<'_>, assume: Assume) -> Result<usize, Shortfall> {
    replay_made(layout, job, assume).map(|m| m.steps)
}

/// The replay of `job` on `layout`, with the chunks it allocated.
fn replay_made(layout: &Layout, job: Job<'_>, assume: Assume) -> Result<Moved, Shortfall> {
    let Assume {
        unread,
        free,
        reuse,
        early_system,
    } = assume;
    let Job {
        order,
        mut pool,
        forced,
        gone,
        total,
        system,
    } = job;
    let dup = order.iter().any(|(_, p)| p.geometry().dev_stripes > 1)
        || system.is_some_and(|p| p.geometry().dev_stripes > 1);
    let mut space = Space::new(&layout.free, free == Free::Holes && dup);
    let staying = |stripes: &[(usize, u64)]| -> Vec<(usize, u64)> {
        stripes
            .iter()
            .copied()
            .filter(|(d, _)| !gone.contains(d))
            .collect()
    };
    let mut pending: Vec<(usize, u64)> = Vec::new();
    // What relocated chunks freed on the devices that go: never allocated
    // again, but counted by the kernel's `free_chunk_space`
    // (`btrfs_remove_chunk` adds every freed device extent to it, the
    // removed device's too), which overcommitting reads. Measured (3 ×
    // 1 GiB, single data with 1100 MiB, raid1 metadata, removing device 3):
    // the last system chunk was made read-only with 320 MiB unallocated on
    // the devices that stay, too little without the 896 MiB freed on the
    // device that went.
    let mut freed_on_gone = 0u64;
    let steps = order.len();
    let kernel = layout.kernel;
    // calc_effective_data_chunk_size: what overcommitting must leave.
    let data_chunk = (total / 10).min(1 << 30);
    // Old system chunks to relocate: [`Assume::early_system`] may give
    // them a target chunk along the way.
    let mut early_system = early_system
        && order.iter().any(|(c, _)| c.kind == ChunkKind::System)
        && !pool.iter().any(|t| t.kind == ChunkKind::System);
    for (i, &(c, to)) in order.iter().enumerate() {
        // btrfs_inc_block_group_ro: a forced chunk of the target profile
        // (never a system chunk: btrfs_chunk_alloc refuses those, they
        // come from check_system_chunk when system space runs short).
        let grown = forced
            && c.kind != ChunkKind::System
            && space.grow(&mut pool, to, c.kind, total, kernel);
        if grown
            && early_system
            && let Some(sys) = system
            && space.grow(&mut pool, sys, ChunkKind::System, total, kernel)
        {
            early_system = false;
        }
        if reuse == Reuse::AfterForced {
            space.release(&pending);
            pending.clear();
        }
        let short = |wanted: u64, pool: &[Target], space: &Space| {
            let mine = pool.iter().filter(|t| t.kind == c.kind && t.profile == to);
            Shortfall {
                step: i + 1,
                steps,
                kind: c.kind,
                logical: c.logical,
                from: c.profile,
                to,
                wanted,
                largest_free: mine.clone().map(|t| t.room).max().unwrap_or(0),
                free_in_target: mine.map(|t| t.room).sum(),
                unallocated: space.total(),
                read_only: false,
            }
        };
        // Then the chunk must be made read-only: metadata and system need
        // room elsewhere, in chunks of their type or by overcommitting on
        // unallocated space (btrfs_can_overcommit, NO_FLUSH: what the
        // profile gets from it less a data chunk kept in reserve, halved).
        // Without a conversion's forced chunk, the kernel forces one of
        // metadata when that fails, and tries again.
        if c.kind != ChunkKind::Data {
            let copies = u64::from(to.geometry().ncopies.max(1));
            let reserved = if c.kind == ChunkKind::Metadata {
                layout.global_reserve
            } else {
                0
            };
            let fails = |pool: &[Target], space: &Space| {
                let elsewhere: u64 = pool
                    .iter()
                    .filter(|t| t.kind == c.kind)
                    .map(|t| t.room)
                    .sum::<u64>()
                    + order[i + 1..]
                        .iter()
                        .filter(|(o, _)| o.kind == c.kind)
                        .map(|(o, _)| o.length.saturating_sub(o.used))
                        .sum::<u64>();
                let avail =
                    ((space.total() + freed_on_gone) / copies).saturating_sub(data_chunk) / 2;
                (elsewhere + avail <= reserved).then_some(elsewhere)
            };
            let mut failed = fails(&pool, &space);
            if failed.is_some()
                && !forced
                && c.kind == ChunkKind::Metadata
                && space.grow(&mut pool, to, c.kind, total, kernel)
            {
                failed = fails(&pool, &space);
            }
            if let Some(elsewhere) = failed {
                return Err(Shortfall {
                    largest_free: 0,
                    free_in_target: elsewhere,
                    read_only: true,
                    ..short(c.used.max(1), &pool, &space)
                });
            }
        }
        if let Err(wanted) = place(c, to, unread, &mut pool, &mut space, total, kernel) {
            return Err(short(wanted, &pool, &space));
        }
        // The old chunk goes: the previous one's stripes are free now, its
        // own after the next chunk (the allocator searches the device
        // tree's commit root); those on a device that goes never are.
        let freed = staying(&c.stripes);
        freed_on_gone += c
            .stripes
            .iter()
            .filter(|(d, _)| gone.contains(d))
            .map(|(_, b)| b)
            .sum::<u64>();
        match reuse {
            Reuse::AtOnce => space.release(&freed),
            Reuse::AfterForced => pending = freed,
            Reuse::AfterNext => {
                space.release(&pending);
                pending = freed;
            }
        }
    }
    Ok(Moved {
        steps,
        made: space.made,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const K: KernelVersion = KernelVersion::new(6, 18);

    fn chunk(
        kind: ChunkKind,
        profile: Profile,
        logical: u64,
        length: u64,
        used: u64,
        devs: &[usize],
    ) -> LayoutChunk {
        let per = match profile {
            Profile::Single | Profile::Dup => length,
            Profile::Raid0 => length / devs.len() as u64,
            _ => length,
        };
        LayoutChunk {
            kind,
            profile,
            logical,
            length,
            used,
            stripes: devs.iter().map(|&d| (d, per)).collect(),
            extents: None,
        }
    }

    /// 2 × 2 GiB made with `-d single -m raid1`, `n` single data chunks of
    /// 416 MiB (what the kernel allocates there) each holding `used`, in
    /// extents of 128 MiB; the device free space as allocated.
    fn two_by_two(n: usize, used: u64) -> Layout {
        let size = 2 * GIB;
        let mut free = vec![size, size];
        let mut chunks = vec![
            chunk(
                ChunkKind::System,
                Profile::Raid1,
                1 << 20,
                8 * MIB,
                16 << 10,
                &[0, 1],
            ),
            chunk(
                ChunkKind::Metadata,
                Profile::Raid1,
                30 * MIB,
                256 * MIB,
                2 * MIB,
                &[0, 1],
            ),
        ];
        for f in &mut free {
            *f -= 8 * MIB + 256 * MIB;
        }
        for i in 0..n {
            let d = i % 2;
            free[d] -= 416 * MIB;
            chunks.push(chunk(
                ChunkKind::Data,
                Profile::Single,
                GIB + i as u64 * 416 * MIB,
                416 * MIB,
                used,
                &[d],
            ));
        }
        Layout {
            free,
            chunks,
            total_bytes: 2 * size,
            kernel: K,
            global_reserve: 5 * MIB,
        }
    }

    #[test]
    fn the_one_point_two_gib_case_runs_out_mid_way() {
        // 1.2 GiB of data: four chunks of 384 MiB (three 128 MiB extents):
        // every raid1 chunk of 416 MiB holds three extents and wastes
        // 32 MiB, forced chunks eat the rest, and the last chunks are too
        // small for an extent.
        let l = two_by_two(4, 384 * MIB);
        let s = simulate(&l, Some(Profile::Raid1), Some(Profile::Raid1)).unwrap_err();
        assert_eq!(s.kind, ChunkKind::Data);
        assert_eq!(s.wanted, MAX_EXTENT);
        assert!(s.largest_free < MAX_EXTENT, "{s:?}");
        assert!(s.step > 1 && s.step <= s.steps, "{s:?}");
        // The sum of free space would have held it: the summed check says
        // it fits.
        assert!(s.free_in_target + s.unallocated > MAX_EXTENT, "{s:?}");
    }

    #[test]
    fn little_data_fits() {
        let l = two_by_two(1, 300 * MIB);
        assert_eq!(
            simulate(&l, Some(Profile::Raid1), Some(Profile::Raid1)),
            Ok(1)
        );
    }

    #[test]
    fn small_extents_pack_where_large_ones_do_not() {
        let mut l = two_by_two(4, 384 * MIB);
        for c in &mut l.chunks {
            if c.kind == ChunkKind::Data {
                c.extents = Some(vec![MIB; 384]);
            }
        }
        let big = simulate(&two_by_two(4, 384 * MIB), Some(Profile::Raid1), None);
        let small = simulate(&l, Some(Profile::Raid1), None);
        assert!(big.is_err());
        // Small extents fill every range: never worse than large ones.
        if let Err(s) = &small {
            assert!(s.step >= big.unwrap_err().step);
        }
    }

    #[test]
    fn unread_extents_are_refused_only_when_even_the_smallest_run_out() {
        // Extents not read: taken as the largest the replay runs out (340
        // MiB in 416 MiB chunks: two 128 MiB extents and an 84 MiB one, a
        // 416 MiB raid1 chunk takes three 128 MiB ones only), as the
        // smallest it fits (the caller warns instead of refusing).
        let l = two_by_two(4, 340 * MIB);
        assert!(has_unread_extents(&l, Some(Profile::Raid1)));
        assert!(simulate(&l, Some(Profile::Raid1), None).is_err());
        assert!(simulate_with(&l, Some(Profile::Raid1), None, Unread::Smallest).is_ok());
        // Read: both the same.
        let mut read = l.clone();
        for c in &mut read.chunks {
            if c.kind == ChunkKind::Data {
                c.extents = Some(vec![MAX_EXTENT, MAX_EXTENT, 84 * MIB]);
            }
        }
        assert!(!has_unread_extents(&read, Some(Profile::Raid1)));
        assert!(simulate_with(&read, Some(Profile::Raid1), None, Unread::Smallest).is_err());
        // No room at all: even the smallest extents run out.
        let mut full = l.clone();
        full.free = vec![0, 0];
        assert!(simulate_with(&full, Some(Profile::Raid1), None, Unread::Smallest).is_err());
    }

    #[test]
    fn the_space_of_a_relocated_chunk_serves_the_next_ones_extents() {
        // Freed after the next chunk's forced allocation, before its
        // extents are copied: the 4 × 300 MiB case above fits.
        let l = two_by_two(4, 300 * MIB);
        assert!(simulate(&l, Some(Profile::Raid1), None).is_ok());
        let after_next = Assume {
            reuse: Reuse::AfterNext,
            ..Assume::WORST
        };
        assert!(simulate_in(&l, Some(Profile::Raid1), None, after_next).is_err());
    }

    /// One 1 GiB device: single data chunks of 112 MiB holding one extent
    /// each (72, 64, 64 MiB) and an empty 8 MiB one, dup metadata, 560 MiB
    /// unallocated (as mkfs and 200 MiB written make it).
    fn one_device_single_data() -> Layout {
        let mut chunks = vec![
            chunk(
                ChunkKind::System,
                Profile::Dup,
                22 * MIB,
                8 * MIB,
                16 << 10,
                &[0, 0],
            ),
            chunk(
                ChunkKind::Metadata,
                Profile::Dup,
                30 * MIB,
                51 * MIB,
                MIB,
                &[0, 0],
            ),
            chunk(ChunkKind::Data, Profile::Single, 13 * MIB, 8 * MIB, 0, &[0]),
        ];
        for (i, e) in [64, 64, 72].into_iter().enumerate() {
            let mut c = chunk(
                ChunkKind::Data,
                Profile::Single,
                84 * MIB + i as u64 * 112 * MIB,
                112 * MIB,
                e * MIB,
                &[0],
            );
            c.extents = Some(vec![e * MIB]);
            chunks.push(c);
        }
        Layout {
            free: vec![560 * MIB],
            chunks,
            total_bytes: GIB,
            kernel: K,
            global_reserve: 5 * MIB,
        }
    }

    #[test]
    fn dup_chunks_take_both_stripes_from_one_free_range() {
        // The kernel: two 112 MiB dup chunks from the unallocated range,
        // then 56 MiB ones (half of the 112 MiB range the first relocated
        // chunk freed, half of what is left of the first range): the last
        // 64 MiB extent finds no room, ENOSPC.
        let l = one_device_single_data();
        let dup = Some(Profile::Dup);
        let s = simulate(&l, dup, None).unwrap_err();
        assert_eq!((s.step, s.kind, s.wanted), (3, ChunkKind::Data, 64 * MIB));
        // Counting the free space as one total, it fits: the caller warns.
        let total = Assume {
            free: Free::Total,
            ..Assume::WORST
        };
        assert!(simulate_in(&l, dup, None, total).is_ok());
        assert!(simulate_in(&l, dup, None, Assume::BEST).is_ok());
        // Other targets are not affected.
        let mut two = l.clone();
        two.free.push(GIB);
        two.total_bytes += GIB;
        let raid1 = Some(Profile::Raid1);
        assert_eq!(
            simulate(&two, raid1, None),
            simulate_in(&two, raid1, None, total)
        );
    }

    #[test]
    fn chunks_in_the_target_profile_are_not_relocated() {
        let l = two_by_two(2, 100 * MIB);
        // Only the data changes; metadata and system are raid1 already.
        assert_eq!(
            simulate(&l, Some(Profile::Raid1), Some(Profile::Raid1)),
            Ok(2)
        );
        assert_eq!(simulate(&l, None, Some(Profile::Raid1)), Ok(0));
    }

    #[test]
    fn metadata_fills_any_room() {
        let mut l = two_by_two(0, 0);
        l.chunks[1].profile = Profile::Single;
        l.chunks[1].stripes = vec![(0, 256 * MIB)];
        l.free[1] += 256 * MIB;
        assert!(simulate(&l, None, Some(Profile::Raid1c3)).is_err());
        assert_eq!(simulate(&l, None, Some(Profile::Raid1)), Ok(1));
    }

    #[test]
    fn the_last_system_chunk_needs_room_to_overcommit() {
        // `-m single`: the one system chunk is relocated last; nothing else
        // holds system space, so making it read-only needs the unallocated
        // space less a data chunk (409.6 MiB on 4 GiB) to be left over.
        let single = |l: &mut Layout| {
            l.chunks[0].profile = Profile::Single;
            l.chunks[0].stripes = vec![(0, 8 * MIB)];
            l.free[1] += 8 * MIB;
        };
        let mut roomy = two_by_two(1, 100 * MIB);
        single(&mut roomy);
        assert!(simulate(&roomy, None, Some(Profile::Raid1)).is_ok());
        let mut tight = two_by_two(1, 100 * MIB);
        single(&mut tight);
        tight.free = vec![300 * MIB, 300 * MIB];
        let s = simulate(&tight, None, Some(Profile::Raid1)).unwrap_err();
        assert!(s.read_only && s.kind == ChunkKind::System, "{s:?}");
        // Nothing else is converted: no chunk is made before it, so no
        // system chunk comes along (reserve_chunk_space), whatever is
        // assumed.
        let early = Assume {
            early_system: true,
            ..Assume::WORST
        };
        assert!(simulate_in(&tight, None, Some(Profile::Raid1), early).is_err());
        // With the metadata chunk converted first (it lies above), the
        // kernel may have made a system chunk of the target profile by
        // then: room elsewhere, the conversion goes through; not a sure
        // refusal.
        tight.chunks[1].profile = Profile::Single;
        tight.chunks[1].stripes = vec![(1, 256 * MIB)];
        tight.free[0] += 256 * MIB;
        assert!(simulate(&tight, None, Some(Profile::Raid1)).is_err());
        assert!(simulate_in(&tight, None, Some(Profile::Raid1), early).is_ok());
        // With no room for one either, it still runs out.
        tight.free = vec![0, 0];
        assert!(simulate_in(&tight, None, Some(Profile::Raid1), early).is_err());
        assert!(Assume::all().any(|a| a.early_system) && Assume::all().count() == 24);
    }

    /// 3 × 1 GiB raid1: system and metadata on devices 1 and 2, a 320
    /// MiB data chunk on 0 and 1 holding `used`; removing device 1.
    fn three_raid1(used: u64) -> Layout {
        let mut c = chunk(
            ChunkKind::Data,
            Profile::Raid1,
            GIB,
            320 * MIB,
            used,
            &[0, 1],
        );
        c.extents = Some(vec![MAX_EXTENT; (used / MAX_EXTENT) as usize]);
        Layout {
            free: vec![703 * MIB, 439 * MIB, 759 * MIB],
            chunks: vec![
                chunk(
                    ChunkKind::System,
                    Profile::Raid1,
                    MIB,
                    8 * MIB,
                    16 << 10,
                    &[1, 2],
                ),
                chunk(
                    ChunkKind::Metadata,
                    Profile::Raid1,
                    30 * MIB,
                    256 * MIB,
                    MIB,
                    &[1, 2],
                ),
                c,
            ],
            total_bytes: 3 * GIB,
            kernel: K,
            global_reserve: 5 * MIB,
        }
    }

    #[test]
    fn a_remove_relocates_onto_the_devices_that_stay_only() {
        let order = [GIB, 30 * MIB, MIB];
        // 256 MiB of data: a new raid1 chunk on devices 0 and 2 takes it.
        let l = three_raid1(256 * MIB);
        assert_eq!(simulate_remove(&l, &[1], GIB, &order, Assume::WORST), Ok(3));
        // Devices 0 and 2 nearly full: the data's extent finds no chunk,
        // although device 1 (going) has room.
        let mut full = l.clone();
        full.free = vec![100 * MIB, 900 * MIB, 100 * MIB];
        let s = simulate_remove(&full, &[1], GIB, &order, Assume::WORST).unwrap_err();
        assert_eq!((s.step, s.kind, s.wanted), (1, ChunkKind::Data, MAX_EXTENT));
        assert!(Assume::all().all(|a| simulate_remove(&full, &[1], GIB, &order, a).is_err()));
    }

    #[test]
    fn no_unallocated_space_at_all_fails_at_the_first_step() {
        let mut l = two_by_two(2, 400 * MIB);
        l.free = vec![0, 0];
        let s = simulate(&l, Some(Profile::Raid1), None).unwrap_err();
        assert_eq!((s.step, s.unallocated, s.free_in_target), (1, 0, 0));
    }
}
