//! What a balance would even out, planned from the chunks alone (pure).
//!
//! A chunk is as wide as the devices that had room when it was allocated:
//! data written before a device was added stays on the devices it had,
//! and reads of it use those alone. Two kinds of unevenness, two kernel
//! filters, one per chunk type in one balance:
//! - striped profiles (RAID0, RAID10, RAID5, RAID6 span as many devices as
//!   have room): the chunks narrower than a new chunk on this array would
//!   be, with `stripes=1..N-1` (`BTRFS_BALANCE_ARGS_STRIPES_RANGE`, the
//!   chunk's `num_stripes`);
//! - profiles of a fixed width (single, DUP, RAID1, RAID1C3/4 put their
//!   stripes on the devices with the most room): when one device holds
//!   more than a stripe above the type's mean and another more than a stripe
//!   below (with room to take it), the chunks with a stripe on the most
//!   loaded device, `devid=D,limit=K` — the kernel picks them from the
//!   highest address down, and so does [`select_on_device`].
//!
//! The selected chunks are replayed as the kernel relocates them
//! ([`relocate::simulate_balance`]): it refuses when the space runs out,
//! and the chunks it allocates give the spread and widths after.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::alloc::ChunkKind;
use crate::model::profile::Profile;
use crate::model::relocate::{self, Assume, Layout, LayoutChunk, Moved, Shortfall};

/// A member device, in the order of [`Layout::free`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// btrfs device id.
    pub devid: u64,
    /// Present (not missing).
    pub present: bool,
}

impl Member {
    /// The members of `state`, in its order (the layout's: see
    /// [`crate::operation::layout::layout_of`]); a missing one has no path.
    pub fn of_state(state: &crate::operation::state::FsState) -> Vec<Member> {
        state
            .devices
            .iter()
            .map(|d| Member {
                devid: d.devid,
                present: !d.path.is_empty(),
            })
            .collect()
    }
}

/// The chunk types, by the name used in text, JSON and filters.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Data.
    Data,
    /// Metadata.
    Metadata,
    /// System.
    System,
}

impl Kind {
    /// The model's kind.
    pub fn chunk_kind(self) -> ChunkKind {
        match self {
            Kind::Data => ChunkKind::Data,
            Kind::Metadata => ChunkKind::Metadata,
            Kind::System => ChunkKind::System,
        }
    }

    fn of(k: ChunkKind) -> Self {
        match k {
            ChunkKind::Data => Kind::Data,
            ChunkKind::Metadata => Kind::Metadata,
            ChunkKind::System => Kind::System,
        }
    }

    /// `data`, `metadata`, `system`.
    pub fn name(self) -> &'static str {
        self.chunk_kind().name()
    }
}

/// One device's share of a type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Share {
    /// btrfs device id.
    pub devid: u64,
    /// Raw bytes of the type's chunks on it.
    pub allocated: u64,
}

/// The chunks of one stripe count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Width {
    /// Stripes of each chunk (`num_stripes`).
    pub stripes: u32,
    /// Chunks.
    pub chunks: u64,
    /// Bytes used in them.
    pub used_bytes: u64,
}

/// How one type's chunks of one profile lie on the devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Spread {
    /// Chunk type.
    pub kind: Kind,
    /// Profile.
    pub profile: Profile,
    /// Chunks.
    pub chunks: u64,
    /// Bytes used in them.
    pub used_bytes: u64,
    /// Each present device's share, by devid.
    pub devices: Vec<Share>,
    /// The chunks by stripe count, narrowest first.
    pub widths: Vec<Width>,
    /// Stripes a new chunk gets with room on every present device (`null`:
    /// the profile cannot be allocated on them).
    pub full_width: Option<u32>,
    /// The devices a read of its data uses, on average over the bytes used
    /// (the data stripes of the chunk holding them: RAID0's stripes, RAID10's
    /// half, RAID5/6 less parity; 1 for the fixed-width profiles).
    pub read_stripes: f64,
}

/// A kernel balance filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "filter", rename_all = "lowercase")]
pub enum Filter {
    /// `stripes=MIN..MAX`: chunks with that many stripes.
    Stripes {
        /// Fewest stripes.
        min: u32,
        /// Most stripes.
        max: u32,
    },
    /// `devid=D,limit=K`: the first K chunks (from the highest address
    /// down) with a stripe on device D.
    Devid {
        /// The device.
        devid: u64,
        /// Chunks at most.
        limit: u64,
    },
}

impl Filter {
    /// As `btrfs balance start` writes it (`stripes=1..3`).
    pub fn describe(&self) -> String {
        match self {
            Filter::Stripes { min, max } => format!("stripes={min}..{max}"),
            Filter::Devid { devid, limit } => format!("devid={devid},limit={limit}"),
        }
    }
}

/// What the balance relocates of one type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Step {
    /// Chunk type (one filter a type).
    pub kind: Kind,
    /// The profile it evens out.
    pub profile: Profile,
    /// The filter.
    #[serde(flatten)]
    pub filter: Filter,
    /// Chunks it selects.
    pub chunks: u64,
    /// Bytes used in them: what the kernel copies.
    pub used_bytes: u64,
}

/// A planned balance: the spread now and after, what moves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Planned {
    /// Each type and profile now.
    pub before: Vec<Spread>,
    /// As the replay leaves them.
    pub after: Vec<Spread>,
    /// What the balance relocates (empty: already even).
    pub steps: Vec<Step>,
    /// The logical starts of the chunks it relocates.
    #[serde(skip)]
    pub selected: Vec<u64>,
}

impl Planned {
    /// Chunks relocated.
    pub fn chunks(&self) -> u64 {
        self.steps.iter().map(|s| s.chunks).sum()
    }

    /// Bytes copied.
    pub fn used_bytes(&self) -> u64 {
        self.steps.iter().map(|s| s.used_bytes).sum()
    }
}

/// Striped profiles span every device with room: width is what reads get.
pub fn striped(p: Profile) -> bool {
    matches!(
        p,
        Profile::Raid0 | Profile::Raid10 | Profile::Raid5 | Profile::Raid6
    )
}

/// How each type and profile of `layout` lies on `members` (aligned with
/// [`Layout::free`]).
pub fn spread(layout: &Layout, members: &[Member]) -> Vec<Spread> {
    let present = members.iter().filter(|m| m.present).count() as u32;
    let mut groups: BTreeMap<(Kind, Profile), Vec<&LayoutChunk>> = BTreeMap::new();
    for c in &layout.chunks {
        groups
            .entry((Kind::of(c.kind), c.profile))
            .or_default()
            .push(c);
    }
    groups
        .into_iter()
        .map(|((kind, profile), chunks)| {
            spread_of(kind, profile, &chunks, members, present, layout)
        })
        .collect()
}

fn spread_of(
    kind: Kind,
    profile: Profile,
    chunks: &[&LayoutChunk],
    members: &[Member],
    present: u32,
    layout: &Layout,
) -> Spread {
    let mut on = vec![0u64; members.len()];
    let mut widths: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut weighted = 0f64;
    let mut used = 0u64;
    for c in chunks {
        for &(d, b) in &c.stripes {
            if let Some(x) = on.get_mut(d) {
                *x += b;
            }
        }
        let n = c.stripes.len() as u32;
        let w = widths.entry(n).or_default();
        w.0 += 1;
        w.1 += c.used;
        used += c.used;
        let reads = if striped(profile) {
            profile.data_stripes(n)
        } else {
            1
        };
        weighted += c.used as f64 * f64::from(reads);
    }
    Spread {
        kind,
        profile,
        chunks: chunks.len() as u64,
        used_bytes: used,
        devices: members
            .iter()
            .zip(&on)
            .filter(|(m, _)| m.present)
            .map(|(m, &allocated)| Share {
                devid: m.devid,
                allocated,
            })
            .collect(),
        widths: widths
            .into_iter()
            .map(|(stripes, (chunks, used_bytes))| Width {
                stripes,
                chunks,
                used_bytes,
            })
            .collect(),
        full_width: profile.stripes_on(present, layout.kernel),
        read_stripes: if used == 0 {
            0.0
        } else {
            weighted / used as f64
        },
    }
}

/// Plans the smallest balance that evens `layout` out (see the module's
/// text): `Ok` with nothing to do, or with the steps and the spread the
/// replay leaves; `Err` where the replay runs out of space.
pub fn plan(layout: &Layout, members: &[Member]) -> Result<Planned, Shortfall> {
    let before = spread(layout, members);
    let mut steps = Vec::new();
    let mut selected = Vec::new();
    for s in &before {
        // System chunks go with metadata's filter, as btrfs-progs sends
        // them (the kernel refuses system alone without force).
        if s.kind == Kind::System {
            continue;
        }
        // One filter a type: the first profile of a type that needs one
        // (a type in two profiles is a conversion's business).
        if steps.iter().any(|t: &Step| t.kind == s.kind) {
            continue;
        }
        let chosen = if striped(s.profile) {
            select_narrow(layout, s)
        } else {
            select_on_device(layout, s, members)
        };
        if let Some((filter, logicals)) = chosen {
            let picked: Vec<&LayoutChunk> = layout
                .chunks
                .iter()
                .filter(|c| logicals.contains(&c.logical))
                .collect();
            steps.push(Step {
                kind: s.kind,
                profile: s.profile,
                filter,
                chunks: picked.len() as u64,
                used_bytes: picked.iter().map(|c| c.used).sum(),
            });
            selected.extend(logicals);
        }
    }
    if steps.is_empty() {
        return Ok(Planned {
            after: before.clone(),
            before,
            steps,
            selected,
        });
    }
    let moved = relocate::simulate_balance(layout, &selected, Assume::WORST)?;
    let after = spread(&after_layout(layout, &selected, &moved), members);
    Ok(Planned {
        before,
        after,
        steps,
        selected,
    })
}

/// Striped: every chunk narrower than a new one on this array
/// (`stripes=1..N-1`), when there is one.
fn select_narrow(layout: &Layout, s: &Spread) -> Option<(Filter, Vec<u64>)> {
    let full = s.full_width?;
    let narrow: Vec<u64> = layout
        .chunks
        .iter()
        .filter(|c| Kind::of(c.kind) == s.kind && c.profile == s.profile)
        .filter(|c| (c.stripes.len() as u32) < full)
        .map(|c| c.logical)
        .collect();
    (!narrow.is_empty()).then_some((
        Filter::Stripes {
            min: 1,
            max: full - 1,
        },
        narrow,
    ))
}

/// Fixed width: the chunks with a stripe on the most loaded device, from
/// the highest address down, as many as bring it to within a stripe of the
/// mean — when another device is more than a stripe below the mean and has
/// room to take one.
fn select_on_device(layout: &Layout, s: &Spread, members: &[Member]) -> Option<(Filter, Vec<u64>)> {
    let mine: Vec<&LayoutChunk> = layout
        .chunks
        .iter()
        .filter(|c| Kind::of(c.kind) == s.kind && c.profile == s.profile)
        .collect();
    let stripe = mine
        .iter()
        .flat_map(|c| c.stripes.iter().map(|&(_, b)| b))
        .max()?;
    let n = s.devices.len() as u64;
    if n < 2 {
        return None;
    }
    let mean = s.devices.iter().map(|d| d.allocated).sum::<u64>() / n;
    let high = s
        .devices
        .iter()
        .max_by_key(|d| (d.allocated, std::cmp::Reverse(d.devid)))?;
    let index_of = |devid: u64| members.iter().position(|m| m.devid == devid);
    let low_has_room = s.devices.iter().any(|d| {
        d.allocated + stripe < mean
            && index_of(d.devid)
                .and_then(|i| layout.free.get(i))
                .is_some_and(|&f| f >= stripe)
    });
    if high.allocated < mean + stripe || !low_has_room {
        return None;
    }
    let on_high = index_of(high.devid)?;
    // Each relocated chunk takes one stripe off the loaded device.
    let limit = (high.allocated - mean) / stripe;
    if limit == 0 {
        return None;
    }
    let picked = select_on_device_walk(&mine, on_high, limit);
    (!picked.is_empty()).then_some((
        Filter::Devid {
            devid: high.devid,
            limit: picked.len() as u64,
        },
        picked,
    ))
}

/// The kernel's `devid=D,limit=K` over `chunks`: from the highest address
/// down, the first `limit` with a stripe on device index `on`.
fn select_on_device_walk(chunks: &[&LayoutChunk], on: usize, limit: u64) -> Vec<u64> {
    let mut by_logical: Vec<&&LayoutChunk> = chunks.iter().collect();
    by_logical.sort_by_key(|c| std::cmp::Reverse(c.logical));
    by_logical
        .into_iter()
        .filter(|c| c.stripes.iter().any(|&(d, _)| d == on))
        .take(limit as usize)
        .map(|c| c.logical)
        .collect()
}

/// `layout` after the replay: the selected chunks gone, the ones it made
/// there, filled in order with the bytes of their type and profile that
/// moved.
fn after_layout(layout: &Layout, selected: &[u64], moved: &Moved) -> Layout {
    let mut l = layout.clone();
    let mut moving: BTreeMap<(Kind, Profile), u64> = BTreeMap::new();
    l.chunks.retain(|c| {
        let gone = selected.contains(&c.logical);
        if gone {
            *moving.entry((Kind::of(c.kind), c.profile)).or_default() += c.used;
        }
        !gone
    });
    let mut next = l
        .chunks
        .iter()
        .map(|c| c.logical + c.length)
        .max()
        .unwrap_or(0);
    for m in &moved.made {
        let left = moving.entry((Kind::of(m.kind), m.profile)).or_default();
        let used = (*left).min(m.chunk.length);
        *left -= used;
        let per = m.chunk.stripe;
        let stripes = m
            .chunk
            .devices
            .iter()
            .flat_map(|&d| std::iter::repeat_n((d, per), m.profile.geometry().dev_stripes as usize))
            .collect();
        l.chunks.push(LayoutChunk {
            kind: m.kind,
            profile: m.profile,
            logical: next,
            length: m.chunk.length,
            used,
            stripes,
            extents: None,
        });
        next += m.chunk.length;
    }
    l
}
