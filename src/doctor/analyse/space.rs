//! Space: room for a new metadata chunk, fullness against what data and
//! metadata can grow to, the global reserve (one computation with `usage`:
//! [`crate::space::room`]).

use crate::model::finding::Finding;
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::space::room::{self, RoomFacts};

use super::Cx;
use crate::doctor::facts::FsFacts;

/// The profile the kernel gives new chunks of a type: a convert target
/// when a balance exists, else the most redundant profile in use (as
/// `btrfs_reduce_alloc_profile`).
pub(crate) fn alloc_profile(f: &FsFacts, kind: BgType) -> Option<Profile> {
    let target = f.balance.and_then(|b| match kind {
        BgType::Data => b.data_target,
        BgType::Metadata => b.metadata_target,
        _ => None,
    });
    if target.is_some() {
        return target;
    }
    crate::model::alloc::new_chunk_profile(&f.profiles(kind))
}

/// The space findings: the room computation `usage` makes too
/// ([`crate::space::room`]), on the facts doctor read.
pub(super) fn findings(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
    let gr = f
        .spaces
        .iter()
        .find(|s| s.bg_type == BgType::GlobalReserve)
        .map(|g| (g.used_bytes, g.total_bytes));
    let mixed = !f.profiles(BgType::DataMetadata).is_empty();
    let kernel = KernelVersion::parse(&f.kernel).unwrap_or(KernelVersion::new(6, 18));
    out.extend(room::findings(&RoomFacts {
        mount: &cx.m,
        data_profile: alloc_profile(f, BgType::Data),
        // Mixed block groups: the data fullness covers metadata.
        metadata_profile: if mixed {
            None
        } else {
            alloc_profile(f, BgType::Metadata)
        },
        data: f.totals(BgType::Data),
        metadata: f.totals(BgType::Metadata),
        reserve: gr,
        unalloc: &cx.unalloc,
        devices_bytes: f.present().map(|d| d.size_bytes).sum(),
        metadata_chunk_bytes: f.metadata_chunk_bytes,
        kernel,
        data_chunks: f.data_chunks.as_deref(),
    }));
}
