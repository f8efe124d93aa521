//! Date and time functions: `timestamp`, `formatdate`, `timeadd`. Timestamps are RFC 3339 text,
//! as in Nomad; `timestamp()` is the instant of the evaluation ([`super::FuncEnv::now`]), the
//! same for every call in one jobspec.

use chrono::{DateTime, Datelike, FixedOffset, SecondsFormat, Timelike};
use hcl::eval::{FuncArgs, FuncDef};
use hcl::Value;

use super::{env, fixed, string};
use crate::util::duration;

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("timestamp", fixed(0, timestamp)),
        ("formatdate", fixed(2, formatdate)),
        ("timeadd", fixed(2, timeadd)),
    ]
}

fn timestamp(_: FuncArgs) -> Result<Value, String> {
    Ok(Value::String(
        env().now.to_rfc3339_opts(SecondsFormat::Secs, true),
    ))
}

fn parse_time(s: &str) -> Result<DateTime<FixedOffset>, String> {
    DateTime::parse_from_rfc3339(s).map_err(|e| format!("{s:?} is not an RFC 3339 timestamp: {e}"))
}

/// `timeadd(timestamp, duration)`: a Go duration, which may be negative (`"-1h30m"`).
fn timeadd(args: FuncArgs) -> Result<Value, String> {
    let t = parse_time(&string(&args, 0)?)?;
    let d = string(&args, 1)?;
    let (negative, magnitude) = match d.trim().strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, d.trim().trim_start_matches('+')),
    };
    let std = duration::parse(magnitude).map_err(|e| format!("invalid duration {d:?}: {e}"))?;
    let delta =
        chrono::Duration::from_std(std).map_err(|_| format!("duration {d:?} is too long"))?;
    let out = if negative { t - delta } else { t + delta };
    Ok(Value::String(
        out.to_rfc3339_opts(SecondsFormat::Secs, true),
    ))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `formatdate(spec, timestamp)` with the format language of Terraform and Nomad: `YYYY YY MMMM
/// MMM MM M DD D EEEE EEE hh h HH H AA aa mm m ss s ZZZZZ ZZZZ ZZZ Z`, text in single quotes
/// (`''` is a quote), and any other character that is not a letter as it is.
fn formatdate(args: FuncArgs) -> Result<Value, String> {
    let spec = string(&args, 0)?;
    let t = parse_time(&string(&args, 1)?)?;
    let chars: Vec<char> = spec.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            let mut j = i + 1;
            if chars.get(j) == Some(&'\'') {
                out.push('\'');
                i += 2;
                continue;
            }
            // Inside quotes too, `''` is one quote.
            loop {
                match (chars.get(j), chars.get(j + 1)) {
                    (None, _) => return Err("a quoted text in the format is not closed".into()),
                    (Some('\''), Some('\'')) => {
                        out.push('\'');
                        j += 2;
                    }
                    (Some('\''), _) => break,
                    (Some(&c), _) => {
                        out.push(c);
                        j += 1;
                    }
                }
            }
            i = j + 1;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            out.push(c);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&x| x == c).count();
        let token: String = chars[i..i + run].iter().collect();
        i += run;
        let offset = t.offset().local_minus_utc();
        let (sign, off) = if offset < 0 {
            ('-', -offset)
        } else {
            ('+', offset)
        };
        let text = match token.as_str() {
            "YYYY" => format!("{:04}", t.year()),
            "YY" => format!("{:02}", t.year().rem_euclid(100)),
            "MMMM" => MONTHS[t.month0() as usize].to_string(),
            "MMM" => MONTHS[t.month0() as usize][..3].to_string(),
            "MM" => format!("{:02}", t.month()),
            "M" => t.month().to_string(),
            "DD" => format!("{:02}", t.day()),
            "D" => t.day().to_string(),
            "EEEE" => DAYS[t.weekday().num_days_from_monday() as usize].to_string(),
            "EEE" => DAYS[t.weekday().num_days_from_monday() as usize][..3].to_string(),
            "hh" => format!("{:02}", t.hour()),
            "h" => t.hour().to_string(),
            "HH" => format!("{:02}", twelve(t.hour())),
            "H" => twelve(t.hour()).to_string(),
            "AA" => (if t.hour() < 12 { "AM" } else { "PM" }).to_string(),
            "aa" => (if t.hour() < 12 { "am" } else { "pm" }).to_string(),
            "mm" => format!("{:02}", t.minute()),
            "m" => t.minute().to_string(),
            "ss" => format!("{:02}", t.second()),
            "s" => t.second().to_string(),
            "ZZZZZ" => format!("{sign}{:02}:{:02}", off / 3600, off / 60 % 60),
            "ZZZZ" => format!("{sign}{:02}{:02}", off / 3600, off / 60 % 60),
            // A timestamp carries an offset, not a zone's name; UTC is the one name it implies.
            "ZZZ" if offset == 0 => "UTC".to_string(),
            "ZZZ" => format!("{sign}{:02}{:02}", off / 3600, off / 60 % 60),
            "Z" if offset == 0 => "Z".to_string(),
            "Z" => format!("{sign}{:02}:{:02}", off / 3600, off / 60 % 60),
            other => return Err(format!("invalid date format verb {other:?}")),
        };
        out.push_str(&text);
    }
    Ok(Value::String(out))
}

fn twelve(hour: u32) -> u32 {
    match hour % 12 {
        0 => 12,
        h => h,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{eval, fails, same};
    use super::super::{with_env, Files, FuncEnv};
    use chrono::TimeZone;

    #[test]
    fn timestamp_is_the_instant_of_the_evaluation() {
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 3, 6, 21, 31, 17)
            .unwrap();
        let env = FuncEnv {
            files: Files::default(),
            now,
        };
        with_env(env, || {
            same("timestamp()", "\"2026-03-06T21:31:17Z\"");
            same("formatdate(\"YYYY-MM-DD\", timestamp())", "\"2026-03-06\"");
        });
    }

    #[test]
    fn formats_and_adds() {
        same(
            "formatdate(\"EEEE, DD MMM YYYY hh:mm:ss ZZZ\", \"2018-01-02T23:12:01Z\")",
            "\"Tuesday, 02 Jan 2018 23:12:01 UTC\"",
        );
        same(
            "formatdate(\"MMMM D, H:mmaa 'o''clock' ZZZZZ\", \"2018-01-02T13:04:05-08:00\")",
            "\"January 2, 1:04pm o'clock -08:00\"",
        );
        same(
            "formatdate(\"''YY''\", \"2018-01-02T13:04:05+05:30\")",
            "\"'18'\"",
        );
        fails(
            "formatdate(\"YYYY Q\", \"2018-01-02T13:04:05Z\")",
            "invalid date format verb \"Q\"",
        );
        fails(
            "formatdate(\"YYYY\", \"yesterday\")",
            "not an RFC 3339 timestamp",
        );
        same(
            "timeadd(\"2017-11-22T00:00:00Z\", \"10m\")",
            "\"2017-11-22T00:10:00Z\"",
        );
        same(
            "timeadd(\"2017-11-22T00:00:00+01:00\", \"-1h30m\")",
            "\"2017-11-21T22:30:00+01:00\"",
        );
        fails(
            "timeadd(\"2017-11-22T00:00:00Z\", \"10\")",
            "invalid duration \"10\"",
        );
        assert!(eval("timestamp()").is_ok());
    }
}
