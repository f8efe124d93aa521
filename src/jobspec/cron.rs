//! Cron expressions as Nomad's periodic jobs accept them (the `cronexpr` syntax): five fields
//! (minute hour day-of-month month day-of-week), six (the same and a year) or seven (a second
//! first, then the six), and the `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
//! `@midnight` and `@hourly` shorthands. A field is `*` (or `?` for the days), a value, a range
//! `a-b`, a step `*/n`, `a/n` or `a-b/n`, or a comma list of those; months and week days may be
//! spelled by their three-letter names. Times are wall-clock times of a zone, UTC unless the
//! schedule names another ([`super::zone`]).
//!
//! Pure: [`Cron::next_after`] takes the instant to search from, so the scheduler's clock is the
//! caller's (and a test's).

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, Timelike, Utc};

use super::zone::Zone;

/// A cron expression that did not parse: the message says which field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CronError(String);

/// The last year a schedule is searched in (as cronexpr's).
const LAST_YEAR: i32 = 2099;

/// One parsed expression: the allowed values of each field as bit sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    /// Bits 1..=31.
    days: u64,
    /// Bits 1..=12.
    months: u64,
    /// Bits 0..=6, Sunday 0.
    weekdays: u64,
    /// Years 1970..=2099 allowed, offset by 1970; `None`: every year.
    years: Option<Vec<bool>>,
    /// Whether the day-of-month and day-of-week fields were restricted (not `*`/`?`): when both
    /// are, a day matching either runs (as in cron).
    days_restricted: bool,
    weekdays_restricted: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The first name's value (months count from 1, week days from 0).
    names_from: u32,
}

const SECOND: Field = Field {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
    names_from: 0,
};
const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    names_from: 0,
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    names_from: 0,
};
const DAY: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
    names_from: 0,
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &MONTHS,
    names_from: 1,
};
// 7 is Sunday too, as in cron; folded onto 0 after parsing.
const WEEKDAY: Field = Field {
    name: "day of week",
    min: 0,
    max: 7,
    names: &WEEKDAYS,
    names_from: 0,
};
const YEAR: Field = Field {
    name: "year",
    min: 1970,
    max: LAST_YEAR as u32,
    names: &[],
    names_from: 0,
};

impl Field {
    fn value(&self, text: &str, expr: &str) -> Result<u32, CronError> {
        let lower = text.to_ascii_lowercase();
        if let Some(i) = self.names.iter().position(|n| *n == lower) {
            return Ok(i as u32 + self.names_from);
        }
        let v: u32 = text.parse().map_err(|_| {
            CronError(format!(
                "invalid {} {text:?} in cron spec {expr:?}",
                self.name
            ))
        })?;
        if v < self.min || v > self.max {
            return Err(CronError(format!(
                "{} {v} out of range {}-{} in cron spec {expr:?}",
                self.name, self.min, self.max
            )));
        }
        Ok(v)
    }

    /// The values a field allows, and whether it restricts anything (`*` and `?` do not).
    fn parse(&self, text: &str, expr: &str) -> Result<(Vec<u32>, bool), CronError> {
        if text == "*" || text == "?" {
            return Ok(((self.min..=self.max).collect(), false));
        }
        let mut out = Vec::new();
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => {
                    let step: u32 = s.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                        CronError(format!(
                            "invalid step {s:?} of {} in cron spec {expr:?}",
                            self.name
                        ))
                    })?;
                    (r, step)
                }
                None => (part, 1),
            };
            let (from, to) = if range == "*" || range == "?" {
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                let (a, b) = (self.value(a, expr)?, self.value(b, expr)?);
                if a > b {
                    return Err(CronError(format!(
                        "{} range {range:?} ends before it starts in cron spec {expr:?}",
                        self.name
                    )));
                }
                (a, b)
            } else {
                let a = self.value(range, expr)?;
                // `a/n` runs from a to the field's end, as in cronexpr.
                (a, if step > 1 { self.max } else { a })
            };
            out.extend((from..=to).step_by(step as usize));
        }
        Ok((out, true))
    }
}

fn bits(values: &[u32]) -> u64 {
    values.iter().fold(0, |b, v| b | (1u64 << v))
}

impl Cron {
    /// Parses an expression (see the module doc).
    pub fn parse(expr: &str) -> Result<Cron, CronError> {
        let expanded = match expr.trim() {
            "@yearly" | "@annually" => "0 0 0 1 1 * *",
            "@monthly" => "0 0 0 1 * * *",
            "@weekly" => "0 0 0 * * 0 *",
            "@daily" | "@midnight" => "0 0 0 * * * *",
            "@hourly" => "0 0 * * * * *",
            other if other.starts_with('@') => {
                return Err(CronError(format!("unknown cron shorthand {other:?}")))
            }
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (sec, rest, year) = match fields.len() {
            5 => ("0", &fields[..], "*"),
            6 => ("0", &fields[..5], fields[5]),
            7 => (fields[0], &fields[1..6], fields[6]),
            n => {
                return Err(CronError(format!(
                    "cron spec {expr:?} has {n} fields; it needs 5 (minute hour day-of-month month day-of-week), 6 (and a year) or 7 (a second first)"
                )))
            }
        };
        let (seconds, _) = SECOND.parse(sec, expr)?;
        let (minutes, _) = MINUTE.parse(rest[0], expr)?;
        let (hours, _) = HOUR.parse(rest[1], expr)?;
        let (days, days_restricted) = DAY.parse(rest[2], expr)?;
        let (months, _) = MONTH.parse(rest[3], expr)?;
        let (weekdays, weekdays_restricted) = WEEKDAY.parse(rest[4], expr)?;
        let weekdays: Vec<u32> = weekdays.into_iter().map(|d| d % 7).collect();
        let years = if year == "*" || year == "?" {
            None
        } else {
            let (ys, _) = YEAR.parse(year, expr)?;
            let mut allowed = vec![false; (LAST_YEAR - 1970 + 1) as usize];
            for y in ys {
                allowed[(y - 1970) as usize] = true;
            }
            Some(allowed)
        };
        Ok(Cron {
            seconds: bits(&seconds),
            minutes: bits(&minutes),
            hours: bits(&hours),
            days: bits(&days),
            months: bits(&months),
            weekdays: bits(&weekdays),
            years,
            days_restricted,
            weekdays_restricted,
        })
    }

    fn year_ok(&self, y: i32) -> bool {
        match &self.years {
            None => true,
            Some(a) => (1970..=LAST_YEAR).contains(&y) && a[(y - 1970) as usize],
        }
    }

    fn day_ok(&self, d: NaiveDate) -> bool {
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().num_days_from_sunday()) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => dom || dow,
            (true, false) => dom,
            (false, true) => dow,
            (false, false) => true,
        }
    }

    /// The first instant strictly after `t` the expression matches in UTC, whole seconds; `None`
    /// when there is none before the end of 2099.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.next_after_in(t, &Zone::UTC)
    }

    /// The first instant strictly after `t` whose wall-clock time in `zone` the expression
    /// matches: a wall-clock time skipped by a daylight-saving change matches at the change, one
    /// that occurs twice matches once, at its first occurrence ([`Zone::instant`]).
    pub fn next_after_in(&self, t: DateTime<Utc>, zone: &Zone) -> Option<DateTime<Utc>> {
        let at = t.timestamp();
        let mut local = DateTime::from_timestamp(at.checked_add(zone.offset(at))?, 0)?.naive_utc();
        loop {
            let candidate = self.next_local_after(local)?;
            match zone.instant(candidate) {
                Some(u) if u > at => return DateTime::from_timestamp(u, 0),
                // The second pass of a doubled hour, or an instant before `t`: search on.
                _ => local = candidate,
            }
        }
    }

    /// The first wall-clock time strictly after `t` the expression matches.
    fn next_local_after(&self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        let mut t = t.with_nanosecond(0)? + Duration::seconds(1);
        let midnight =
            |y: i32, m: u32, d: u32| NaiveDate::from_ymd_opt(y, m, d)?.and_hms_opt(0, 0, 0);
        // Each step jumps to the start of the next unit that could match, so the loop runs at
        // most a few thousand times even for a yearly schedule.
        loop {
            if t.year() > LAST_YEAR {
                return None;
            }
            if !self.year_ok(t.year()) {
                t = midnight(t.year() + 1, 1, 1)?;
                continue;
            }
            if self.months & (1 << t.month()) == 0 {
                let (y, m) = if t.month() == 12 {
                    (t.year() + 1, 1)
                } else {
                    (t.year(), t.month() + 1)
                };
                t = midnight(y, m, 1)?;
                continue;
            }
            if !self.day_ok(t.date()) {
                t = t.date().succ_opt()?.and_hms_opt(0, 0, 0)?;
                continue;
            }
            if self.hours & (1 << t.hour()) == 0 {
                t = t.with_minute(0)?.with_second(0)? + Duration::hours(1);
                continue;
            }
            if self.minutes & (1 << t.minute()) == 0 {
                t = t.with_second(0)? + Duration::minutes(1);
                continue;
            }
            if self.seconds & (1 << t.second()) == 0 {
                t += Duration::seconds(1);
                continue;
            }
            return Some(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next(expr: &str, from: &str) -> String {
        Cron::parse(expr)
            .unwrap()
            .next_after(at(from))
            .map(|t| t.to_rfc3339())
            .unwrap_or_default()
    }

    #[test]
    fn five_fields_run_on_the_minute() {
        assert_eq!(
            next("* * * * *", "2026-01-01T10:00:30Z"),
            "2026-01-01T10:01:00+00:00"
        );
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T10:00:00Z"),
            "2026-01-01T10:15:00+00:00"
        );
        assert_eq!(
            next("30 2 * * *", "2026-01-01T03:00:00Z"),
            "2026-01-02T02:30:00+00:00"
        );
        assert_eq!(
            next("0 0 1 jan *", "2026-03-01T00:00:00Z"),
            "2027-01-01T00:00:00+00:00"
        );
    }

    #[test]
    fn seven_fields_have_seconds_and_a_year() {
        assert_eq!(
            next("*/1 * * * * * *", "2026-01-01T10:00:00.5Z"),
            "2026-01-01T10:00:01+00:00"
        );
        assert_eq!(
            next("*/5 * * * * * ?", "2026-01-01T10:00:01Z"),
            "2026-01-01T10:00:05+00:00"
        );
        assert_eq!(
            next("0 0 0 1 1 * 2030", "2026-06-01T00:00:00Z"),
            "2030-01-01T00:00:00+00:00"
        );
        assert_eq!(next("0 0 0 1 1 * 2020", "2026-06-01T00:00:00Z"), "");
    }

    #[test]
    fn six_fields_end_with_a_year() {
        assert_eq!(
            next("0 12 * * * 2027", "2026-06-01T00:00:00Z"),
            "2027-01-01T12:00:00+00:00"
        );
    }

    #[test]
    fn shorthands_lists_ranges_and_names() {
        assert_eq!(
            next("@hourly", "2026-01-01T10:00:00Z"),
            "2026-01-01T11:00:00+00:00"
        );
        assert_eq!(
            next("@daily", "2026-01-01T10:00:00Z"),
            "2026-01-02T00:00:00+00:00"
        );
        // 2026-01-01 is a Thursday; the next Monday is the 5th.
        assert_eq!(
            next("@weekly", "2026-01-01T10:00:00Z"),
            "2026-01-04T00:00:00+00:00"
        );
        assert_eq!(
            next("0 9 * * MON-FRI", "2026-01-02T10:00:00Z"),
            "2026-01-05T09:00:00+00:00"
        );
        assert_eq!(
            next("0 9,17 * * *", "2026-01-02T10:00:00Z"),
            "2026-01-02T17:00:00+00:00"
        );
        assert_eq!(
            next("0 0 * * 7", "2026-01-01T10:00:00Z"),
            "2026-01-04T00:00:00+00:00"
        );
        assert_eq!(
            next("@monthly", "2026-01-31T10:00:00Z"),
            "2026-02-01T00:00:00+00:00"
        );
    }

    #[test]
    fn day_of_month_and_week_both_set_match_either() {
        // The 13th, or any Friday: 2026-02-06 is a Friday before the 13th.
        assert_eq!(
            next("0 0 13 * fri", "2026-02-01T00:00:00Z"),
            "2026-02-06T00:00:00+00:00"
        );
        assert_eq!(next("0 0 31 2 *", "2026-01-01T00:00:00Z"), "");
    }

    #[test]
    fn bad_expressions_say_why() {
        for (expr, why) in [
            ("* * * *", "has 4 fields"),
            ("61 * * * *", "minute 61 out of range 0-59"),
            ("* 5-2 * * *", "ends before it starts"),
            ("*/0 * * * *", "invalid step \"0\""),
            ("* * * foo *", "invalid month \"foo\""),
            ("@often", "unknown cron shorthand"),
            ("0 0 L * *", "invalid day of month \"L\""),
        ] {
            let e = Cron::parse(expr).unwrap_err().to_string();
            assert!(e.contains(why), "{expr}: {e}");
        }
    }

    #[test]
    fn daylight_saving_changes_launch_once_and_never_skip_a_day() {
        let Ok(paris) = Zone::load("Europe/Paris") else {
            println!("SKIPPED daylight_saving_changes_launch_once_and_never_skip_a_day: no zone database");
            return;
        };
        let c = Cron::parse("30 2 * * *").unwrap();
        let next = |from: &str| c.next_after_in(at(from), &paris).unwrap().to_rfc3339();
        // 02:30 does not exist on 2026-03-29 (02:00 -> 03:00 at 01:00 UTC): at the change.
        assert_eq!(next("2026-03-28T23:00:00Z"), "2026-03-29T01:00:00+00:00");
        // 02:30 occurs twice on 2026-10-25 (00:30 and 01:30 UTC): once, then the next day.
        assert_eq!(next("2026-10-24T23:00:00Z"), "2026-10-25T00:30:00+00:00");
        assert_eq!(next("2026-10-25T00:30:00Z"), "2026-10-26T01:30:00+00:00");
        // An ordinary day: 02:30 CEST is 00:30 UTC.
        assert_eq!(next("2026-06-01T00:00:00Z"), "2026-06-01T00:30:00+00:00");
    }
}
