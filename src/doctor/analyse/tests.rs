use super::*;
use crate::doctor::facts::{BalanceFacts, DeviceFacts, ErrorCounts, SpaceUse};
use crate::doctor::scrub::ScrubDevice;
use crate::model::finding::Severity;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const NOW: u64 = 1_764_546_067;

pub(crate) fn dev(devid: u64, size: u64, allocated: u64) -> DeviceFacts {
    DeviceFacts {
        devid,
        path: format!("/dev/loop{devid}"),
        missing: false,
        size_bytes: size,
        allocated_bytes: allocated,
        errors: Some(ErrorCounts::default()),
        dev_uuid: None,
        drives: Vec::new(),
        discard_max_bytes: None,
        scrub_speed_max: Some(0),
        scrub_speed_max_by: None,
        state: Default::default(),
        state_since: None,
        state_new: false,
        generation: None,
        errors_before: None,
    }
}

fn space(bg_type: BgType, profile: Profile, total: u64, used: u64) -> SpaceUse {
    SpaceUse {
        bg_type,
        profile,
        total_bytes: total,
        used_bytes: used,
    }
}

/// Three 10 GiB devices, data raid0, metadata raid1c3, recently scrubbed.
fn healthy() -> FsFacts {
    FsFacts {
        mount_point: "/mnt".into(),
        uuid: "u".into(),
        label: None,
        mount_options: "rw,relatime".into(),
        kernel: "6.12".into(),
        features: vec!["raid1c34".into()],
        total_devices: 3,
        devices: vec![
            dev(1, 10 * GIB, 2 * GIB),
            dev(2, 10 * GIB, 2 * GIB),
            dev(3, 10 * GIB, 2 * GIB),
        ],
        spaces: vec![
            space(BgType::Data, Profile::Raid0, 5 * GIB, 4 * GIB),
            space(BgType::Metadata, Profile::Raid1c3, GIB, 100 * MIB),
            space(BgType::System, Profile::Raid1c3, 8 * MIB, 16 << 10),
            space(BgType::GlobalReserve, Profile::Single, 16 * MIB, 0),
        ],
        metadata_chunk_bytes: 256 * MIB,
        balance: None,
        scrub: vec![ScrubDevice {
            devid: 1,
            started: NOW - 86_400,
            duration: 60,
            finished: true,
            ..ScrubDevice::default()
        }],
        data_chunks: None,
        fstab: None,
        fstrim_timer: false,
        scrub_timer: None,
        scrub_running: None,
        read_policy: None,
        exclusive_operation: None,
        hugepages_left: None,
        narrow_data: None,
        generation: None,
        last_look: None,
    }
}

fn codes(v: &[Finding]) -> Vec<(&'static str, Severity)> {
    v.iter().map(|f| (f.code.as_str(), f.severity)).collect()
}

#[test]
fn healthy_raid0_only_says_data_has_no_redundancy() {
    let v = analyse(&healthy(), NOW);
    // And that its raid1c3 metadata needs Linux 5.5 to mount.
    assert_eq!(
        codes(&v),
        [
            ("data-no-redundancy", Severity::Info),
            ("oldest-kernel", Severity::Info)
        ]
    );
}

#[test]
fn corruption_is_critical_without_redundancy_and_a_warning_with_it() {
    let mut f = healthy();
    f.devices[1].errors = Some(ErrorCounts {
        corruption: 204_784,
        ..ErrorCounts::default()
    });
    let v = analyse(&f, NOW);
    assert_eq!(v[0].code, "device-errors-no-redundancy");
    assert_eq!(v[0].severity, Severity::Critical);
    assert!(
        v[0].evidence
            .iter()
            .any(|e| e.name == "corruption errors" && e.value == "204784")
    );
    assert!(v[0].why.contains("scrub cannot repair"), "{}", v[0].why);

    f.spaces[0].profile = Profile::Raid1;
    let v = analyse(&f, NOW);
    assert_eq!(
        codes(&v),
        [
            ("device-errors", Severity::Warning),
            ("oldest-kernel", Severity::Info)
        ]
    );
    // A loop device is not a drive: smartctl is pointed at the disk behind it.
    let run = v[0].command.as_deref().unwrap();
    assert!(run.contains("smartctl -a /dev/loop2"), "{run}");
    f.devices[1].drives = vec!["/dev/vda".into()];
    let v = analyse(&f, NOW);
    let run = v[0].command.as_deref().unwrap();
    assert!(
        run.contains("check the drive: smartctl -a /dev/vda")
            && !run.contains("smartctl -a /dev/loop"),
        "{run}"
    );
    f.devices[1].drives = vec!["/dev/sda".into(), "/dev/sdb".into()];
    let v = analyse(&f, NOW);
    let run = v[0].command.as_deref().unwrap();
    assert!(
        run.contains("check the drives: smartctl -a /dev/sda; smartctl -a /dev/sdb"),
        "{run}"
    );
}

#[test]
fn no_room_for_a_metadata_chunk_is_found_per_profile() {
    let mut f = healthy();
    // raid1c3 needs three devices with 256 MiB; one has only 100 MiB left.
    f.devices[2].allocated_bytes = 10 * GIB - 100 * MIB;
    let v = analyse(&f, NOW);
    let fi = v
        .iter()
        .find(|x| x.code == "metadata-chunk-no-room")
        .unwrap();
    // The kernel makes a smaller chunk from the 100 MiB, and metadata is
    // 11% used of what it can grow to: info, and nothing to run.
    assert_eq!(fi.severity, Severity::Info);
    assert!(fi.command.is_none(), "{fi:?}");
    assert!(fi.why.contains("smaller chunk"), "{}", fi.why);
    assert!(
        fi.title.contains("3 device(s)") && fi.title.contains("2 have it"),
        "{}",
        fi.title
    );
    // The same devices hold a raid1 chunk.
    f.spaces[1].profile = Profile::Raid1;
    f.spaces[2].profile = Profile::Raid1;
    assert!(
        !analyse(&f, NOW)
            .iter()
            .any(|x| x.code == "metadata-chunk-no-room")
    );
    // ... but not a DUP chunk on a single device with 400 MiB.
    let mut one = healthy();
    one.devices = vec![dev(1, 10 * GIB, 10 * GIB - 400 * MIB)];
    one.total_devices = 1;
    one.spaces[1].profile = Profile::Dup;
    one.spaces[0].profile = Profile::Single;
    let v = analyse(&one, NOW);
    assert!(
        v.iter().any(|x| x.code == "metadata-chunk-no-room"),
        "{v:?}"
    );
}

#[test]
fn nearly_full_metadata_with_the_reserve_in_use_is_critical() {
    let mut f = healthy();
    for d in &mut f.devices {
        d.allocated_bytes = d.size_bytes;
    }
    f.spaces[1].used_bytes = GIB - 2 * MIB;
    f.spaces[3].used_bytes = 12 * MIB;
    let v = analyse(&f, NOW);
    let c = codes(&v);
    assert!(
        c.contains(&("metadata-chunk-no-room", Severity::Critical)),
        "{c:?}"
    );
    // One situation, one finding: no second "nearly full" beside it.
    assert!(!c.iter().any(|x| x.0 == "metadata-nearly-full"), "{c:?}");
    assert!(
        c.contains(&("global-reserve-used", Severity::Critical)),
        "{c:?}"
    );
    assert_eq!(v[0].severity, Severity::Critical);
}

#[test]
fn a_little_reserve_in_use_with_room_is_only_info() {
    let mut f = healthy();
    f.spaces[3].used_bytes = 16 << 10;
    assert!(codes(&analyse(&f, NOW)).contains(&("global-reserve-used", Severity::Info)));
    f.spaces[3].used_bytes = 5 * MIB;
    assert!(codes(&analyse(&f, NOW)).contains(&("global-reserve-used", Severity::Warning)));
}

#[test]
fn data_fullness_counts_what_it_can_still_grow_to() {
    let mut f = healthy();
    // 4 of 5 GiB used, 24 GiB unallocated: 4/29, fine.
    assert!(
        !analyse(&f, NOW)
            .iter()
            .any(|x| x.code == "data-nearly-full")
    );
    for d in &mut f.devices {
        d.allocated_bytes = d.size_bytes - 8 * MIB;
    }
    f.spaces[0].used_bytes = 5 * GIB - 10 * MIB;
    let v = analyse(&f, NOW);
    let fi = v.iter().find(|x| x.code == "data-nearly-full").unwrap();
    assert_eq!(fi.severity, Severity::Critical, "{fi:?}");
    f.spaces[0].used_bytes = 47 * GIB / 10;
    let v = analyse(&f, NOW);
    let fi = v.iter().find(|x| x.code == "data-nearly-full").unwrap();
    assert_eq!(fi.severity, Severity::Warning, "{fi:?}");
}

#[test]
fn paused_conversion_and_mixed_profiles() {
    let mut f = healthy();
    f.spaces
        .insert(1, space(BgType::Data, Profile::Single, GIB, GIB / 2));
    let v = analyse(&f, NOW);
    let fi = v.iter().find(|x| x.code == "mixed-profiles").unwrap();
    assert_eq!(fi.severity, Severity::Warning);
    assert_eq!(
        fi.command.as_deref(),
        Some("btrfs-lab convert --data raid0 /mnt")
    );
    f.balance = Some(BalanceFacts {
        running: false,
        data_target: Some(Profile::Raid0),
        metadata_target: None,
        expected: 10,
        completed: 4,
    });
    let v = analyse(&f, NOW);
    let fi = v.iter().find(|x| x.code == "balance-paused").unwrap();
    assert_eq!(fi.severity, Severity::Warning);
    assert!(fi.title.contains("data to raid0"), "{}", fi.title);
}

#[test]
fn layout_findings() {
    let mut f = healthy();
    f.spaces[1].profile = Profile::Dup;
    let c = codes(&analyse(&f, NOW))
        .into_iter()
        .map(|x| x.0)
        .collect::<Vec<_>>();
    assert!(c.contains(&"metadata-one-device"), "{c:?}");
    f.spaces[1].profile = Profile::Raid6;
    let c = codes(&analyse(&f, NOW))
        .into_iter()
        .map(|x| x.0)
        .collect::<Vec<_>>();
    assert!(c.contains(&"metadata-raid56"), "{c:?}");
    f.kernel = "6.1.0-28-amd64".into();
    let c = codes(&analyse(&f, NOW))
        .into_iter()
        .map(|x| x.0)
        .collect::<Vec<_>>();
    assert!(c.contains(&"kernel-too-old"), "{c:?}");
}

#[test]
fn missing_device_and_degraded_mount() {
    let mut f = healthy();
    f.total_devices = 4;
    f.mount_options = "rw,relatime,degraded".into();
    let c = codes(&analyse(&f, NOW));
    assert!(c.contains(&("device-missing", Severity::Critical)), "{c:?}");
    assert!(c.contains(&("mount-degraded", Severity::Critical)), "{c:?}");
}

/// A missing device pages; the INFO findings beside it are left out, but
/// for those about getting the array back.
#[test]
fn a_missing_device_leaves_the_info_noise_out() {
    let mut f = healthy();
    f.scrub.clear();
    let c = codes(&analyse(&f, NOW));
    assert_eq!(
        c,
        [
            ("data-no-redundancy", Severity::Info),
            ("scrub-never-run", Severity::Info),
            ("oldest-kernel", Severity::Info)
        ]
    );
    f.total_devices = 4;
    assert_eq!(
        codes(&analyse(&f, NOW)),
        [("device-missing", Severity::Critical)]
    );
    // A replace or balance running is what a user wants to see then.
    f.balance = Some(BalanceFacts {
        running: true,
        data_target: None,
        metadata_target: None,
        expected: 10,
        completed: 4,
    });
    assert_eq!(
        codes(&analyse(&f, NOW)),
        [
            ("device-missing", Severity::Critical),
            ("balance-running", Severity::Info)
        ]
    );
    // Warnings stay.
    f.devices[1].errors = Some(ErrorCounts {
        write: 3,
        ..ErrorCounts::default()
    });
    f.spaces[0].profile = Profile::Raid1;
    let c = codes(&analyse(&f, NOW));
    assert!(c.contains(&("device-errors", Severity::Warning)), "{c:?}");
    // The same rule for the findings added later (--deep, leftovers).
    let mut d = crate::doctor::diagnose(f, NOW);
    crate::doctor::add_findings(
        &mut d,
        vec![Finding::new(Code::OdirectInconclusive, "t", "w")],
    );
    assert!(
        !d.findings
            .iter()
            .any(|x| x.code == Code::OdirectInconclusive)
    );
}

/// Counters a finished, recent, clean scrub left nothing of: the advice is
/// the reset, no longer a scrub; anything that spoils the scrub brings the
/// scrub back.
#[test]
fn errors_a_scrub_since_repaired_ask_for_the_reset() {
    let mut f = healthy();
    f.spaces[0].profile = Profile::Raid1;
    f.devices[1].errors = Some(ErrorCounts {
        corruption: 12,
        ..ErrorCounts::default()
    });
    let clean = |devid| ScrubDevice {
        devid,
        started: NOW - 3_600,
        duration: 60,
        finished: true,
        ..ScrubDevice::default()
    };
    f.scrub = vec![clean(1), clean(2), clean(3)];
    let v = analyse(&f, NOW);
    assert_eq!(codes(&v)[0], ("device-errors-repaired", Severity::Warning));
    assert!(
        v[0].title.contains("repaired: reset the counters"),
        "{}",
        v[0].title
    );
    let run = v[0].command.as_deref().unwrap();
    assert!(run.starts_with("btrfs device stats -z /mnt"), "{run}");
    assert!(!run.contains("scrub"), "{run}");
    assert!(
        v[0].evidence
            .iter()
            .any(|e| e.name == "corruption errors" && e.value == "12")
    );
    // Found and corrected by the scrub itself: repaired too.
    f.scrub[1].errors_found = 12;
    f.scrub[1].corrected = 12;
    assert_eq!(codes(&analyse(&f, NOW))[0].0, "device-errors-repaired");
    // Without redundancy: the blocks the counters name are gone or were
    // restored once a scrub finds nothing it cannot repair.
    f.spaces[0].profile = Profile::Raid0;
    assert_eq!(codes(&analyse(&f, NOW))[0].0, "device-errors-repaired");
    f.spaces[0].profile = Profile::Raid1;
    type Spoil = fn(&mut FsFacts);
    let spoiled: [(&str, Spoil); 6] = [
        ("uncorrectable", |f| f.scrub[2].uncorrectable = 1),
        ("read-only", |f| f.scrub[1].readonly = true),
        ("cancelled", |f| f.scrub[1].canceled = true),
        ("unfinished", |f| f.scrub[1].finished = false),
        ("not this device", |f| f.scrub.retain(|s| s.devid != 2)),
        ("older than 31 days", |f| {
            f.scrub
                .iter_mut()
                .for_each(|s| s.started = NOW - 40 * 86_400);
        }),
    ];
    for (what, spoil) in spoiled {
        let mut g = f.clone();
        spoil(&mut g);
        let v = analyse(&g, NOW);
        let fi = v
            .iter()
            .find(|x| x.code == "device-errors")
            .unwrap_or_else(|| panic!("{what}: {:?}", codes(&v)));
        assert!(
            fi.command
                .as_deref()
                .unwrap()
                .starts_with("btrfs-lab scrub /mnt"),
            "{what}: {:?}",
            fi.command
        );
        assert!(
            !codes(&v).iter().any(|c| c.0 == "device-errors-repaired"),
            "{what}"
        );
    }
    // A read-only scrub that found nothing repaired nothing and needed not.
    let mut g = f.clone();
    g.scrub.iter_mut().for_each(|s| {
        s.readonly = true;
        s.errors_found = 0;
    });
    assert_eq!(codes(&analyse(&g, NOW))[0].0, "device-errors-repaired");
    // The counters reset: nothing left.
    f.devices[1].errors = Some(ErrorCounts::default());
    let c = codes(&analyse(&f, NOW));
    assert!(!c.iter().any(|c| c.0.starts_with("device-errors")), "{c:?}");
}

#[test]
fn scrub_age_and_errors() {
    let mut f = healthy();
    f.scrub.clear();
    assert!(codes(&analyse(&f, NOW)).contains(&("scrub-never-run", Severity::Info)));
    f.scrub = vec![ScrubDevice {
        devid: 1,
        started: NOW - 40 * 86_400,
        finished: true,
        errors_found: 3,
        corrected: 3,
        ..ScrubDevice::default()
    }];
    let c = codes(&analyse(&f, NOW));
    assert!(c.contains(&("scrub-old", Severity::Warning)), "{c:?}");
    assert!(c.contains(&("scrub-errors", Severity::Warning)), "{c:?}");
    f.scrub[0].uncorrectable = 1;
    assert!(codes(&analyse(&f, NOW)).contains(&("scrub-errors", Severity::Critical)));
}

/// Issue 54: overdue counts complete scrubs only (an interrupted one is
/// its own finding), at scrub --all's minimum age and a day, and its
/// command is the timer (enabled, or started), or the scrub itself
/// without systemd.
#[test]
fn an_overdue_scrub_names_the_timer_and_counts_complete_scrubs_only() {
    let command = |f: &FsFacts| {
        analyse(f, NOW)
            .into_iter()
            .find(|x| x.code.as_str() == "scrub-old")
            .map(|x| x.command.unwrap_or_default())
    };
    let mut f = healthy();
    let ended = |days: u64| ScrubDevice {
        devid: 1,
        started: NOW - days * 86_400,
        finished: true,
        ..ScrubDevice::default()
    };
    f.scrub = vec![ended(30)];
    assert_eq!(
        command(&f),
        None,
        "30 days: not due yet (the timer runs daily)"
    );
    f.scrub = vec![ended(32)];
    let direct = command(&f).unwrap();
    assert!(
        direct.starts_with("btrfs-lab scrub "),
        "without systemd: {direct}"
    );
    f.scrub_timer = Some(false);
    assert_eq!(
        command(&f).as_deref(),
        Some("systemctl enable --now btrfs-lab-scrub.timer")
    );
    f.scrub_timer = Some(true);
    assert_eq!(
        command(&f).as_deref(),
        Some("systemctl start btrfs-lab-scrub.service")
    );
    // The last scrub was interrupted: not "overdue", interrupted.
    f.scrub[0].finished = false;
    f.scrub[0].canceled = true;
    let c = codes(&analyse(&f, NOW));
    assert!(!c.iter().any(|(code, _)| *code == "scrub-old"), "{c:?}");
    assert!(
        c.iter().any(|(code, _)| *code == "scrub-interrupted"),
        "{c:?}"
    );
    assert!(
        !c.iter().any(|(code, _)| *code == "scrub-never-run"),
        "{c:?}"
    );
    // The catalog reads the name as the same code.
    assert_eq!(
        crate::model::finding::Code::from_name("scrub-overdue").map(|c| c.as_str()),
        Some("scrub-old")
    );
}

/// The same numbers through `df`'s analyser (`space::findings::interpret`,
/// which `usage` and both `--parse` share) and doctor's: the codes both
/// emit get the same severity, from the catalog's one rule.
#[test]
fn df_and_doctor_give_the_same_severity_for_the_same_numbers() {
    use crate::model::finding::Code;
    use crate::model::space::{BgProfile, SpaceRecord};
    use crate::space::findings::{SpaceFacts, interpret};

    fn severity(v: &[Finding], code: Code) -> Option<Severity> {
        v.iter().find(|f| f.code == code).map(|f| f.severity)
    }
    // The facts as doctor reads them, and as `df` records of two devices.
    let both = |spaces: Vec<SpaceUse>, code: Code| -> (Option<Severity>, Option<Severity>) {
        let mut f = healthy();
        f.devices.truncate(2);
        f.total_devices = 2;
        f.spaces = spaces;
        let records: Vec<SpaceRecord> = f
            .spaces
            .iter()
            .map(|s| {
                SpaceRecord::exact(
                    s.bg_type,
                    BgProfile::Known(s.profile),
                    s.total_bytes,
                    s.used_bytes,
                    None,
                )
            })
            .collect();
        let unallocated: Vec<i64> = f.present().map(|d| d.unallocated_bytes() as i64).collect();
        let df = interpret(&SpaceFacts {
            records: &records,
            unallocated: Some(unallocated),
            devices: Some(2),
            ..Default::default()
        });
        (
            severity(&df.findings, code),
            severity(&analyse(&f, NOW), code),
        )
    };
    let meta = |used| space(BgType::Metadata, Profile::Raid1, GIB, used);
    let reserve = |used| space(BgType::GlobalReserve, Profile::Single, 512 * MIB, used);
    let data = |p| space(BgType::Data, p, 5 * GIB, 4 * GIB);

    // A deliberate RAID0 (and single data over two devices): info in both,
    // never a warning that `df` printed before while doctor said info.
    for p in [Profile::Raid0, Profile::Single] {
        let (df, doctor) = both(
            vec![data(p), meta(100 * MIB), reserve(0)],
            Code::DataNoRedundancy,
        );
        assert_eq!(df, Some(Severity::Info), "{p}");
        assert_eq!(doctor, df, "{p}");
    }
    // The global reserve in use: a few KiB (info), a quarter (warning),
    // half (critical); a little with the metadata chunks full but 8 GiB
    // unallocated for new ones is not tight (info).
    for (meta_used, used, want) in [
        (100 * MIB, 96 << 10, Severity::Info),
        (100 * MIB, 128 * MIB, Severity::Warning),
        (100 * MIB, 300 * MIB, Severity::Critical),
        (950 * MIB, 96 << 10, Severity::Info),
    ] {
        let (df, doctor) = both(
            vec![data(Profile::Raid1), meta(meta_used), reserve(used)],
            Code::GlobalReserveUsed,
        );
        assert_eq!(df, Some(want), "metadata {meta_used}, reserve {used}");
        assert_eq!(doctor, df, "metadata {meta_used}, reserve {used}");
    }
    // No redundancy anywhere on one device: nothing in either.
    let mut one = healthy();
    one.devices.truncate(1);
    one.total_devices = 1;
    one.spaces = vec![
        space(BgType::Data, Profile::Single, 5 * GIB, 4 * GIB),
        space(BgType::Metadata, Profile::Dup, GIB, 100 * MIB),
    ];
    assert_eq!(severity(&analyse(&one, NOW), Code::DataNoRedundancy), None);
}

/// The fstab fixtures (real reports, `tests/fixtures/fstab/PROVENANCE.md`)
/// as doctor audits them for a filesystem of their UUID or device.
fn with_fstab(uuid: &str, members: &[&str], file: &str, devices: u64) -> Vec<Finding> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/fstab")
            .join(file),
    )
    .unwrap();
    let mut f = healthy();
    f.uuid = uuid.into();
    f.devices.truncate(devices as usize);
    for (d, m) in f.devices.iter_mut().zip(members) {
        d.path = (*m).into();
    }
    f.total_devices = devices;
    f.spaces[1].profile = Profile::Raid1;
    f.spaces[2].profile = Profile::Raid1;
    let members: Vec<String> = members.iter().map(|m| (*m).to_owned()).collect();
    let entries = crate::doctor::fstab::parse(&text)
        .into_iter()
        .filter(|e| crate::doctor::fstab::is_for(e, uuid, None, "/nowhere", &members, None))
        .collect();
    f.fstab = Some(crate::doctor::fstab::FstabFacts {
        path: "/etc/fstab".into(),
        entries,
    });
    analyse(&f, NOW)
}

#[test]
fn fstab_audits_on_real_reports() {
    // systemd 6605: a two-device btrfs named by one member's kernel name.
    let v = with_fstab(
        "u-6605",
        &["/dev/sda5", "/dev/sdb5"],
        "systemd-6605-device-name.fstab",
        2,
    );
    let x = v.iter().find(|x| x.code == "fstab-device-name").unwrap();
    assert_eq!(x.severity, Severity::Warning);
    assert!(x.why.contains("systemd issue 6605"), "{}", x.why);
    assert!(
        x.evidence.iter().any(|e| e.name == "write instead"
            && e.value == "UUID=u-6605\t/srv\tbtrfs\tnoatime,nodiratime\t0\t0"),
        "{x:?}"
    );
    // systemd 795 and 36886: degraded in fstab, by UUID.
    for (uuid, file) in [
        (
            "f6794702-6f65-4bd0-b117-a400cc6c0139",
            "systemd-795-degraded-nofail.fstab",
        ),
        (
            "9ad861cc-3eac-42b9-b446-a82525d6369f",
            "systemd-36886-degraded.fstab",
        ),
    ] {
        let v = with_fstab(uuid, &["/dev/vdb1", "/dev/vdc1"], file, 2);
        let c = codes(&v);
        assert!(
            c.contains(&("fstab-degraded", Severity::Warning)),
            "{file}: {c:?}"
        );
        assert!(
            !c.iter().any(|x| x.0 == "fstab-device-name"),
            "{file}: {c:?}"
        );
        let d = v.iter().find(|x| x.code == "fstab-degraded").unwrap();
        assert!(
            d.evidence
                .iter()
                .any(|e| e.name == "options without it" && !e.value.contains("degraded")),
            "{d:?}"
        );
    }
    // Another filesystem's entries are not this one's.
    let v = with_fstab(
        "someone-else",
        &["/dev/vdb1"],
        "systemd-36886-degraded.fstab",
        1,
    );
    assert!(!codes(&v).iter().any(|x| x.0.starts_with("fstab-")));
    // The generated multi-device root: no timeout is info, /home is fine,
    // ext4 /boot and swap are not looked at.
    let v = with_fstab(
        "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
        &["/dev/nvme0n1p2", "/dev/nvme1n1p2"],
        "generated-raid1-root.fstab",
        2,
    );
    let fstab: Vec<_> = codes(&v)
        .into_iter()
        .filter(|x| x.0.starts_with("fstab-"))
        .collect();
    assert_eq!(fstab, [("fstab-no-device-timeout", Severity::Info)]);
    // A single-device root needs no timeout.
    let v = with_fstab(
        "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
        &["/dev/nvme0n1p2"],
        "generated-raid1-root.fstab",
        1,
    );
    assert!(!codes(&v).iter().any(|x| x.0.starts_with("fstab-")));
}

#[test]
fn mount_option_and_kernel_audits() {
    let mut f = healthy();
    // discard=async and the timer: fstrim skips what async discard
    // trimmed, nothing to say; synchronous discard and the timer: info.
    f.mount_options = "rw,relatime,ssd,discard=async,space_cache=v2,subvolid=5,subvol=/".into();
    f.fstrim_timer = true;
    let v = analyse(&f, NOW);
    assert!(!codes(&v).iter().any(|x| x.0 == "discard-twice"));
    assert!(!codes(&v).iter().any(|x| x.0 == "space-cache-v1"));
    f.mount_options = "rw,relatime,ssd,discard,space_cache=v2,subvolid=5,subvol=/".into();
    let v = analyse(&f, NOW);
    let d = v.iter().find(|x| x.code == "discard-twice").unwrap();
    assert_eq!(d.severity, Severity::Info);
    assert_eq!(
        d.command.as_deref(),
        Some("mount -o remount,discard=async /mnt")
    );
    f.fstrim_timer = false;
    assert!(
        !codes(&analyse(&f, NOW))
            .iter()
            .any(|x| x.0 == "discard-twice")
    );
    f.fstrim_timer = true;
    f.mount_options = "rw,relatime,ssd_spread,space_cache,subvolid=5,subvol=/".into();
    let c = codes(&analyse(&f, NOW));
    assert!(c.contains(&("ssd-spread", Severity::Info)), "{c:?}");
    assert!(c.contains(&("space-cache-v1", Severity::Warning)), "{c:?}");
    assert!(
        !c.iter().any(|x| x.0 == "discard-twice"),
        "nodiscard: {c:?}"
    );
    // raid1c34 (the fixture's metadata): Linux 5.5, newer than a 5.4
    // rescue system; block_group_tree: 6.1, 5.5 still mounts it read-only.
    let v = analyse(&healthy(), NOW);
    let k = v.iter().find(|x| x.code == "oldest-kernel").unwrap();
    assert!(k.title.contains("Linux 5.5"), "{}", k.title);
    let mut f = healthy();
    f.features = vec![
        "raid1c34".into(),
        "block_group_tree".into(),
        "no_holes".into(),
    ];
    let v = analyse(&f, NOW);
    let k = v.iter().find(|x| x.code == "oldest-kernel").unwrap();
    assert!(k.title.contains("Linux 6.1"), "{}", k.title);
    assert!(k.why.contains("Linux 5.5 mounts it read-only"), "{}", k.why);
    f.features = vec!["no_holes".into(), "free_space_tree".into()];
    assert!(
        !codes(&analyse(&f, NOW))
            .iter()
            .any(|x| x.0 == "oldest-kernel")
    );
}

#[test]
fn read_policy_and_discard_support_audits() {
    let mut f = healthy();
    f.spaces[0].profile = Profile::Raid1;
    f.read_policy = Some("[pid] round-robin devid:1".into());
    let v = analyse(&f, NOW);
    let r = v.iter().find(|x| x.code == "raid1-read-policy").unwrap();
    assert_eq!(r.severity, Severity::Info);
    assert!(r.command.is_none(), "a sysfs write, not a command: {r:?}");
    assert!(
        r.evidence.iter().any(|e| e.name == "to change it (as root)"
            && e.value == "write round-robin to /sys/fs/btrfs/u/read_policy"),
        "{r:?}"
    );
    // Already round-robin, or RAID0 data: nothing to say.
    f.read_policy = Some("pid [round-robin] devid:1".into());
    assert!(
        !codes(&analyse(&f, NOW))
            .iter()
            .any(|x| x.0 == "raid1-read-policy")
    );
    f.read_policy = Some("[pid]".into());
    let v = analyse(&f, NOW);
    let r = v.iter().find(|x| x.code == "raid1-read-policy").unwrap();
    assert!(r.why.contains("no other policy"), "{r:?}");
    f.spaces[0].profile = Profile::Raid0;
    assert!(
        !codes(&analyse(&f, NOW))
            .iter()
            .any(|x| x.0 == "raid1-read-policy")
    );

    // discard on a member that takes none: info, naming it.
    let mut f = healthy();
    f.mount_options = "rw,relatime,discard=async,space_cache=v2".into();
    f.devices[1].discard_max_bytes = Some(0);
    f.devices[2].discard_max_bytes = Some(2 << 30);
    let v = analyse(&f, NOW);
    let d = v.iter().find(|x| x.code == "discard-unsupported").unwrap();
    assert!(d.title.contains("/dev/loop2"), "{}", d.title);
    assert!(!d.title.contains("/dev/loop3"), "{}", d.title);
    f.mount_options = "rw,relatime,nodiscard,space_cache=v2".into();
    assert!(
        !codes(&analyse(&f, NOW))
            .iter()
            .any(|x| x.0 == "discard-unsupported")
    );
}

/// raid0 written on three devices (1.25 GiB), 1 GiB on all four after the
/// fourth was added.
fn narrow_raid0() -> crate::doctor::widths::NarrowData {
    use crate::balance::plan::{Kind, Share, Spread, Width};
    crate::doctor::widths::NarrowData {
        spread: Spread {
            kind: Kind::Data,
            profile: Profile::Raid0,
            chunks: 3,
            used_bytes: 2304 * MIB,
            devices: (1..=4)
                .map(|devid| Share {
                    devid,
                    allocated: if devid == 4 { 256 * MIB } else { 768 * MIB },
                })
                .collect(),
            widths: vec![
                Width {
                    stripes: 3,
                    chunks: 2,
                    used_bytes: 1280 * MIB,
                },
                Width {
                    stripes: 4,
                    chunks: 1,
                    used_bytes: GIB,
                },
            ],
            full_width: Some(4),
            read_stripes: (1280.0 * 3.0 + 1024.0 * 4.0) / 2304.0,
        },
        read_stripes_after: Some(4.0),
        full_ceiling_bytes_per_sec: None,
    }
}

#[test]
fn data_in_narrow_chunks_names_its_bytes_width_ceiling_and_the_balance() {
    let mut f = healthy();
    f.total_devices = 4;
    f.devices.push(dev(4, 10 * GIB, 256 * MIB));
    f.narrow_data = Some(narrow_raid0());
    let v = analyse(&f, NOW);
    let fi = v.iter().find(|x| x.code == "data-narrow-chunks").unwrap();
    assert_eq!(fi.severity, Severity::Warning);
    assert!(fi.title.contains("1.25GiB of raid0"), "{}", fi.title);
    assert!(
        fi.title.ends_with("read from 3 devices, not 4"),
        "{}",
        fi.title
    );
    assert_eq!(fi.command.as_deref(), Some("btrfs-lab balance /mnt"));
    let ev = |name: &str| {
        fi.evidence
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.value.clone())
            .unwrap_or_else(|| panic!("no {name}: {:?}", fi.evidence))
    };
    assert_eq!(
        ev("data in narrow chunks"),
        "1.25GiB of 2.25GiB used (2 chunks)"
    );
    assert_eq!(ev("chunks of 3 stripes"), "1.25GiB used in 2");
    assert_eq!(ev("read width"), "3 devices, 4 at full width");
    assert_eq!(ev("all raid0 data"), "read from 3.4 devices on average");
    // Without link figures: the ratio alone.
    assert!(
        ev("read ceiling").starts_with("75% of the full width"),
        "{}",
        ev("read ceiling")
    );
    assert_eq!(ev("after the balance"), "read from 4 devices on average");
    // With them: the narrow data's share of the array's ceiling.
    let mut n = narrow_raid0();
    n.full_ceiling_bytes_per_sec = Some(16_000_000_000);
    f.narrow_data = Some(n);
    let v = analyse(&f, NOW);
    let fi = v.iter().find(|x| x.code == "data-narrow-chunks").unwrap();
    let ceiling = &fi
        .evidence
        .iter()
        .find(|e| e.name == "read ceiling")
        .unwrap()
        .value;
    assert!(
        ceiling.contains("(12.00 GB/s)") && ceiling.contains("(16.00 GB/s)"),
        "{ceiling}"
    );
    // A balance in progress has its own finding.
    f.balance = Some(BalanceFacts {
        running: true,
        data_target: None,
        metadata_target: None,
        expected: 3,
        completed: 1,
    });
    let v = analyse(&f, NOW);
    assert!(v.iter().all(|x| x.code != "data-narrow-chunks"));
    // None read: no finding.
    f.balance = None;
    f.narrow_data = None;
    assert!(
        analyse(&f, NOW)
            .iter()
            .all(|x| x.code != "data-narrow-chunks")
    );
}

/// A counter at UINT64_MAX (one operator's exporter showed a corruption
/// counter of 18446744073709551615) is invalid: named as such, left out of
/// the error counts and of the metrics, never added into an overflow.
#[test]
fn a_counter_at_uint64_max_is_invalid_not_errors() {
    let mut f = healthy();
    f.devices[1].errors = Some(ErrorCounts {
        corruption: u64::MAX,
        ..ErrorCounts::default()
    });
    f.devices[1].dev_uuid = Some("d2".into());
    let v = analyse(&f, NOW);
    let c = codes(&v);
    assert!(
        c.contains(&("device-stats-invalid", Severity::Warning)),
        "{c:?}"
    );
    assert!(c.iter().all(|x| !x.0.starts_with("device-errors")), "{c:?}");
    let inv = v.iter().find(|x| x.code == "device-stats-invalid").unwrap();
    assert!(
        inv.title.contains("corruption counter reads"),
        "{}",
        inv.title
    );
    // With real errors beside it: those are counted, the invalid one not.
    f.devices[1].errors = Some(ErrorCounts {
        read: 2,
        generation: u64::MAX,
        corruption: u64::MAX,
        ..ErrorCounts::default()
    });
    let v = analyse(&f, NOW);
    let e = v
        .iter()
        .find(|x| x.code == "device-errors-no-redundancy" || x.code == "device-errors")
        .unwrap();
    let ev: Vec<&str> = e.evidence.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(ev, ["read errors"], "{:?}", e.evidence);
    // The metrics: node_exporter's label names beside ours, the invalid
    // counter as its own series.
    let d = crate::doctor::diagnose(f, NOW);
    let text = crate::doctor::prometheus::render(&crate::doctor::report(vec![d], Vec::new(), NOW));
    assert!(
        text.contains("btrfs_lab_device_errors_total{mountpoint=\"/mnt\",uuid=\"u\",devid=\"2\",device=\"/dev/loop2\",btrfs_dev_uuid=\"d2\",kind=\"read\",type=\"read\"} 2\n"),
        "{text}"
    );
    assert!(
        !text.contains("kind=\"corruption\",type=\"corruption\"} 18"),
        "{text}"
    );
    assert!(
        text.contains("btrfs_lab_device_errors_invalid{mountpoint=\"/mnt\",uuid=\"u\",devid=\"2\",device=\"/dev/loop2\",btrfs_dev_uuid=\"d2\",kind=\"generation\",type=\"generation\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("btrfs_lab_space_used_bytes{mountpoint=\"/mnt\",uuid=\"u\",type=\"data\",profile=\"raid0\",block_group_type=\"data\",mode=\"raid0\"}"),
        "{text}"
    );
}

#[test]
fn a_read_only_superblock_under_a_read_write_mount_is_forced_read_only() {
    let mut f = healthy();
    // mountinfo's per-mount options, then the superblock's it adds.
    f.mount_options = "rw,relatime,ro,space_cache=v2,subvolid=5,subvol=/".into();
    let v = analyse(&f, NOW);
    assert_eq!(
        (v[0].code.as_str(), v[0].severity),
        ("forced-readonly", Severity::Critical),
        "{:?}",
        codes(&v)
    );
    assert!(
        v[0].command
            .as_deref()
            .unwrap()
            .starts_with("journalctl -k -g BTRFS")
    );
    // Mounted read-only on purpose: both say ro, nothing to report.
    f.mount_options = "ro,relatime,space_cache=v2".into();
    assert!(
        !codes(&analyse(&f, NOW))
            .iter()
            .any(|(c, _)| *c == "forced-readonly")
    );
}

#[test]
fn member_states_are_named_with_what_to_do_per_profile() {
    use crate::doctor::members::MemberState;
    let mut f = healthy();
    f.generation = Some(40);
    f.devices[2].state = MemberState::Vanished;
    f.devices[2].state_since = Some(NOW - 60);
    let v = analyse(&f, NOW);
    let gone = v.iter().find(|x| x.code == "device-vanished").unwrap();
    assert_eq!(gone.severity, Severity::Critical);
    // RAID0 data: no copy of what it held, rescue.
    assert!(
        gone.command
            .as_deref()
            .unwrap()
            .contains("btrfs-lab rescue"),
        "{gone:?}"
    );
    f.devices[2].state = MemberState::Stale;
    f.devices[2].generation = Some(31);
    let v = analyse(&f, NOW);
    let stale = v.iter().find(|x| x.code == "device-stale").unwrap();
    assert!(
        stale.title.contains("9 transactions behind"),
        "{}",
        stale.title
    );
    assert!(stale.command.as_deref().unwrap().ends_with("--device 3"));
    // Counters that rose since the last look: a warning, but info across
    // the 7.1 counting change.
    f.devices[2].state = MemberState::Present;
    f.devices[0].errors_before = Some(ErrorCounts::default());
    f.devices[0].errors = Some(ErrorCounts {
        write: 7,
        ..ErrorCounts::default()
    });
    for (then, now, sev) in [
        ("6.18", "6.18", Severity::Warning),
        ("6.12", "7.1", Severity::Info),
        ("7.1", "7.2", Severity::Warning),
    ] {
        f.last_look = Some(crate::doctor::facts::LastLook {
            at: NOW - 600,
            kernel: then.into(),
        });
        f.kernel = now.into();
        let v = analyse(&f, NOW);
        let r = v
            .iter()
            .find(|x| x.code == "device-errors-rising")
            .unwrap_or_else(|| panic!("{then} -> {now}: {:?}", codes(&v)));
        assert_eq!(r.severity, sev, "{then} -> {now}");
        assert!(r.title.contains("write +7"), "{}", r.title);
    }
}
