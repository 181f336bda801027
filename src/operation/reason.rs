//! Refusals as values: why a plan may not go ahead, one reason each, shown
//! in the plan's record and joined into the refusal's error.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Why something may not go ahead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Reason {
    /// The device concerned; `null` for the filesystem itself.
    pub device: Option<PathBuf>,
    /// A stable code (`mounted`, `signature`, ...).
    pub code: Cow<'static, str>,
    /// One sentence.
    pub message: String,
    /// `--overwrite` lifts it (and the plan then names what is destroyed).
    pub force_overrides: bool,
}

impl Reason {
    pub(crate) fn device(
        path: &Path,
        code: &'static str,
        message: String,
        force_overrides: bool,
    ) -> Self {
        Self {
            device: Some(path.to_path_buf()),
            code: Cow::Borrowed(code),
            message,
            force_overrides,
        }
    }

    /// A reason about the filesystem or the request, not a device.
    pub(crate) fn general(code: &'static str, message: String, force_overrides: bool) -> Self {
        Self {
            device: None,
            code: Cow::Borrowed(code),
            message,
            force_overrides,
        }
    }

    /// The refusal of a run without root (`doing`: "adding a device").
    pub(crate) fn not_root(doing: &str) -> Self {
        Self::general("not-root", format!("{doing} needs root"), false)
    }

    /// Whether it still blocks with `--overwrite` given or not.
    pub fn blocks(&self, force: bool) -> bool {
        !(force && self.force_overrides)
    }
}
