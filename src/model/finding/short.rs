//! A catalog code under the short name its command's own document has
//! given it since before the catalog: `links --json`'s `kind`
//! (`degraded`), `bench --json`'s `checks[].code` (`device_mismatch`).
//! The documents keep their strings (and their schemas list the same
//! values); the code behind them is the catalog's ([`super::catalog`],
//! `as "short"` in its table).

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Code;
use super::catalog::CATALOG;

/// The document a short name belongs to: the codes of its command that
/// have a short name.
pub trait Family {
    /// The command the catalog lists as emitting the codes (`links`).
    const COMMAND: &'static str;
    /// The schema's name of the short-name enum (`FindingKind`).
    const SCHEMA_NAME: &'static str;
    /// The schema's description of it.
    const ABOUT: &'static str;
}

/// A code, written as its short name in the document of family `F`.
#[derive(Debug)]
pub struct Short<F>(pub Code, PhantomData<F>);

impl<F> Short<F> {
    /// `code` under its short name.
    pub fn new(code: Code) -> Self {
        Self(code, PhantomData)
    }
}

impl<F> Clone for Short<F> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<F> Copy for Short<F> {}

/// The codes of family `F`, in catalog order.
fn members<F: Family>() -> impl Iterator<Item = (&'static str, Code)> {
    CATALOG
        .iter()
        .filter(|e| e.commands.contains(&F::COMMAND))
        .filter_map(|e| e.short.map(|s| (s, e.code)))
}

impl<F: Family> Serialize for Short<F> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.short_name())
    }
}

impl<'de, F: Family> Deserialize<'de> for Short<F> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        members::<F>()
            .find(|(s, _)| *s == name)
            .map(|(_, c)| Self::new(c))
            .ok_or_else(|| serde::de::Error::custom(format!("unknown {} {name:?}", F::SCHEMA_NAME)))
    }
}

impl<F: Family> schemars::JsonSchema for Short<F> {
    fn schema_name() -> Cow<'static, str> {
        F::SCHEMA_NAME.into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let one_of: Vec<serde_json::Value> = members::<F>()
            .map(|(s, c)| {
                serde_json::json!({
                    "type": "string",
                    "const": s,
                    "description": c.meaning(),
                })
            })
            .collect();
        schemars::json_schema!({
            "oneOf": one_of,
            "description": F::ABOUT,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Links;
    impl Family for Links {
        const COMMAND: &'static str = "links";
        const SCHEMA_NAME: &'static str = "FindingKind";
        const ABOUT: &'static str = "What a finding is about.";
    }

    #[test]
    fn short_names_round_trip_and_stay_in_their_family() {
        let k = Short::<Links>::new(Code::LinkCappedByPort);
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(json, "\"capped-by-port\"");
        let back: Short<Links> = serde_json::from_str(&json).unwrap();
        assert_eq!(back.0, Code::LinkCappedByPort);
        // A bench check's short name is not a links kind.
        assert!(serde_json::from_str::<Short<Links>>("\"device_mismatch\"").is_err());
        assert_eq!(members::<Links>().count(), 6);
    }
}
