//! Signals to a tool's process group, named for what they ask of it (the
//! jobs never name a signal crate).

use std::process::Child;

/// SIGINT to `child`'s process group: btrfs-progs' `-B` commands (replace,
/// remove, scrub) stop and save where they were, as on Ctrl-C.
pub(crate) fn interrupt_group(child: &Child) {
    super::kill_group(child, rustix::process::Signal::INT);
}
