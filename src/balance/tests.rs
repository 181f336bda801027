//! The planner on layouts built here (generated, not read from a device):
//! the kernel's replay is checked on loop devices in tests/it/balance.rs.

use super::plan::{self, Filter, Kind, Member};
use crate::model::alloc::ChunkKind;
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;
use crate::model::relocate::{Layout, LayoutChunk};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const K: KernelVersion = KernelVersion::new(6, 18);

fn members(n: usize) -> Vec<Member> {
    (0..n)
        .map(|i| Member {
            devid: i as u64 + 1,
            present: true,
        })
        .collect()
}

/// `devices` of `size`; chunks as (kind, profile, devices, stripe, used).
fn layout(
    devices: usize,
    size: u64,
    chunks: &[(ChunkKind, Profile, &[usize], u64, u64)],
) -> Layout {
    let mut free = vec![size - MIB; devices];
    let mut logical = 30 * MIB;
    let mut out = Vec::new();
    for &(kind, profile, devs, stripe, used) in chunks {
        let g = profile.geometry();
        let mut stripes = Vec::new();
        for &d in devs {
            for _ in 0..g.dev_stripes {
                stripes.push((d, stripe));
                free[d] -= stripe;
            }
        }
        let length = stripe * u64::from(profile.data_stripes(stripes.len() as u32));
        out.push(LayoutChunk {
            kind,
            profile,
            logical,
            length,
            used: used.min(length),
            stripes,
            extents: None,
        });
        logical += length;
    }
    Layout {
        free,
        chunks: out,
        total_bytes: size * devices as u64,
        kernel: K,
        global_reserve: 16 * MIB,
    }
}

/// 3 × `size` with raid0 data (3 wide, `n` chunks of 3 × 256 MiB, full)
/// and raid1c3 metadata, and a fourth empty device of `size` added.
fn raid0_then_add(n: usize, size: u64) -> Layout {
    let mut chunks: Vec<(ChunkKind, Profile, &[usize], u64, u64)> = vec![
        (
            ChunkKind::System,
            Profile::Raid1c3,
            &[0, 1, 2],
            8 * MIB,
            16 << 10,
        ),
        (
            ChunkKind::Metadata,
            Profile::Raid1c3,
            &[0, 1, 2],
            256 * MIB,
            8 * MIB,
        ),
    ];
    for _ in 0..n {
        chunks.push((
            ChunkKind::Data,
            Profile::Raid0,
            &[0, 1, 2],
            256 * MIB,
            768 * MIB,
        ));
    }
    layout(4, size, &chunks)
}

#[test]
fn narrow_raid0_chunks_are_spread_over_the_added_device() {
    let l = raid0_then_add(3, 4 * GIB);
    let p = plan::plan(&l, &members(4)).unwrap();
    assert_eq!(p.steps.len(), 1, "{:?}", p.steps);
    let s = &p.steps[0];
    assert_eq!((s.kind, s.profile), (Kind::Data, Profile::Raid0));
    assert_eq!(s.filter, Filter::Stripes { min: 1, max: 3 });
    assert_eq!(s.chunks, 3);
    assert_eq!(s.used_bytes, 3 * 768 * MIB);
    let before = p.before.iter().find(|x| x.kind == Kind::Data).unwrap();
    let after = p.after.iter().find(|x| x.kind == Kind::Data).unwrap();
    assert_eq!(before.full_width, Some(4));
    assert!((before.read_stripes - 3.0).abs() < 1e-9);
    assert!((after.read_stripes - 4.0).abs() < 1e-9, "{after:?}");
    assert!(after.widths.iter().all(|w| w.stripes == 4), "{after:?}");
    // Every device within one stripe of the mean.
    let mean = after.devices.iter().map(|d| d.allocated).sum::<u64>() / 4;
    let stripe = 256 * MIB;
    for d in &after.devices {
        assert!(d.allocated.abs_diff(mean) <= stripe, "{after:?}");
    }
    // Metadata (raid1c3 on 3 of 4) is left: a stripe from even.
    assert!(p.steps.iter().all(|s| s.kind == Kind::Data));
}

#[test]
fn an_even_array_has_nothing_to_do() {
    let l = layout(
        4,
        4 * GIB,
        &[
            (ChunkKind::Metadata, Profile::Raid1, &[0, 1], 256 * MIB, MIB),
            (ChunkKind::Metadata, Profile::Raid1, &[2, 3], 256 * MIB, MIB),
            (
                ChunkKind::Data,
                Profile::Raid0,
                &[0, 1, 2, 3],
                256 * MIB,
                GIB,
            ),
            (
                ChunkKind::Data,
                Profile::Raid0,
                &[0, 1, 2, 3],
                256 * MIB,
                GIB,
            ),
        ],
    );
    let p = plan::plan(&l, &members(4)).unwrap();
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.before, p.after);
}

#[test]
fn raid1_on_two_full_devices_moves_stripes_onto_the_third() {
    let mut chunks: Vec<(ChunkKind, Profile, &[usize], u64, u64)> = Vec::new();
    for _ in 0..6 {
        chunks.push((
            ChunkKind::Data,
            Profile::Raid1,
            &[0, 1],
            512 * MIB,
            512 * MIB,
        ));
    }
    let l = layout(3, 4 * GIB, &chunks);
    let p = plan::plan(&l, &members(3)).unwrap();
    assert_eq!(p.steps.len(), 1, "{:?}", p.steps);
    let Filter::Devid { devid, limit } = p.steps[0].filter else {
        panic!("{:?}", p.steps)
    };
    assert!(devid == 1 || devid == 2);
    // 6 stripes on each of two devices, mean 4: two chunks off the first.
    assert_eq!(limit, 2);
    let after = &p.after[0];
    // The relocated chunks' new copies each put a stripe on the empty
    // device (the most room); they are larger (stripes up to 1 GiB) and
    // take the next ones' bytes too.
    let third = after.devices.iter().find(|d| d.devid == 3).unwrap();
    assert!(third.allocated >= 512 * MIB, "{after:?}");
    assert_eq!(after.used_bytes, 6 * 512 * MIB);
}

#[test]
fn a_balance_the_space_cannot_hold_is_refused_with_the_step() {
    // Three devices full of full raid0 chunks, a fourth of 128 MiB: the
    // first relocated chunk finds room for 128 MiB of its 768.
    let mut chunks: Vec<(ChunkKind, Profile, &[usize], u64, u64)> =
        vec![(ChunkKind::Metadata, Profile::Raid1, &[0, 1], 64 * MIB, MIB)];
    for _ in 0..3 {
        chunks.push((
            ChunkKind::Data,
            Profile::Raid0,
            &[0, 1, 2],
            256 * MIB,
            768 * MIB,
        ));
    }
    let mut l = layout(4, 1024 * MIB, &chunks);
    for f in &mut l.free[..3] {
        *f = 0;
    }
    l.free[3] = 128 * MIB;
    let e = plan::plan(&l, &members(4)).unwrap_err();
    assert_eq!(e.step, 1);
    assert_eq!(e.steps, 3);
}

#[test]
fn a_missing_device_does_not_count_in_the_width() {
    let l = raid0_then_add(2, 4 * GIB);
    let mut m = members(4);
    m[3].present = false;
    let p = plan::plan(&l, &m).unwrap();
    assert!(p.steps.is_empty(), "{:?}", p.steps);
}
