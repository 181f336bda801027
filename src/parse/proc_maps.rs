//! `/proc/PID/maps` lines (see proc(5)): which files a process has mapped.

/// One mapping of a file: its inode number and path as the kernel shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileMapping<'a> {
    /// `st_ino` of the mapped file.
    pub inode: u64,
    /// Its path; ` (deleted)` is kept, so a replaced file does not match.
    pub path: &'a str,
}

/// Parses one line: `address perms offset dev inode   pathname`. Anonymous
/// mappings (inode 0) and lines that do not parse give `None`.
pub(crate) fn parse_maps_line(line: &str) -> Option<FileMapping<'_>> {
    let mut rest = line;
    let mut fields = [""; 5];
    for f in &mut fields {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        *f = &rest[..end];
        rest = &rest[end..];
    }
    let inode: u64 = fields[4].parse().ok()?;
    let path = rest.trim_start_matches(' ');
    if inode == 0 || !path.starts_with('/') || !fields[3].contains(':') {
        return None;
    }
    Some(FileMapping { inode, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_mappings() {
        let l = "7f2c1c000000-7f2c1c021000 rw-s 00000000 00:2f 262       /var/lib/db/a b.img";
        assert_eq!(
            parse_maps_line(l),
            Some(FileMapping {
                inode: 262,
                path: "/var/lib/db/a b.img"
            })
        );
        let anon =
            "7ffd5e1f2000-7ffd5e213000 rw-p 00000000 00:00 0                          [stack]";
        assert_eq!(parse_maps_line(anon), None);
        assert_eq!(parse_maps_line(""), None);
        assert_eq!(parse_maps_line("garbage"), None);
        assert_eq!(parse_maps_line("a b c d 12 relative"), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_maps_line(&s);
        }
    }
}
