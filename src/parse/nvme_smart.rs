//! The NVMe SMART / Health Information log page (log identifier 02h), as
//! laid out in the NVM Express Base Specification 2.0, section 5.16.1.3
//! (the same layout as `struct nvme_smart_log` in nvme-cli and
//! `linux/nvme.h`). Only the health and thermal fields are decoded.
//!
//! | bytes   | field                                                        |
//! |---------|--------------------------------------------------------------|
//! | 0       | critical warning (bit 1: a temperature threshold is crossed) |
//! | 1-2     | composite temperature, kelvin                                |
//! | 3, 4, 5 | available spare %, spare threshold %, percentage used        |
//! | 128-143 | power-on hours (128-bit)                                     |
//! | 192-195 | warning composite temperature time, minutes                  |
//! | 196-199 | critical composite temperature time, minutes                 |
//! | 200-215 | temperature sensors 1-8, kelvin (0: not implemented)         |
//! | 216-219 | thermal management temperature 1 transition count            |
//! | 220-223 | thermal management temperature 2 transition count            |
//! | 224-227 | total time for thermal management temperature 1, seconds     |
//! | 228-231 | total time for thermal management temperature 2, seconds     |
//!
//! All fields are little-endian. TMT1 is the drive's light throttling
//! (it lowers power), TMT2 the heavy one (it lowers performance as much as
//! it must).

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// Length of the log page.
pub(crate) const SMART_LOG_LEN: usize = 512;
/// Its log identifier for Get Log Page.
pub(crate) const SMART_LOG_ID: u8 = 0x02;

/// Byte offsets of the decoded fields.
pub mod offset {
    /// Critical warning bits.
    pub(crate) const CRITICAL_WARNING: usize = 0;
    /// Composite temperature (u16, kelvin).
    pub(crate) const COMPOSITE_TEMPERATURE: usize = 1;
    /// Available spare (%).
    pub(crate) const AVAILABLE_SPARE: usize = 3;
    /// Percentage used.
    pub(crate) const PERCENTAGE_USED: usize = 5;
    /// Power-on hours (u128).
    pub(crate) const POWER_ON_HOURS: usize = 128;
    /// Warning composite temperature time (u32, minutes).
    pub(crate) const WARNING_TEMPERATURE_TIME: usize = 192;
    /// Critical composite temperature time (u32, minutes).
    pub(crate) const CRITICAL_TEMPERATURE_TIME: usize = 196;
    /// Temperature sensor 1 (eight u16, kelvin).
    pub(crate) const TEMPERATURE_SENSORS: usize = 200;
    /// Thermal management temperature 1 transition count (u32).
    pub(crate) const TMT1_TRANSITIONS: usize = 216;
    /// Thermal management temperature 2 transition count (u32).
    pub(crate) const TMT2_TRANSITIONS: usize = 220;
    /// Total time for thermal management temperature 1 (u32, seconds).
    pub(crate) const TMT1_TOTAL_TIME: usize = 224;
    /// Total time for thermal management temperature 2 (u32, seconds).
    pub(crate) const TMT2_TOTAL_TIME: usize = 228;
}

/// Critical warning bit: a temperature is above an over-temperature
/// threshold or below an under-temperature threshold.
const WARNING_TEMPERATURE_BIT: u8 = 1 << 1;

/// One thermal management level: how often the drive entered it and for
/// how long it stayed, since it was made (the counters never reset).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct ThrottleCounter {
    /// Transitions into this level (saturates at u32::MAX).
    pub transitions: u32,
    /// Total seconds spent in it (saturates at u32::MAX).
    pub seconds: u32,
}

/// The thermal and health fields of a SMART log page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SmartThermal {
    /// Composite temperature in °C (kelvin − 273, as nvme-cli shows it);
    /// `None` when the drive reports 0 K (not implemented).
    pub temperature_celsius: Option<i32>,
    /// The critical warning's temperature bit is set right now.
    pub temperature_warning: bool,
    /// Time the composite temperature spent at or above the warning
    /// threshold (WCTEMP), in seconds (the drive counts minutes).
    pub warning_temperature_seconds: u64,
    /// Time at or above the critical threshold (CCTEMP), in seconds.
    pub critical_temperature_seconds: u64,
    /// Light throttling (thermal management temperature 1).
    pub tmt1: ThrottleCounter,
    /// Heavy throttling (thermal management temperature 2).
    pub tmt2: ThrottleCounter,
    /// Temperature sensors 1-8 in °C; `None` where not implemented.
    pub sensors_celsius: Vec<Option<i32>>,
    /// Available spare, percent.
    pub available_spare_percent: u8,
    /// Percentage of the rated endurance used (may exceed 100).
    pub percentage_used: u8,
    /// Power-on hours (saturates at u64::MAX).
    pub power_on_hours: u64,
}

fn u16_at(page: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([page[at], page[at + 1]])
}

fn u32_at(page: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]])
}

fn u128_at(page: &[u8], at: usize) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&page[at..at + 16]);
    u128::from_le_bytes(b)
}

fn celsius(kelvin: u16) -> Option<i32> {
    (kelvin != 0).then(|| i32::from(kelvin) - 273)
}

/// Decodes a SMART / Health log page. Anything but exactly 512 bytes is
/// refused: a short read or a different log would decode into nonsense.
pub(crate) fn decode_smart_log(page: &[u8]) -> Result<SmartThermal> {
    if page.len() != SMART_LOG_LEN {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!(
                "not a SMART log page: {} bytes instead of {SMART_LOG_LEN}",
                page.len()
            ),
        ));
    }
    use offset::*;
    Ok(SmartThermal {
        temperature_celsius: celsius(u16_at(page, COMPOSITE_TEMPERATURE)),
        temperature_warning: page[CRITICAL_WARNING] & WARNING_TEMPERATURE_BIT != 0,
        warning_temperature_seconds: u64::from(u32_at(page, WARNING_TEMPERATURE_TIME)) * 60,
        critical_temperature_seconds: u64::from(u32_at(page, CRITICAL_TEMPERATURE_TIME)) * 60,
        tmt1: ThrottleCounter {
            transitions: u32_at(page, TMT1_TRANSITIONS),
            seconds: u32_at(page, TMT1_TOTAL_TIME),
        },
        tmt2: ThrottleCounter {
            transitions: u32_at(page, TMT2_TRANSITIONS),
            seconds: u32_at(page, TMT2_TOTAL_TIME),
        },
        sensors_celsius: (0..8)
            .map(|i| celsius(u16_at(page, TEMPERATURE_SENSORS + 2 * i)))
            .collect(),
        available_spare_percent: page[AVAILABLE_SPARE],
        percentage_used: page[PERCENTAGE_USED],
        power_on_hours: u64::try_from(u128_at(page, POWER_ON_HOURS)).unwrap_or(u64::MAX),
    })
}

/// What changed between two readings of the same drive: a benchmark takes
/// one before and one after, and a non-zero throttle count means the drive
/// slowed itself down during the run.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub(crate) struct ThermalDelta {
    /// New light-throttling transitions and seconds.
    pub tmt1: ThrottleCounter,
    /// New heavy-throttling transitions and seconds.
    pub tmt2: ThrottleCounter,
    /// New seconds above the warning temperature (minute resolution).
    pub warning_temperature_seconds: u64,
    /// New seconds above the critical temperature (minute resolution).
    pub critical_temperature_seconds: u64,
}

impl ThermalDelta {
    /// The difference `after − before` (0 where a counter went backwards,
    /// as after a drive swap).
    pub fn between(before: &SmartThermal, after: &SmartThermal) -> Self {
        let diff = |a: ThrottleCounter, b: ThrottleCounter| ThrottleCounter {
            transitions: a.transitions.saturating_sub(b.transitions),
            seconds: a.seconds.saturating_sub(b.seconds),
        };
        Self {
            tmt1: diff(after.tmt1, before.tmt1),
            tmt2: diff(after.tmt2, before.tmt2),
            warning_temperature_seconds: after
                .warning_temperature_seconds
                .saturating_sub(before.warning_temperature_seconds),
            critical_temperature_seconds: after
                .critical_temperature_seconds
                .saturating_sub(before.critical_temperature_seconds),
        }
    }

    /// True when the drive throttled (either level) in between.
    #[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
    pub fn throttled(&self) -> bool {
        self.tmt1.transitions > 0
            || self.tmt2.transitions > 0
            || self.tmt1.seconds > 0
            || self.tmt2.seconds > 0
    }
}

/// Builds a log page with the given thermal values at their documented
/// offsets (tests and fixtures).
#[derive(Debug, Clone, Copy, Default)]
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) struct SmartPageBuilder {
    /// Composite temperature, kelvin.
    pub(crate) composite_kelvin: u16,
    /// Critical warning byte.
    pub(crate) critical_warning: u8,
    /// Warning temperature time, minutes.
    pub(crate) warning_minutes: u32,
    /// Critical temperature time, minutes.
    pub(crate) critical_minutes: u32,
    /// Sensor temperatures, kelvin (0: not implemented).
    pub(crate) sensors_kelvin: [u16; 8],
    /// TMT1 transitions.
    pub(crate) tmt1_transitions: u32,
    /// TMT2 transitions.
    pub(crate) tmt2_transitions: u32,
    /// TMT1 total seconds.
    pub tmt1_seconds: u32,
    /// TMT2 total seconds.
    pub tmt2_seconds: u32,
    /// Available spare %.
    pub(crate) available_spare: u8,
    /// Percentage used.
    pub percentage_used: u8,
    /// Power-on hours.
    pub power_on_hours: u128,
}

impl SmartPageBuilder {
    /// The 512-byte page.
    #[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
    pub fn build(&self) -> [u8; SMART_LOG_LEN] {
        use offset::*;
        let mut p = [0u8; SMART_LOG_LEN];
        p[CRITICAL_WARNING] = self.critical_warning;
        p[COMPOSITE_TEMPERATURE..COMPOSITE_TEMPERATURE + 2]
            .copy_from_slice(&self.composite_kelvin.to_le_bytes());
        p[AVAILABLE_SPARE] = self.available_spare;
        p[PERCENTAGE_USED] = self.percentage_used;
        p[POWER_ON_HOURS..POWER_ON_HOURS + 16].copy_from_slice(&self.power_on_hours.to_le_bytes());
        let mut put32 = |at: usize, v: u32| p[at..at + 4].copy_from_slice(&v.to_le_bytes());
        put32(WARNING_TEMPERATURE_TIME, self.warning_minutes);
        put32(CRITICAL_TEMPERATURE_TIME, self.critical_minutes);
        put32(TMT1_TRANSITIONS, self.tmt1_transitions);
        put32(TMT2_TRANSITIONS, self.tmt2_transitions);
        put32(TMT1_TOTAL_TIME, self.tmt1_seconds);
        put32(TMT2_TOTAL_TIME, self.tmt2_seconds);
        for (i, k) in self.sensors_kelvin.iter().enumerate() {
            let at = TEMPERATURE_SENSORS + 2 * i;
            p[at..at + 2].copy_from_slice(&k.to_le_bytes());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_each_field_at_its_documented_offset() {
        // Distinct values everywhere, so a field read from a neighbour's
        // offset cannot pass by accident.
        let page = SmartPageBuilder {
            composite_kelvin: 318,
            critical_warning: 0b0000_0010,
            warning_minutes: 7,
            critical_minutes: 2,
            sensors_kelvin: [320, 0, 305, 0, 0, 0, 0, 0],
            tmt1_transitions: 41,
            tmt2_transitions: 3,
            tmt1_seconds: 1_234,
            tmt2_seconds: 56,
            available_spare: 100,
            percentage_used: 4,
            power_on_hours: 8_760,
        }
        .build();
        // Byte-level check of the layout itself, independent of the builder.
        assert_eq!(&page[1..3], &318u16.to_le_bytes());
        assert_eq!(&page[216..220], &41u32.to_le_bytes());
        assert_eq!(&page[220..224], &3u32.to_le_bytes());
        assert_eq!(&page[224..228], &1_234u32.to_le_bytes());
        assert_eq!(&page[228..232], &56u32.to_le_bytes());
        assert_eq!(&page[192..196], &7u32.to_le_bytes());
        assert_eq!(&page[196..200], &2u32.to_le_bytes());

        let t = decode_smart_log(&page).unwrap();
        assert_eq!(t.temperature_celsius, Some(45));
        assert!(t.temperature_warning);
        assert_eq!(t.warning_temperature_seconds, 420);
        assert_eq!(t.critical_temperature_seconds, 120);
        assert_eq!(
            t.tmt1,
            ThrottleCounter {
                transitions: 41,
                seconds: 1_234
            }
        );
        assert_eq!(
            t.tmt2,
            ThrottleCounter {
                transitions: 3,
                seconds: 56
            }
        );
        assert_eq!(t.sensors_celsius[0], Some(47));
        assert_eq!(t.sensors_celsius[1], None);
        assert_eq!(t.sensors_celsius[2], Some(32));
        assert_eq!(t.sensors_celsius.len(), 8);
        assert_eq!(t.available_spare_percent, 100);
        assert_eq!(t.percentage_used, 4);
        assert_eq!(t.power_on_hours, 8_760);
    }

    #[test]
    fn a_raw_page_written_by_hand_decodes() {
        // Not through the builder: bytes put where the specification says.
        let mut page = [0u8; 512];
        page[1] = 0x2c; // 300 K = 27 °C
        page[2] = 0x01;
        page[216] = 0x10; // TMT1 count 0x0110 = 272
        page[217] = 0x01;
        page[231] = 0x01; // TMT2 time 0x0100_0000 seconds
        let t = decode_smart_log(&page).unwrap();
        assert_eq!(t.temperature_celsius, Some(27));
        assert!(!t.temperature_warning);
        assert_eq!(t.tmt1.transitions, 272);
        assert_eq!(t.tmt2.seconds, 0x0100_0000);
        assert_eq!(t.tmt2.transitions, 0);
    }

    #[test]
    fn zero_temperature_means_not_reported() {
        let t = decode_smart_log(&[0u8; 512]).unwrap();
        assert_eq!(t.temperature_celsius, None);
        assert!(t.sensors_celsius.iter().all(Option::is_none));
    }

    #[test]
    fn refuses_a_page_of_the_wrong_size() {
        assert!(decode_smart_log(&[0u8; 511]).is_err());
        assert!(decode_smart_log(&[0u8; 4096]).is_err());
        assert!(decode_smart_log(&[]).is_err());
    }

    #[test]
    fn delta_between_two_readings() {
        let before = decode_smart_log(
            &SmartPageBuilder {
                tmt1_transitions: 5,
                tmt1_seconds: 100,
                warning_minutes: 1,
                ..Default::default()
            }
            .build(),
        )
        .unwrap();
        let after = decode_smart_log(
            &SmartPageBuilder {
                tmt1_transitions: 7,
                tmt1_seconds: 130,
                tmt2_transitions: 1,
                tmt2_seconds: 4,
                warning_minutes: 2,
                ..Default::default()
            }
            .build(),
        )
        .unwrap();
        let d = ThermalDelta::between(&before, &after);
        assert_eq!(d.tmt1.transitions, 2);
        assert_eq!(d.tmt1.seconds, 30);
        assert_eq!(d.tmt2.transitions, 1);
        assert_eq!(d.warning_temperature_seconds, 60);
        assert!(d.throttled());
        assert!(!ThermalDelta::between(&after, &after).throttled());
        // A counter that went backwards (another drive) is not negative.
        assert_eq!(ThermalDelta::between(&after, &before).tmt1.transitions, 0);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode_smart_log(&bytes);
        }
    }
}
