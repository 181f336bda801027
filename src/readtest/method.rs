//! The ways of reading a file that `read-test` compares.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One way of reading a file into memory.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// O_DIRECT, several threads, straight into the destination.
    Direct,
    /// O_DIRECT into a per-thread bounce buffer, then memcpy.
    DirectCopy,
    /// `read()` through the page cache, one thread, 1 MiB calls.
    Buffered,
    /// `preadv2(RWF_DONTCACHE)`: buffered, pages dropped after use (6.14+).
    Dontcache,
    /// `mmap`, one thread touching every page.
    Mmap,
}

impl Method {
    /// Every method, in the default order of a round.
    pub const ALL: [Method; 5] = [
        Method::Direct,
        Method::DirectCopy,
        Method::Buffered,
        Method::Dontcache,
        Method::Mmap,
    ];

    /// The name used on the command line, in text and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Method::Direct => "direct",
            Method::DirectCopy => "direct-copy",
            Method::Buffered => "buffered",
            Method::Dontcache => "dontcache",
            Method::Mmap => "mmap",
        }
    }

    /// True for the methods that open the file with O_DIRECT.
    pub(crate) fn uses_o_direct(self) -> bool {
        matches!(self, Method::Direct | Method::DirectCopy)
    }

    /// True for the methods that run the worker threads.
    pub(crate) fn is_threaded(self) -> bool {
        self.uses_o_direct()
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The order of the methods in round `round` (0-based): the list rotated by
/// one each round, so that no method always runs first, right after the
/// destination was faulted in, or right after another method's cache was
/// dropped.
pub(crate) fn round_order<T: Copy>(units: &[T], round: usize) -> Vec<T> {
    if units.is_empty() {
        return Vec::new();
    }
    let k = round % units.len();
    units[k..].iter().chain(&units[..k]).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_rotation() {
        assert_eq!(Method::DirectCopy.name(), "direct-copy");
        assert_eq!(
            serde_json::to_string(&Method::DirectCopy).unwrap(),
            "\"direct-copy\""
        );
        let m = [Method::Direct, Method::Buffered, Method::Mmap];
        assert_eq!(round_order(&m, 0), m.to_vec());
        assert_eq!(
            round_order(&m, 1),
            vec![Method::Buffered, Method::Mmap, Method::Direct]
        );
        assert_eq!(round_order(&m, 3), m.to_vec());
        assert!(round_order::<Method>(&[], 2).is_empty());
    }
}
