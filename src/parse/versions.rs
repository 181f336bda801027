//! Versions people paste: `btrfs --version` (`btrfs-progs v6.6.3`, with
//! the feature line of 6.x; `Btrfs v3.12`; `Btrfs Btrfs v0.19`), `uname -r`
//! (`6.1.0-18-amd64`, after its command line), `uname -a` (`Linux host
//! 5.15.0-91-generic #101-Ubuntu SMP ...`) and the kernel's `Linux version
//! 6.8.0 (...)` boot line.

/// A kernel release: digits, a dot, digits, then anything printable
/// without spaces (`5.15.0-91-generic`, `6.12.7-arch1-1`).
pub fn is_release(s: &str) -> bool {
    let mut parts = s.splitn(3, '.');
    let major = parts.next().unwrap_or("");
    let minor = parts.next().unwrap_or("");
    let minor_digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
    (1..=2).contains(&major.len())
        && major.bytes().all(|b| b.is_ascii_digit())
        && !minor_digits.is_empty()
        && minor[minor_digits.len()..]
            .chars()
            .next()
            .is_none_or(|c| matches!(c, '.' | '-' | '+' | '_' | '~'))
        && s.len() <= 64
        && !s.contains(char::is_whitespace)
        && s.bytes().all(|b| b.is_ascii_graphic())
}

/// The btrfs-progs version of a `btrfs --version` line, or of a short
/// line of prose that names it (`btrfs-progs: v5.11.1`, `Btrfs progs
/// v6.10.1.`).
pub fn progs_version(t: &str) -> Option<&str> {
    let prose = || {
        if t.len() > 160 {
            return None;
        }
        let lower = t.to_ascii_lowercase();
        let at = lower
            .find("btrfs-progs")
            .or_else(|| lower.find("btrfs progs"))?
            + 11;
        let rest = t[at..].trim_start_matches([':', ' ', '=']);
        let rest = rest.strip_prefix('v').unwrap_or(rest);
        Some(rest.trim_end_matches(['.', ',', ')']))
    };
    let rest = t
        .strip_prefix("btrfs-progs v")
        .or_else(|| t.strip_prefix("Btrfs Btrfs v"))
        .or_else(|| t.strip_prefix("Btrfs v"))
        .or_else(prose)?;
    let rest = rest.trim_end_matches(['.', ',']);
    let v = rest.split_whitespace().next()?;
    let v = v.trim_end_matches(['.', ',', ')', '`']);
    (v.starts_with(|c: char| c.is_ascii_digit()) && v.contains('.') && v.len() <= 32).then_some(v)
}

/// The kernel release of a `uname -a` or `Linux version` line.
pub fn kernel_in_line(t: &str) -> Option<&str> {
    if let Some(r) = t.strip_prefix("Linux version ") {
        return r.split_whitespace().next().filter(|v| is_release(v));
    }
    // Prose: `linux kernel: 5.10.19`, `Linux kernel 6.9.9`, `on kernel
    // 6.12.7.`, ``with kernel `5.4.0-153-generic` ``.
    if t.len() <= 160
        && let Some(at) = t.to_ascii_lowercase().find("kernel")
    {
        let rest = t[at + 6..].trim_start_matches([':', ' ', '`', 'v']);
        let word = rest.split_whitespace().next().unwrap_or("");
        let word = word.trim_end_matches(['.', ',', '`', ')']);
        if is_release(word) && word.contains(['.']) && word.split('.').count() >= 2 {
            return Some(word);
        }
    }
    let mut w = t.strip_prefix("Linux ")?.split_whitespace();
    let _host = w.next()?;
    let release = w.next()?;
    (is_release(release) && w.next().is_some_and(|x| x.starts_with('#'))).then_some(release)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions() {
        assert_eq!(progs_version("btrfs-progs v6.6.3"), Some("6.6.3"));
        assert_eq!(progs_version("Btrfs v3.12"), Some("3.12"));
        assert_eq!(progs_version("Btrfs Btrfs v0.19"), Some("0.19"));
        assert_eq!(progs_version("btrfs-progs vx"), None);
        assert!(is_release("6.1.0-18-amd64") && is_release("5.4.0-153-generic"));
        assert!(!is_release("1.23TiB") && !is_release("v6.1") && !is_release("10.0.0.1 x"));
        assert_eq!(
            kernel_in_line(
                "Linux nas 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023 x86_64 GNU/Linux"
            ),
            Some("5.15.0-91-generic")
        );
        assert_eq!(
            kernel_in_line("Linux version 6.8.0-31-generic (buildd@lcy02) (gcc)"),
            Some("6.8.0-31-generic")
        );
        assert_eq!(kernel_in_line("Linux is great"), None);
        assert_eq!(kernel_in_line("linux kernel: 5.10.19"), Some("5.10.19"));
        assert_eq!(
            kernel_in_line("Running Ubuntu 20.04.6 LTS with kernel `5.4.0-153-generic`"),
            Some("5.4.0-153-generic")
        );
        assert_eq!(kernel_in_line("the kernel is fine"), None);
        assert_eq!(progs_version("btrfs-progs: v5.11.1"), Some("5.11.1"));
        assert_eq!(
            progs_version("on kernel 6.12.7. Btrfs progs v6.10.1."),
            Some("6.10.1")
        );
        assert_eq!(progs_version("btrfs-progs is a package"), None);
    }
}
