//! `btrfs device stats [-c] [-T]` as pasted, in its three forms:
//!
//! - text (every version): `[/dev/sda].write_io_errs    0`, five lines per
//!   device, the column aligned on the longest path (or not, once a paste
//!   was reflowed);
//! - table, `-T` (6.1 on): `Id Path  Write errors Read errors ...`, a `--`
//!   rule, one row per device;
//! - JSON, `btrfs --format json device stats` (5.19 on): `"device-stats"`
//!   entries with `"device"`, `"devid"` and the five counters (quoted
//!   numbers), read line by line so that a quoted or cut paste still reads.

use serde::{Deserialize, Serialize};

use super::paste::PLine;

/// Which form of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatsForm {
    /// `[/dev/sda].write_io_errs 0` lines.
    Text,
    /// `-T`.
    Table,
    /// `--format json`.
    Json,
}

/// One device's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceCounters {
    /// The path printed.
    pub device: String,
    /// Its devid, when printed (table, JSON).
    pub devid: Option<u64>,
    /// `write_io_errs`.
    pub write: u64,
    /// `read_io_errs`.
    pub read: u64,
    /// `flush_io_errs`.
    pub flush: u64,
    /// `corruption_errs`.
    pub corruption: u64,
    /// `generation_errs`.
    pub generation: u64,
}

impl DeviceCounters {
    fn new(device: &str) -> Self {
        Self {
            device: device.to_owned(),
            devid: None,
            write: 0,
            read: 0,
            flush: 0,
            corruption: 0,
            generation: 0,
        }
    }

    /// The counters with their names, in btrfs-progs' order.
    pub fn kinds(&self) -> [(&'static str, u64); 5] {
        [
            ("write", self.write),
            ("read", self.read),
            ("flush", self.flush),
            ("corruption", self.corruption),
            ("generation", self.generation),
        ]
    }

    /// Any counter not zero.
    pub fn any(&self) -> bool {
        self.kinds().iter().any(|(_, n)| *n > 0)
    }

    fn set(&mut self, key: &str, n: u64) -> bool {
        let slot = match key {
            "write_io_errs" => &mut self.write,
            "read_io_errs" => &mut self.read,
            "flush_io_errs" => &mut self.flush,
            "corruption_errs" => &mut self.corruption,
            "generation_errs" => &mut self.generation,
            _ => return false,
        };
        *slot = n;
        true
    }
}

/// A `device stats` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DevStats {
    /// Form.
    pub form: StatsForm,
    /// Devices, in order.
    pub devices: Vec<DeviceCounters>,
}

/// Devices one output may list.
const MAX_DEVICES: usize = 512;

/// `[/dev/sda].write_io_errs    0` → (`/dev/sda`, `write_io_errs`, 0).
fn text_line(t: &str) -> Option<(&str, &str, u64)> {
    let rest = t.strip_prefix('[')?;
    let (dev, rest) = rest.rsplit_once("].")?;
    let mut w = rest.split_whitespace();
    let key = w.next()?;
    let n = w.next()?.parse().ok()?;
    w.next().is_none().then_some((dev, key, n))
}

/// Reads the `device stats` output that starts at `lines[0]`.
pub fn read(lines: &[PLine]) -> Option<(DevStats, usize)> {
    let first = lines.first()?.text;
    if text_line(first).is_some() {
        return Some(read_text(lines));
    }
    if first.starts_with("Id ") && first.contains("Write errors") && first.contains("Path") {
        return read_table(lines);
    }
    if first.contains("\"device-stats\"") {
        return read_json(lines);
    }
    None
}

fn read_text(lines: &[PLine]) -> (DevStats, usize) {
    let mut devices: Vec<DeviceCounters> = Vec::new();
    let mut used = 0;
    for (i, l) in lines.iter().enumerate() {
        let Some((dev, key, n)) = text_line(l.text) else {
            break;
        };
        if devices.last().is_none_or(|d| d.device != dev) {
            if devices.len() >= MAX_DEVICES {
                break;
            }
            devices.push(DeviceCounters::new(dev));
        }
        if let Some(d) = devices.last_mut() {
            d.set(key, n);
        }
        used = i + 1;
    }
    (
        DevStats {
            form: StatsForm::Text,
            devices,
        },
        used,
    )
}

fn read_table(lines: &[PLine]) -> Option<(DevStats, usize)> {
    if !lines.get(1)?.text.starts_with("--") {
        return None;
    }
    let mut devices = Vec::new();
    let mut used = 2;
    for l in &lines[2..] {
        let w: Vec<&str> = l.text.split_whitespace().take(8).collect();
        if w.len() != 7 || devices.len() >= MAX_DEVICES {
            break;
        }
        let n: Vec<u64> = w[2..].iter().filter_map(|s| s.parse().ok()).collect();
        let Ok(devid) = w[0].parse::<u64>() else {
            break;
        };
        if n.len() != 5 {
            break;
        }
        devices.push(DeviceCounters {
            device: w[1].to_owned(),
            devid: Some(devid),
            write: n[0],
            read: n[1],
            flush: n[2],
            corruption: n[3],
            generation: n[4],
        });
        used += 1;
    }
    (!devices.is_empty()).then_some((
        DevStats {
            form: StatsForm::Table,
            devices,
        },
        used,
    ))
}

/// `"key": "value",` → (key, value).
fn json_pair(t: &str) -> Option<(&str, &str)> {
    let (k, v) = t.split_once(':')?;
    let k = k.trim().strip_prefix('"')?.strip_suffix('"')?;
    let v = v.trim().trim_end_matches(',').trim().trim_matches('"');
    Some((k, v))
}

fn read_json(lines: &[PLine]) -> Option<(DevStats, usize)> {
    let mut devices: Vec<DeviceCounters> = Vec::new();
    let mut used = 1;
    let mut open = false;
    for (i, l) in lines.iter().enumerate().skip(1) {
        let t = l.text;
        if t.starts_with('{') {
            open = true;
        } else if t.starts_with(']') {
            used = i + 1;
            // The closing brace of the document.
            if lines.get(i + 1).is_some_and(|l| l.text == "}") {
                used += 1;
            }
            break;
        } else if t.starts_with('}') {
            open = false;
        } else if let Some((k, v)) = json_pair(t)
            && open
        {
            if k == "device" {
                if devices.len() >= MAX_DEVICES {
                    break;
                }
                devices.push(DeviceCounters::new(v));
            } else if let Some(d) = devices.last_mut() {
                if k == "devid" {
                    d.devid = v.parse().ok();
                } else if let Ok(n) = v.parse() {
                    d.set(k, n);
                }
            }
        } else {
            break;
        }
        used = i + 1;
    }
    (!devices.is_empty()).then_some((
        DevStats {
            form: StatsForm::Json,
            devices,
        },
        used,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::paste::test_lines as lines;

    #[test]
    fn reads_text_and_table() {
        // kdave/btrfs-progs#585 (progs 6.1.3).
        let t = "[/dev/sdc1].write_io_errs    0
[/dev/sdc1].read_io_errs     0
[/dev/sdc1].flush_io_errs    0
[/dev/sdc1].corruption_errs  0
[/dev/sdc1].generation_errs  0
[/dev/sdb1].write_io_errs    7489899
[/dev/sdb1].read_io_errs     3751023
[/dev/sdb1].flush_io_errs    117
[/dev/sdb1].corruption_errs  68
[/dev/sdb1].generation_errs  25

Id Path      Write errors Read errors Flush errors Corruption errors Generation errors
-- --------- ------------ ----------- ------------ ----------------- -----------------
 1 /dev/sdc1            0           0            0                 0                 0
 2 /dev/sdb1           25          25           25                25                25";
        let l = lines(t);
        let (s, used) = read(&l).unwrap();
        assert_eq!(used, 10);
        assert_eq!(s.devices.len(), 2);
        assert_eq!(s.devices[1].write, 7489899);
        assert_eq!(s.devices[1].generation, 25);
        assert!(!s.devices[0].any());
        let (t, used) = read(&l[11..]).unwrap();
        assert_eq!(
            (t.form, used, t.devices[1].devid),
            (StatsForm::Table, 4, Some(2))
        );
    }

    #[test]
    fn reads_json_line_by_line() {
        let t = r#"  "device-stats": [
    {
      "device": "/dev/vdb",
      "devid": "1",
      "write_io_errs": "0",
      "read_io_errs": "2",
      "flush_io_errs": "0",
      "corruption_errs": "0",
      "generation_errs": "0"
    }
  ]
}"#;
        let l = lines(t);
        let (s, used) = read(&l).unwrap();
        assert_eq!(used, 12);
        assert_eq!(s.devices[0].read, 2);
        assert_eq!(s.devices[0].devid, Some(1));
    }
}
