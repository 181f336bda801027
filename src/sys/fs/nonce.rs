//! Short random names for scratch files and sandboxes (`3f9a1c`): from the
//! kernel's random source, so two processes started in the same nanosecond
//! still differ. Names are never trusted for safety (files are created with
//! O_EXCL), only kept apart.

/// Six lowercase hex digits.
pub fn nonce() -> String {
    let mut bytes = [0u8; 3];
    let filled =
        rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).map_or(0, |n| n);
    if filled < bytes.len() {
        // No entropy yet (very early boot): the clock and pid still keep
        // concurrent runs apart.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mixed = t ^ std::process::id().rotate_left(16);
        bytes.copy_from_slice(&mixed.to_le_bytes()[..3]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_hex_digits_that_differ() {
        let a = nonce();
        assert_eq!(a.len(), 6);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        // 16M values: a hundred draws all alike would mean no randomness.
        let distinct: std::collections::BTreeSet<String> = (0..100).map(|_| nonce()).collect();
        assert!(distinct.len() > 90, "{distinct:?}");
    }
}
