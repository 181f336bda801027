//! `btrfs filesystem show` as pasted (every version): `Label: 'x'  uuid:
//! UUID` (or `Label: none`), `Total devices N FS bytes used SIZE`, `devid
//! N size SIZE used SIZE path DEV`, a missing device as `*** Some devices
//! missing` (up to 5.x) or a `devid` row ending in `MISSING` with the path
//! `<missing disk>` (4.x on), and the `warning, device N is missing` lines
//! printed before it.

use serde::{Deserialize, Serialize};

use super::paste::{PLine, after, after_num};

/// One member as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShowDevice {
    /// Its devid.
    pub devid: u64,
    /// Size, as printed.
    pub size: String,
    /// Allocated on it, as printed.
    pub used: String,
    /// Path (`<missing disk>` when gone).
    pub path: String,
    /// Marked `MISSING`.
    pub missing: bool,
}

/// One filesystem of a `filesystem show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FiShow {
    /// Label (`None` for `Label: none`).
    pub label: Option<String>,
    /// Filesystem UUID (`None` when the paste starts at the devices).
    pub uuid: Option<String>,
    /// `Total devices N`.
    pub total_devices: Option<u64>,
    /// `FS bytes used`, as printed.
    pub bytes_used: Option<String>,
    /// Members listed.
    pub devices: Vec<ShowDevice>,
    /// `*** Some devices missing`.
    pub some_missing: bool,
}

impl FiShow {
    /// Members missing: marked, or fewer listed than the total.
    pub fn missing(&self) -> u64 {
        let marked = self.devices.iter().filter(|d| d.missing).count() as u64;
        let unlisted = self
            .total_devices
            .map_or(0, |t| t.saturating_sub(self.devices.len() as u64));
        let n = marked + unlisted;
        if n == 0 && self.some_missing { 1 } else { n }
    }
}

fn device(t: &str) -> Option<ShowDevice> {
    let rest = t.strip_prefix("devid ")?;
    Some(ShowDevice {
        devid: rest.split_whitespace().next()?.parse().ok()?,
        size: after(t, " size ")?.to_owned(),
        used: after(t, " used ")?.to_owned(),
        path: t
            .split_once(" path ")
            .map(|(_, p)| p.trim_end_matches("MISSING").trim().to_owned())
            .unwrap_or_default(),
        missing: t.ends_with("MISSING"),
    })
}

/// Reads the filesystem listed from `lines[0]`: its `Label:` line, or its
/// first `devid` row when the paste was cut above it.
pub fn read(lines: &[PLine]) -> Option<(FiShow, usize)> {
    let t = lines.first()?.text;
    let mut show = FiShow {
        label: None,
        uuid: None,
        total_devices: None,
        bytes_used: None,
        devices: Vec::new(),
        some_missing: false,
    };
    let skip = if let Some(rest) = t.strip_prefix("Label: ") {
        let (label, uuid) = rest.rsplit_once("uuid: ")?;
        let label = label.trim();
        show.label = (label != "none").then(|| label.trim_matches('\'').to_owned());
        show.uuid = Some(uuid.trim().to_owned());
        1
    } else if device(t).is_some() {
        0
    } else {
        return None;
    };
    let mut used = skip;
    for (i, l) in lines.iter().enumerate().skip(skip) {
        let t = l.text;
        if t.starts_with("Total devices ") {
            show.total_devices = after_num(t, "Total devices");
            show.bytes_used = after(t, "FS bytes used").map(str::to_owned);
        } else if let Some(d) = device(t) {
            if show.devices.len() < 512 {
                show.devices.push(d);
            }
        } else if t.starts_with("*** Some devices missing") {
            show.some_missing = true;
        } else {
            break;
        }
        used = i + 1;
    }
    (used > 1 || skip == 0 && used > 0).then_some((show, used))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::paste::clean;

    #[test]
    fn reads_both_ways_of_saying_missing() {
        let t = "Label: none  uuid: bddae3c1-2c83-4469-b99b-8bb713ada5a2
\tTotal devices 3 FS bytes used 128.00KiB
\tdevid    1 size 20.00GiB used 0.00B path /dev/sda
\tdevid    2 size 0 used 0 path <missing disk> MISSING
\t*** Some devices missing
Btrfs v3.12";
        let l = crate::parse::paste::test_lines(t);
        let (s, used) = read(&l).unwrap();
        assert_eq!(used, 5);
        assert_eq!(s.label, None);
        assert_eq!(s.total_devices, Some(3));
        assert_eq!(s.devices[1].path, "<missing disk>");
        assert!(s.devices[1].missing && s.some_missing);
        assert_eq!(s.missing(), 2);
        let l = [clean(1, "Label: 'data'  uuid: x")];
        assert!(read(&l).is_none());
    }
}
