//! What the kernel version would lead one to expect of an O_DIRECT write on
//! btrfs: printed next to the measured verdict, never used to decide it (a
//! distribution backports fixes, patches the kernel or builds it without
//! what the version says). Pure code; the table is docs/rig.md's "What each
//! kernel does with O_DIRECT on btrfs", read from each kernel's btrfs
//! source.

use serde::{Deserialize, Serialize};

use super::verdict::Verdict;
use crate::model::profile::Profile;

/// The version's expectation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Expectation {
    /// The verdict the version leads one to expect; null when the version
    /// does not tell (a stable series that got the change in an update
    /// not identified here, an unparsable release).
    pub verdict: Option<Verdict>,
    /// Why, with the commits.
    pub basis: String,
    /// Whether the measured verdict is the expected one (null: nothing
    /// expected, or the measurement was inconclusive).
    pub agrees: Option<bool>,
}

/// Checksummed O_DIRECT writes fall back to buffered writes (upstream 6.15).
const CSUM_FALLBACK: &str =
    "968f19c5b1b7 (6.15: checksummed O_DIRECT writes fall back to buffered)";
/// O_DIRECT writes fall back when the data profile keeps copies.
const PROFILE_FALLBACK: &str =
    "7c2830f00c3e (profiles with copies fall back to buffered, NOCOW included)";
/// 7.3 bounces instead of falling back.
const BOUNCE: &str = "7.3's IOMAP_DIO_BOUNCE (checksummed files and profiles with copies are copied through a bounce buffer instead of falling back; btrfs-progs PR #1139)";

fn version(release: &str) -> Option<(u32, u32, u32)> {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

/// What kernel `release` leads one to expect on a filesystem of `fs_type`
/// with data `profiles`, for a directory that is NOCOW or not, and how the
/// `measured` verdict compares.
pub fn expect(
    release: &str,
    fs_type: &str,
    profiles: &[Profile],
    target_nocow: bool,
    measured: Verdict,
) -> Expectation {
    let (verdict, basis) = expected(release, fs_type, profiles, target_nocow);
    let agrees = match (verdict, measured) {
        (_, Verdict::Inconclusive) | (None, _) => None,
        (Some(v), m) => Some(v == m),
    };
    Expectation {
        verdict,
        basis,
        agrees,
    }
}

fn expected(
    release: &str,
    fs_type: &str,
    profiles: &[Profile],
    target_nocow: bool,
) -> (Option<Verdict>, String) {
    if fs_type != "btrfs" {
        return (
            Some(Verdict::Direct),
            format!("{fs_type} has no data checksums to protect: O_DIRECT stays direct"),
        );
    }
    let Some(v) = version(release) else {
        return (
            None,
            format!("the kernel release {release:?} is not a version"),
        );
    };
    let copies = profiles.iter().any(|p| p.duplicates_data());
    let csum = !target_nocow;
    let named = format!("{}.{}.{}", v.0, v.1, v.2);
    if !csum && !copies {
        return (
            Some(Verdict::Direct),
            format!(
                "NOCOW files on a profile without copies are written directly by every kernel \
                 known here ({named} included)"
            ),
        );
    }
    if v >= (7, 3, 0) {
        return (
            Some(Verdict::DirectBounced),
            format!("{named} has {BOUNCE}"),
        );
    }
    // 6.12.95 (Debian 6.12.95-1~bpo12+1, bookworm-backports) and 6.12.117
    // (Debian 6.12.117-1) have both fallbacks, read in their sources; which
    // earlier 6.12.y and which 6.6.y updates brought them is not recorded.
    let stable_unknown = (v.0, v.1) == (6, 6) || ((v.0, v.1) == (6, 12) && v.2 < 95);
    let stable_known = (v.0, v.1) == (6, 12) && v.2 >= 95;
    if stable_unknown && (csum || copies) {
        return (
            None,
            format!(
                "{named} is a stable series that got {CSUM_FALLBACK} in an update; which update is not \
                 recorded here (6.12.95 has it and {PROFILE_FALLBACK})"
            ),
        );
    }
    // The profile fallback: in 6.12.95's and 6.12.117's trees and in 7.2 (read in Debian's
    // sources), and measured on this project's 6.18.44 host; its first
    // mainline release is not identified here, so only kernels from 6.18 on
    // are expected to have it.
    let profile_fallback = stable_known || v >= (6, 18, 0);
    if copies && profile_fallback {
        return (
            Some(Verdict::ProfileForced),
            format!("{named} has {PROFILE_FALLBACK}"),
        );
    }
    let csum_fallback = stable_known || v >= (6, 15, 0);
    if csum && csum_fallback {
        let mut basis = format!("{named} has {CSUM_FALLBACK}");
        if copies && v < (6, 18, 0) {
            basis.push_str(&format!(
                "; whether it also has {PROFILE_FALLBACK} is not recorded here"
            ));
        }
        return (Some(Verdict::BufferedFallback), basis);
    }
    if copies && v >= (6, 15, 0) {
        return (
            None,
            format!("whether {named} has {PROFILE_FALLBACK} is not recorded here"),
        );
    }
    (
        Some(Verdict::Direct),
        format!("{named} predates {CSUM_FALLBACK}: O_DIRECT writes go to the devices"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(release: &str, p: Profile, nocow: bool) -> Option<Verdict> {
        expect(release, "btrfs", &[p], nocow, Verdict::Direct).verdict
    }

    #[test]
    fn the_rig_kernels_expect_what_their_sources_do() {
        use Profile::{Dup, Raid1, Single};
        use Verdict::*;
        // docs/rig.md: 6.1.176-1, 6.12.95-1~bpo12+1, 6.12.117-1, 7.2.13-1,
        // 7.3.4-1~bpo13+1.
        let rig = [
            ("6.1.0-50-amd64", [Some(Direct), Some(Direct), Some(Direct)]),
            (
                "6.12.95+deb12-amd64",
                [
                    Some(BufferedFallback),
                    Some(ProfileForced),
                    Some(ProfileForced),
                ],
            ),
            (
                "6.12.117+deb13-amd64",
                [
                    Some(BufferedFallback),
                    Some(ProfileForced),
                    Some(ProfileForced),
                ],
            ),
            (
                "7.2.13+deb14-amd64",
                [
                    Some(BufferedFallback),
                    Some(ProfileForced),
                    Some(ProfileForced),
                ],
            ),
            (
                "7.3.4+deb13-amd64",
                [
                    Some(DirectBounced),
                    Some(DirectBounced),
                    Some(DirectBounced),
                ],
            ),
        ];
        for (release, want) in rig {
            let got = [
                e(release, Single, false),
                e(release, Dup, false),
                e(release, Raid1, true),
            ];
            assert_eq!(got, want, "{release}");
        }
        assert_eq!(e("7.3.4+deb13-amd64", Single, true), Some(Direct));
        assert_eq!(e("6.12.117+deb13-amd64", Single, true), Some(Direct));
        assert_eq!(e("6.18.44-fc-v1045", Single, false), Some(BufferedFallback));
        assert_eq!(e("6.18.44-fc-v1045", Dup, true), Some(ProfileForced));
        assert_eq!(e("6.16.2", Dup, true), None);
        assert_eq!(e("6.12.30", Single, false), None);
        assert_eq!(e("6.12.94", Single, false), None);
        assert_eq!(e("6.6.80", Single, true), Some(Direct));
        let nocow = expect("7.2.13", "btrfs", &[Single], true, Direct);
        assert!(nocow.basis.starts_with("NOCOW files"), "{}", nocow.basis);
        assert_eq!(e("weird", Single, false), None);
    }

    #[test]
    fn agreement_is_said_only_when_both_sides_know() {
        let x = expect("7.3.4", "btrfs", &[Profile::Single], false, Verdict::Direct);
        assert_eq!(x.agrees, Some(false));
        assert!(x.basis.contains("BOUNCE"), "{}", x.basis);
        let x = expect(
            "7.3.4",
            "btrfs",
            &[Profile::Single],
            false,
            Verdict::Inconclusive,
        );
        assert_eq!(x.agrees, None);
        let x = expect("6.1.0", "ext4", &[], false, Verdict::Direct);
        assert_eq!(x.agrees, Some(true));
    }
}
