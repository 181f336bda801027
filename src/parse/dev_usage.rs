//! `btrfs device usage` as pasted (3.18 on): a `/dev/sda, ID: 1` line, then
//! `Device size:`, `Device slack:` (5.x on), one `Type,Profile: SIZE` line
//! per chunk kind (`Data,RAID6/5:` with the stripe width, 5.x on) and
//! `Unallocated:`; a missing member as `<missing disk>, ID: 3`.

use serde::{Deserialize, Serialize};

use super::paste::PLine;
use crate::model::profile::Profile;

/// One device of a `device usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceUsage {
    /// Path (`<missing disk>` when gone).
    pub path: String,
    /// Its devid.
    pub devid: u64,
    /// `Device size:`, as printed.
    pub size: Option<String>,
    /// `Type,Profile` and the size allocated, as printed.
    pub chunks: Vec<(String, String)>,
    /// `Unallocated:`, as printed.
    pub unallocated: Option<String>,
}

impl DeviceUsage {
    /// Gone from the system.
    pub fn missing(&self) -> bool {
        self.path.contains("missing")
    }
}

/// The profile of a `Data,RAID1` or `Data,RAID6/5` label.
pub fn profile_of(label: &str) -> Option<(&str, Profile)> {
    let (ty, p) = label.split_once(',')?;
    let p = p.split('/').next()?;
    let p = p
        .parse::<Profile>()
        .or_else(|_| p.to_ascii_lowercase().parse())
        .ok()?;
    Some((ty, p))
}

fn head(t: &str) -> Option<(String, u64)> {
    let (path, id) = t.rsplit_once(", ID: ")?;
    Some((path.trim().to_owned(), id.trim().parse().ok()?))
}

/// Reads the devices listed from `lines[0]` (a `DEV, ID: N` line).
pub fn read(lines: &[PLine]) -> Option<(Vec<DeviceUsage>, usize)> {
    head(lines.first()?.text)?;
    let mut out: Vec<DeviceUsage> = Vec::new();
    let mut used = 0;
    for (i, l) in lines.iter().enumerate() {
        let t = l.text;
        if let Some((path, devid)) = head(t) {
            if out.len() >= 512 {
                break;
            }
            out.push(DeviceUsage {
                path,
                devid,
                size: None,
                chunks: Vec::new(),
                unallocated: None,
            });
        } else if l.blank() {
            continue;
        } else {
            let Some(d) = out.last_mut() else { break };
            let Some((k, v)) = t.split_once(':') else {
                break;
            };
            let v = v.trim().to_owned();
            match k {
                "Device size" => d.size = Some(v),
                "Device slack" => {}
                "Unallocated" => d.unallocated = Some(v),
                _ if profile_of(k).is_some() && d.chunks.len() < 16 => {
                    d.chunks.push((k.to_owned(), v))
                }
                _ => break,
            }
        }
        used = i + 1;
    }
    out.iter().any(|d| d.size.is_some()).then_some((out, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_devices() {
        // kdave/btrfs-progs#1114 (progs 6.x), cut.
        let t = "/dev/bcache0, ID: 2
   Device size:            20.01TiB
   Device slack:            5.46TiB
   Data,RAID6/5:            8.70TiB
   Metadata,RAID1C3:       42.00GiB
   Unallocated:             5.81TiB

<missing disk>, ID: 3
   Device size:                 0.00B
   Data,RAID6/5:            8.70TiB
x";
        let l = crate::parse::paste::test_lines(t);
        let (d, used) = read(&l).unwrap();
        assert_eq!(used, 10);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].chunks.len(), 2);
        assert!(d[1].missing());
        assert_eq!(profile_of("Data,RAID6/5").unwrap().1, Profile::Raid6);
        assert_eq!(profile_of("Data,single").unwrap().1, Profile::Single);
    }
}
