//! `wipefs --no-act --json DEVICE`: the signatures (filesystems, partition
//! tables, RAID/LVM labels) on a device.

use serde::{Deserialize, Serialize};

/// One signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Signature {
    /// `ext4`, `gpt`, `btrfs`, `LVM2_member`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Offset on the device (`0x438`).
    pub offset: String,
    /// UUID, if it has one.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Label, if it has one.
    #[serde(default)]
    pub label: Option<String>,
}

#[derive(Deserialize)]
struct Doc {
    #[serde(default)]
    signatures: Vec<Signature>,
}

/// Parses wipefs' JSON. No output at all means no signatures.
pub(crate) fn parse_wipefs_json(text: &str) -> Result<Vec<Signature>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str::<Doc>(text)
        .map(|d| d.signatures)
        .map_err(|e| format!("unexpected wipefs output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_util_linux_2_38_output() {
        // `wipefs --no-act --json /dev/loop0` after mkfs.ext4 (util-linux 2.38.1).
        let text = r#"{
   "signatures": [
      {
         "device": "loop0",
         "offset": "0x438",
         "type": "ext4",
         "uuid": "3a4ff654-a8c1-464e-a567-38c240bfe750",
         "label": null
      }
   ]
}"#;
        let s = parse_wipefs_json(text).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].kind, "ext4");
        assert_eq!(s[0].offset, "0x438");
        assert_eq!(s[0].label, None);
        assert!(parse_wipefs_json("").unwrap().is_empty());
        assert!(parse_wipefs_json("garbage").is_err());
    }
}
