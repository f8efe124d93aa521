//! Durations the way Go (and so Nomad and its users' scripts) writes them.
//!
//! Messages print durations with [`format`] (`5s`, `30m0s`, `16.104906834s`, `250ms`), and every
//! duration a user writes (`"15s"`, `"1h30m"`) goes through [`parse`], which accepts Go's
//! `time.ParseDuration` syntax and refuses negative values.

use std::time::Duration;

/// Formats `d` exactly as Go's `time.Duration.String` does.
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_string();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", fixed(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", fixed(ns, 1_000_000));
    }
    let hours = ns / 3_600_000_000_000;
    let minutes = (ns / 60_000_000_000) % 60;
    let rest = ns % 60_000_000_000;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&fixed(rest, 1_000_000_000));
    out.push('s');
    out
}

/// `value / unit` with the fraction written out and its trailing zeros dropped.
fn fixed(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit { unit: String, input: String },
    #[error("negative duration {0:?} is not allowed")]
    Negative(String),
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses Go's duration syntax: `300ms`, `1.5h`, `2h45m`, `0`. Units: ns, us, µs, ms, s, m, h.
pub fn parse(input: &str) -> Result<Duration, ParseError> {
    let s = input.trim();
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if body.is_empty() {
        return Err(ParseError::Invalid(input.to_string()));
    }
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total: u128 = 0;
    let mut rest = body;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..num_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(ParseError::Invalid(input.to_string()));
        }
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: u128 = match unit {
            "" => return Err(ParseError::MissingUnit(input.to_string())),
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => {
                return Err(ParseError::UnknownUnit {
                    unit: other.to_string(),
                    input: input.to_string(),
                })
            }
        };
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let overflow = || ParseError::Overflow(input.to_string());
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| overflow())?
        };
        let mut part = whole.checked_mul(scale).ok_or_else(overflow)?;
        // Fractions finer than a nanosecond are dropped, as Go does.
        let mut place = scale;
        for digit in frac.bytes().take(30) {
            place /= 10;
            part = part
                .checked_add(u128::from(digit - b'0') * place)
                .ok_or_else(overflow)?;
        }
        total = total.checked_add(part).ok_or_else(overflow)?;
        if total > u128::from(u64::MAX) {
            return Err(overflow());
        }
    }
    if negative && total > 0 {
        return Err(ParseError::Negative(input.to_string()));
    }
    Ok(Duration::from_nanos(total as u64))
}

/// serde helpers for durations stored as integer nanoseconds, as Nomad's API does.
pub mod nanos {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_nanos().min(u128::from(u64::MAX)) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let n = i64::deserialize(d)?;
        if n < 0 {
            return Err(serde::de::Error::custom(format!(
                "negative duration {n} is not allowed"
            )));
        }
        Ok(Duration::from_nanos(n as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(1800), "30m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(86400), "24h0m0s"),
            (Duration::from_nanos(16_104_906_834), "16.104906834s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_millis(15_500), "15.5s"),
        ];
        for (d, want) in cases {
            assert_eq!(format(d), want, "{d:?}");
        }
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(parse("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("24h"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse("10us"), Ok(Duration::from_micros(10)));
    }

    #[test]
    fn refuses_bad_durations() {
        assert!(matches!(parse("-5s"), Err(ParseError::Negative(_))));
        assert!(matches!(parse("5"), Err(ParseError::MissingUnit(_))));
        assert!(matches!(parse("5d"), Err(ParseError::UnknownUnit { .. })));
        assert!(matches!(parse(""), Err(ParseError::Invalid(_))));
        assert!(matches!(parse("s"), Err(ParseError::Invalid(_))));
        assert!(matches!(parse("1..2s"), Err(ParseError::Invalid(_))));
        assert!(matches!(
            parse("99999999999999999999h"),
            Err(ParseError::Overflow(_))
        ));
    }

    #[test]
    fn round_trips() {
        for s in ["5s", "1m30s", "30m0s", "16.104906834s", "250ms"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }

    /// A whole part just below the largest multiple of its unit that fits in 128 bits, plus a
    /// fraction, overflowed the sum: a panic with overflow checks, a wrapped (tiny) duration
    /// without them.
    #[test]
    fn huge_whole_part_with_a_fraction_is_too_large() {
        for input in [
            "340282366920938463463374607431768211.9us",
            "94522879700260684295381835.9999h",
        ] {
            assert_eq!(parse(input), Err(ParseError::Overflow(input.to_string())));
        }
    }
}
