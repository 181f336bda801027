//! The array's members: `device add` (grow it), `device replace` (swap one
//! drive for another in place) and `device remove` (shrink it), with the
//! checks they share (a new device's preflight, the profiles' redundancy
//! after a member leaves) and the records that make a re-run recognise its
//! own earlier work.

pub mod add;
pub mod preflight;
pub mod redundancy;
/// `device remove`.
pub mod remove;
pub mod replace;
pub mod started;

use crate::operation::state::FsState;

/// The members of `fs` as a refusal lists them: `1 /dev/sda, 2 (missing)`.
pub(crate) fn members_listed(fs: &FsState) -> String {
    let members: Vec<String> = fs
        .devices
        .iter()
        .map(|d| {
            if d.path.is_empty() {
                format!("{} (missing)", d.devid)
            } else {
                format!("{} {}", d.devid, d.path)
            }
        })
        .collect();
    members.join(", ")
}
