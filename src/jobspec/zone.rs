//! The time zone of a periodic schedule (`periodic { time_zone = "Europe/Paris" }`), found as
//! Go's `time.LoadLocation` finds it for Nomad: `UTC` (or empty) is UTC, `Local` is the node's
//! own zone (`/etc/localtime`), any other name is a file of the system's time zone database
//! (`/usr/share/zoneinfo/<name>` and Go's other Unix directories), read when the job is parsed
//! and when its next launch is computed. Names that climb out of the database (`..`, a leading
//! `/`) are refused as Go refuses them.
//!
//! The rules for wall-clock times that do not exist or exist twice (daylight saving changes) are
//! nodeward's, written down in docs/jobspec.md: a time skipped by a forward change launches at
//! the instant of the change; a time that occurs twice launches once, at its first occurrence.

use chrono::{NaiveDateTime, Timelike};

/// Where Go's `time` package looks for the zone database on Unix, in its order.
const ZONEINFO_DIRS: [&str; 4] = [
    "/usr/share/zoneinfo",
    "/usr/share/lib/zoneinfo",
    "/usr/lib/locale/TZ",
    "/etc/zoneinfo",
];

/// A loaded zone: UTC, or the rules of a zone database file.
#[derive(Debug, Clone)]
pub struct Zone(Option<::tz::TimeZone>);

impl Zone {
    pub const UTC: Zone = Zone(None);

    /// The zone called `name`, or Go's message for why there is none (`unknown time zone X`).
    pub fn load(name: &str) -> Result<Zone, String> {
        if name.is_empty() || name == "UTC" {
            return Ok(Zone::UTC);
        }
        let unknown = || format!("unknown time zone {name}");
        if name == "Local" {
            let data = std::fs::read("/etc/localtime").map_err(|_| unknown())?;
            return ::tz::TimeZone::from_tz_data(&data)
                .map(|z| Zone(Some(z)))
                .map_err(|_| unknown());
        }
        if name.starts_with('/') || name.starts_with('\\') || name.split('/').any(|p| p == "..") {
            return Err("time: invalid location name".to_string());
        }
        for dir in ZONEINFO_DIRS {
            if let Ok(data) = std::fs::read(format!("{dir}/{name}")) {
                return ::tz::TimeZone::from_tz_data(&data)
                    .map(|z| Zone(Some(z)))
                    .map_err(|_| unknown());
            }
        }
        Err(unknown())
    }

    /// The zone's offset from UTC at the instant `unix`, in seconds.
    pub fn offset(&self, unix: i64) -> i64 {
        match &self.0 {
            None => 0,
            Some(z) => z
                .find_local_time_type(unix)
                .map(|t| i64::from(t.ut_offset()))
                .unwrap_or(0),
        }
    }

    /// The first instant (unix seconds) whose wall-clock time in this zone is `local`; for a time
    /// skipped by a forward change, the instant of the change. `None` outside the zone's range.
    pub fn instant(&self, local: NaiveDateTime) -> Option<i64> {
        let Some(z) = &self.0 else {
            return Some(local.and_utc().timestamp());
        };
        let d = local.date();
        let found = ::tz::DateTime::find(
            chrono::Datelike::year(&d),
            u8::try_from(chrono::Datelike::month(&d)).ok()?,
            u8::try_from(chrono::Datelike::day(&d)).ok()?,
            u8::try_from(local.hour()).ok()?,
            u8::try_from(local.minute()).ok()?,
            u8::try_from(local.second()).ok()?,
            0,
            z.as_ref(),
        )
        .ok()?;
        found.earliest().map(|t| t.unix_time())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn local(y: i32, m: u32, d: u32, h: u32, min: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, m, d)
            .unwrap()
            .and_hms_opt(h, min, 0)
            .unwrap()
    }

    fn paris() -> Option<Zone> {
        let z = Zone::load("Europe/Paris");
        if z.is_err() {
            println!("SKIPPED paris: no zone database at /usr/share/zoneinfo on this machine");
        }
        z.ok()
    }

    #[test]
    fn names_go_refuses_are_refused_with_gos_words() {
        assert_eq!(
            Zone::load("Mars/Base").unwrap_err(),
            "unknown time zone Mars/Base"
        );
        for bad in ["../etc/passwd", "/etc/passwd", "Europe/../../etc/passwd"] {
            assert_eq!(
                Zone::load(bad).unwrap_err(),
                "time: invalid location name",
                "{bad}"
            );
        }
        assert_eq!(Zone::load("UTC").unwrap().offset(0), 0);
        assert_eq!(Zone::load("").unwrap().offset(0), 0);
    }

    #[test]
    fn offsets_and_instants_follow_the_zones_rules() {
        let Some(z) = paris() else { return };
        // 2026-01-15 12:00 UTC is 13:00 in Paris (CET, +1); in July (CEST) it is +2.
        assert_eq!(z.offset(1_768_478_400), 3600);
        assert_eq!(z.offset(1_784_116_800), 7200);
        assert_eq!(z.instant(local(2026, 1, 15, 13, 0)), Some(1_768_478_400));
    }

    #[test]
    fn a_skipped_time_is_the_change_and_a_doubled_one_its_first_occurrence() {
        let Some(z) = paris() else { return };
        // 2026-03-29: clocks go from 02:00 to 03:00 (at 01:00 UTC); 02:30 does not exist.
        let change = local(2026, 3, 29, 1, 0).and_utc().timestamp();
        assert_eq!(z.instant(local(2026, 3, 29, 2, 30)), Some(change));
        // 2026-10-25: clocks go from 03:00 back to 02:00 (at 01:00 UTC); 02:30 happens twice,
        // first at 00:30 UTC.
        let first = local(2026, 10, 25, 0, 30).and_utc().timestamp();
        assert_eq!(z.instant(local(2026, 10, 25, 2, 30)), Some(first));
    }
}
