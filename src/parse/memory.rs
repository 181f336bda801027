//! Memory figures from procfs: `MemAvailable` of `/proc/meminfo`, and the
//! transparent huge pages backing one mapping in `/proc/self/smaps`
//! (see proc(5)).

/// `MemAvailable` in bytes (the kernel prints kB).
pub(crate) fn mem_available_bytes(meminfo: &str) -> Option<u64> {
    kb_field(meminfo, "MemAvailable:")
}

fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        kb.checked_mul(1024)
    })
}

/// `AnonHugePages` of the mapping that starts at `start` in a
/// `/proc/self/smaps` text, in bytes; `None` if no mapping starts there.
pub(crate) fn anon_huge_bytes(smaps: &str, start: usize) -> Option<u64> {
    let mut in_mapping = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((from, to)) = first.split_once('-')
            && usize::from_str_radix(from, 16).is_ok()
            && usize::from_str_radix(to, 16).is_ok()
        {
            if in_mapping {
                return None;
            }
            in_mapping = usize::from_str_radix(from, 16) == Ok(start);
            continue;
        }
        if in_mapping && let Some(v) = kb_field(line, "AnonHugePages:") {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_mem_available() {
        let t = "MemTotal:       24680000 kB\nMemAvailable:   23000000 kB\n";
        assert_eq!(mem_available_bytes(t), Some(23_000_000 * 1024));
        assert_eq!(mem_available_bytes("MemTotal: 1 kB\n"), None);
    }

    // Shape as on Linux 6.18 (fields trimmed): a 2 MiB-aligned anonymous
    // mapping backed by huge pages, then the next mapping.
    const SMAPS: &str = "\
7f0000000000-7f0040000000 rw-p 00000000 00:00 0
Size:            1048576 kB
Rss:             1048576 kB
AnonHugePages:   1046528 kB
THPeligible:    1
7f0040000000-7f0040021000 rw-p 00000000 00:00 0
Size:                132 kB
AnonHugePages:         0 kB
";

    #[test]
    fn finds_huge_pages_of_one_mapping() {
        assert_eq!(
            anon_huge_bytes(SMAPS, 0x7f00_0000_0000),
            Some(1_046_528 * 1024)
        );
        assert_eq!(anon_huge_bytes(SMAPS, 0x7f00_4000_0000), Some(0));
        assert_eq!(anon_huge_bytes(SMAPS, 0x1234), None);
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}", start in 0usize..1 << 20) {
            let _ = anon_huge_bytes(&s, start);
            let _ = mem_available_bytes(&s);
        }
    }
}
