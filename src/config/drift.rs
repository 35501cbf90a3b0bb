//! `[policy] drift_margin`: where admission keeps the devices' drift as a margin.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Where admission keeps, before the objective of a request that would wait behind other
/// work, its replicas' drift (`scheduler::estimate::Drift`; `PolicyConfig::drift_margin`).
/// Written `"off"`, `"alone"` or `"always"`; `false` and `true` still read as `"off"` and
/// `"always"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriftMargin {
    /// Never.
    Off,
    /// While the model's traffic has its devices to itself: no other model resident on
    /// them has requests queued or had any arrive in the last two seconds.
    #[default]
    Alone,
    /// Always, devices shared by busy models included.
    Always,
}

impl DriftMargin {
    /// Its name in configuration.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Alone => "alone",
            Self::Always => "always",
        }
    }
}

impl<'de> Deserialize<'de> for DriftMargin {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MarginVisitor;
        impl Visitor<'_> for MarginVisitor {
            type Value = DriftMargin;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"off\", \"alone\" or \"always\"")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<DriftMargin, E> {
                Ok(if v {
                    DriftMargin::Always
                } else {
                    DriftMargin::Off
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DriftMargin, E> {
                [DriftMargin::Off, DriftMargin::Alone, DriftMargin::Always]
                    .into_iter()
                    .find(|m| m.name() == v)
                    .ok_or_else(|| {
                        E::custom(format!(
                            "'{v}' is not a drift margin: write \"off\", \"alone\" or \"always\""
                        ))
                    })
            }
        }
        deserializer.deserialize_any(MarginVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Table {
        drift_margin: DriftMargin,
    }

    fn read(text: &str) -> Result<DriftMargin, String> {
        toml::from_str::<Table>(text)
            .map(|t| t.drift_margin)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn names_and_the_old_switch_read() {
        assert_eq!(read("drift_margin = \"off\""), Ok(DriftMargin::Off));
        assert_eq!(read("drift_margin = \"alone\""), Ok(DriftMargin::Alone));
        assert_eq!(read("drift_margin = \"always\""), Ok(DriftMargin::Always));
        assert_eq!(read("drift_margin = true"), Ok(DriftMargin::Always));
        assert_eq!(read("drift_margin = false"), Ok(DriftMargin::Off));
        let error = read("drift_margin = \"sometimes\"").unwrap_err();
        assert!(
            error.contains("'sometimes' is not a drift margin"),
            "{error}"
        );
        let error = read("drift_margin = 3").unwrap_err();
        assert!(
            error.contains("\"off\", \"alone\" or \"always\""),
            "{error}"
        );
    }
}
