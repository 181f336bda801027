use super::*;
use crate::doctor::facts::{DeviceFacts, ErrorCounts, SpaceUse};
use crate::model::finding::Severity;
use crate::model::profile::Profile;

const GIB: u64 = 1 << 30;
const UUID: &str = "5e7a1f0c-3b2d-4c8e-9a61-0f2b3c4d5e6f";

fn dev(devid: u64) -> DeviceFacts {
    DeviceFacts {
        path: format!("/dev/nvme{devid}n1p2"),
        ..crate::doctor::analyse::tests::dev(devid, 100 * GIB, 10 * GIB)
    }
}

fn space(bg_type: BgType, profile: Profile) -> SpaceUse {
    SpaceUse {
        bg_type,
        profile,
        total_bytes: GIB,
        used_bytes: GIB / 2,
    }
}

/// A single-device root made by mkfs.btrfs 5.15 or later (free space
/// tree, DUP metadata), data single, running 6.18.
fn root() -> FsFacts {
    FsFacts {
        mount_point: "/".into(),
        uuid: UUID.into(),
        label: None,
        mount_options: "rw,noatime,ssd,discard=async,space_cache=v2,subvolid=256,subvol=/@".into(),
        kernel: "6.18".into(),
        features: [
            "extended_iref",
            "skinny_metadata",
            "no_holes",
            "free_space_tree",
        ]
        .map(String::from)
        .to_vec(),
        total_devices: 1,
        devices: vec![dev(1)],
        spaces: vec![
            space(BgType::Data, Profile::Single),
            space(BgType::Metadata, Profile::Dup),
            space(BgType::System, Profile::Dup),
        ],
        metadata_chunk_bytes: 256 << 20,
        balance: None,
        scrub: Vec::new(),
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

/// The same root with the v1 cache: no free space tree, `space_cache`.
fn v1_root() -> FsFacts {
    let mut f = root();
    f.mount_options = "rw,noatime,ssd,space_cache,subvolid=256,subvol=/@".into();
    f.features.retain(|x| x != "free_space_tree");
    f
}

fn with_fixture(mut f: FsFacts, file: &str) -> FsFacts {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/fstab")
            .join(file),
    )
    .unwrap();
    let mount = f.mount_point.display().to_string();
    let entries = crate::doctor::fstab::parse(&text)
        .into_iter()
        .filter(|e| crate::doctor::fstab::is_for(e, UUID, None, &mount, &[], None))
        .collect();
    f.fstab = Some(crate::doctor::fstab::FstabFacts {
        path: "/etc/fstab".into(),
        entries,
    });
    f
}

fn plan(f: &FsFacts, running: &str, target: &str, cmdline: Option<&str>) -> Vec<Finding> {
    findings(
        f,
        &Upgrade {
            target,
            running,
            cmdline,
        },
    )
}

fn codes(v: &[Finding]) -> Vec<(&'static str, Severity)> {
    v.iter().map(|f| (f.code.as_str(), f.severity)).collect()
}

fn evidence<'a>(f: &'a Finding, name: &str) -> Option<&'a str> {
    f.evidence
        .iter()
        .find(|e| e.name == name)
        .map(|e| e.value.as_str())
}

#[test]
fn a_modern_filesystem_changes_in_nothing_but_o_direct() {
    let f = root();
    // Same minor, patch releases, and 6.12 (a downgrade the features allow).
    for target in ["6.18", "6.18.60"] {
        assert!(plan(&f, "6.18.44-fc-v1300", target, None).is_empty());
    }
    // 7.3 bounces checksummed O_DIRECT writes (probe-dio's table).
    let v = plan(&f, "6.18.44-fc-v1300", "7.3", None);
    assert_eq!(
        codes(&v),
        [
            ("upgrade-odirect", Severity::Info),
            ("upgrade-error-counters", Severity::Info)
        ]
    );
    let dio = &v[0];
    assert_eq!(
        evidence(dio, "checksummed files"),
        Some("buffered-fallback on 6.18.44-fc-v1300 → direct-bounced on 7.3")
    );
    // NOCOW files on single data are direct everywhere: not a change.
    assert_eq!(evidence(dio, "NOCOW files"), None);
    assert!(dio.why.contains("not measured"), "{}", dio.why);
}

#[test]
fn v1_space_cache_on_7_3_says_what_happens_and_how_to_convert() {
    let f = v1_root();
    // Before 7.3 nothing changes for the cache.
    for target in ["6.12", "7.0", "7.2.13"] {
        let v = plan(&f, "6.18.44", target, None);
        assert!(
            !v.iter().any(|x| x.code == Code::UpgradeSpaceCacheV1),
            "{target}: {:?}",
            codes(&v)
        );
    }
    for target in ["7.3", "7.3.4", "7.4", "8.0"] {
        let v = plan(&f, "6.18.44", target, None);
        let fi = v
            .iter()
            .find(|x| x.code == Code::UpgradeSpaceCacheV1)
            .unwrap_or_else(|| panic!("{target}: {:?}", codes(&v)));
        assert_eq!(fi.severity, Severity::Warning);
        // Not in fstab: 7.3 keeps the on-disk cache; the change after it drops it.
        assert!(fi.why.contains("545e560a5b0f") && fi.why.contains("fab81e9b9326"));
        assert!(fi.why.contains("neither converts"), "{}", fi.why);
        assert_eq!(
            fi.command.as_deref(),
            Some("mount -o clear_cache,space_cache=v2 /dev/nvme1n1p2 /")
        );
    }
    // Already on 7.3: the space-cache-v1 audit says it; nothing changes.
    assert!(
        !plan(&f, "7.3.4+deb13-amd64", "7.4", None)
            .iter()
            .any(|x| x.code == Code::UpgradeSpaceCacheV1)
    );
    // A filesystem with the free space tree has nothing to convert.
    assert!(
        !plan(&root(), "6.18.44", "7.3", None)
            .iter()
            .any(|x| x.code == Code::UpgradeSpaceCacheV1)
    );
}

#[test]
fn fstab_and_rootflags_options_are_named_with_what_to_write() {
    let f = with_fixture(v1_root(), "generated-upgrade-v1-usebackuproot.fstab");
    assert_eq!(f.fstab.as_ref().unwrap().entries.len(), 2, "/ and /home");
    let cmdline = "BOOT_IMAGE=/@/boot/vmlinuz-6.18.44 root=UUID=5e7a1f0c-3b2d-4c8e-9a61-0f2b3c4d5e6f ro rootflags=subvol=@,usebackuproot quiet";
    let v = plan(&f, "6.18.44", "7.3", Some(cmdline));
    assert_eq!(
        codes(&v)[..2],
        [
            ("upgrade-usebackuproot", Severity::Warning),
            ("upgrade-space-cache-v1", Severity::Warning),
        ]
    );
    let ubr = &v[0];
    assert_eq!(
        evidence(ubr, "/etc/fstab line 5").map(|l| l.split_whitespace().nth(3)),
        Some(Some("subvol=@,noatime,space_cache,usebackuproot"))
    );
    let without: Vec<&str> = ubr
        .evidence
        .iter()
        .filter(|e| e.name == "options for 7.3")
        .map(|e| e.value.as_str())
        .collect();
    // Both options 7.3 drops are out of the line either finding gives.
    assert_eq!(without, ["subvol=@,noatime", "subvol=@"]);
    assert_eq!(
        evidence(ubr, "kernel command line (/proc/cmdline)"),
        Some("rootflags=subvol=@,usebackuproot")
    );
    assert!(ubr.why.contains("ee2851074b4a") && ubr.why.contains("ro,rescue=usebackuproot"));
    // The explicit option: no cache at all on 7.3.
    let v1 = &v[1];
    assert!(v1.title.contains("no free space cache"), "{}", v1.title);
    assert!(v1.why.contains("fall back to nospace_cache"), "{}", v1.why);
    assert_eq!(evidence(v1, "options for 7.3"), Some("subvol=@,noatime"));
    // Before 7.3 usebackuproot still mounts.
    assert!(
        !plan(&f, "6.18.44", "7.2", Some(cmdline))
            .iter()
            .any(|x| x.code == Code::UpgradeUsebackuproot)
    );
    // rootflags= belongs to the root only; rescue=usebackuproot stays.
    let mut home = with_fixture(root(), "generated-upgrade-v1-usebackuproot.fstab");
    home.mount_point = "/home".into();
    home.fstab
        .as_mut()
        .unwrap()
        .entries
        .retain(|e| e.file == "/home");
    assert!(
        plan(&home, "6.18.44", "7.3", Some(cmdline))
            .iter()
            .all(|x| x.code != Code::UpgradeUsebackuproot)
    );
    let rescue = "root=UUID=x rootflags=ro,rescue=usebackuproot";
    assert!(
        plan(&root(), "6.18.44", "7.3", Some(rescue))
            .iter()
            .all(|x| x.code != Code::UpgradeUsebackuproot)
    );
}

#[test]
fn error_counters_only_when_the_upgrade_crosses_7_1() {
    let mut f = root();
    f.devices[0].errors = Some(ErrorCounts {
        read: 2,
        ..ErrorCounts::default()
    });
    let has = |running: &str, target: &str| {
        plan(&f, running, target, None)
            .iter()
            .any(|x| x.code == Code::UpgradeErrorCounters)
    };
    assert!(has("6.12.117+deb13-amd64", "7.1"));
    assert!(has("7.0.3", "7.3.4"));
    assert!(!has("6.12.117", "7.0"));
    assert!(!has("7.1.2", "7.3"));
    assert!(
        !has("7.3.4", "6.12"),
        "a downgrade counts less, nothing jumps"
    );
    let v = plan(&f, "6.18.44", "7.1", None);
    let fi = v
        .iter()
        .find(|x| x.code == Code::UpgradeErrorCounters)
        .unwrap();
    assert_eq!(evidence(fi, "errors counted now"), Some("2"));
    assert!(fi.why.contains("fc3d53288158"));
}

#[test]
fn an_older_target_that_lacks_features_cannot_mount_consistently_with_oldest_kernel() {
    let mut f = root();
    f.features.push("raid1c34".into());
    f.features.push("block_group_tree".into());
    let v = plan(&f, "6.18.44", "5.4", None);
    let fi = v
        .iter()
        .find(|x| x.code == Code::UpgradeCannotMount)
        .unwrap();
    assert_eq!(fi.severity, Severity::Critical);
    assert_eq!(
        evidence(fi, "features that need a newer kernel"),
        Some("raid1c34 (5.5), block_group_tree (6.1)")
    );
    // The same table as oldest-kernel: 6.1 is where it mounts read-write.
    assert_eq!(kernel::oldest_read_write(&f.features).0.to_string(), "6.1");
    assert!(fi.why.contains("Linux 6.1 or later"), "{}", fi.why);
    // 5.15: raid1c34 known, block_group_tree (compat_ro) not: read-only.
    let v = plan(&f, "6.18.44", "5.15", None);
    let fi = v
        .iter()
        .find(|x| x.code == Code::UpgradeCannotMount)
        .unwrap();
    assert_eq!(fi.severity, Severity::Warning);
    assert!(fi.title.contains("read-only"), "{}", fi.title);
    assert!(
        plan(&f, "6.18.44", "6.1", None)
            .iter()
            .all(|x| x.code != Code::UpgradeCannotMount)
    );
    // The remap tree (7.0): a 6.18 rescue kernel cannot mount it at all.
    let mut r = root();
    r.features.push("remap_tree".into());
    let v = plan(&r, "7.3.4", "6.18", None);
    assert_eq!(
        v.iter()
            .find(|x| x.code == Code::UpgradeCannotMount)
            .map(|x| x.severity),
        Some(Severity::Critical)
    );
}

#[test]
fn o_direct_on_copies_follows_the_probe_table() {
    let mut f = root();
    f.spaces[0].profile = Profile::Raid1;
    let v = plan(&f, "6.1.0-50-amd64", "7.2", None);
    let fi = v.iter().find(|x| x.code == Code::UpgradeOdirect).unwrap();
    assert_eq!(
        evidence(fi, "checksummed files"),
        Some("direct on 6.1.0-50-amd64 → profile-forced on 7.2")
    );
    assert_eq!(
        evidence(fi, "NOCOW files"),
        Some("direct on 6.1.0-50-amd64 → profile-forced on 7.2")
    );
    // One basis for both: the same commit.
    assert_eq!(fi.evidence.iter().filter(|e| e.name == "basis").count(), 1);
    // 6.12 without a patch level: the stable series is not told apart.
    let v = plan(&f, "6.1.0-50-amd64", "6.12", None);
    assert!(
        v.iter().all(|x| x.code != Code::UpgradeOdirect),
        "{:?}",
        codes(&v)
    );
}

#[test]
fn the_space_cache_v1_audit_says_disabled_on_7_3() {
    let mut f = v1_root();
    let why = |f: &FsFacts| {
        crate::doctor::analyse::analyse(f, 0)
            .into_iter()
            .find(|x| x.code == Code::SpaceCacheV1)
            .map(|x| x.why)
            .unwrap()
    };
    assert!(why(&f).contains("disabled from Linux 7.3"), "{}", why(&f));
    f.kernel = "7.3".into();
    assert!(
        why(&f).starts_with("this kernel disabled the v1 cache"),
        "{}",
        why(&f)
    );
}
