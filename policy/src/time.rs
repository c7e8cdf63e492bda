//! `xs:dateTime` values for `<validity>`: parsing (tolerant of the RFC's own single-digit
//! month and day), canonical formatting, and comparison as instants.
//!
//! No time-zone database is involved: every value carries an explicit UTC offset, which is all
//! that `<validity>` needs. The offset is kept so a document written back says what it said.
//!
//! # Values without a time zone
//! The schema types `<from>` and `<until>` as `xs:dateTime`, whose time zone is optional (XML
//! Schema 1.0 Part 2 §3.2.7: such a value is "untimezoned", the time of "some unspecified
//! locality"), while RFC 4745's verified erratum 1455 says §7.4 should read "Times are expressed
//! in XML dateTime [W3C-Schema] format with a mandatory timezone". A document with such a value
//! is schema-valid, so [`Timestamp::parse_assuming_utc`] reads it as UTC — the only zone both
//! ends can agree on without out-of-band knowledge — and tells the caller, which warns.

use std::cmp::Ordering;
use std::fmt;

use super::error::ValueError;

/// A point in time with the UTC offset it was written in.
///
/// Equality compares the written form (instant *and* offset); use [`Timestamp::instant_cmp`]
/// to order instants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Timestamp {
    /// Seconds since 1970-01-01T00:00:00Z.
    unix_seconds: i64,
    /// Sub-second part, 0..1e9.
    nanos: u32,
    /// Offset from UTC in minutes, -840..=840.
    offset_minutes: i16,
}

const SECONDS_PER_DAY: i64 = 86_400;
const MAX_OFFSET_MINUTES: i16 = 14 * 60;

impl Timestamp {
    /// An instant given as seconds and nanoseconds since the Unix epoch, written in UTC.
    /// `nanos` is reduced modulo one second into the seconds.
    pub fn from_unix(seconds: i64, nanos: u32) -> Self {
        Self {
            unix_seconds: seconds.saturating_add(i64::from(nanos / 1_000_000_000)),
            nanos: nanos % 1_000_000_000,
            offset_minutes: 0,
        }
    }

    /// The current wall-clock time (UTC). Only for callers at the edge (the CLI); the engine
    /// takes time as an input.
    pub fn now() -> Self {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self::from_unix(
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            since.subsec_nanos(),
        )
    }

    /// Seconds since the Unix epoch.
    pub fn unix_seconds(&self) -> i64 {
        self.unix_seconds
    }

    /// Nanoseconds within the second.
    pub fn subsec_nanos(&self) -> u32 {
        self.nanos
    }

    /// Nanoseconds since the Unix epoch, saturating.
    pub fn unix_nanos(&self) -> i128 {
        i128::from(self.unix_seconds) * 1_000_000_000 + i128::from(self.nanos)
    }

    /// The UTC offset the value was written with, in minutes.
    pub fn offset_minutes(&self) -> i16 {
        self.offset_minutes
    }

    /// This instant shifted by `seconds` (may be fractional or negative), written in UTC.
    pub fn add_seconds(&self, seconds: f64) -> Self {
        let total = self.unix_nanos() as f64 + seconds * 1e9;
        let total = total.clamp(i64::MIN as f64 * 1e9, i64::MAX as f64 * 1e9) as i128;
        let secs = total.div_euclid(1_000_000_000);
        let nanos = total.rem_euclid(1_000_000_000);
        Self {
            unix_seconds: i64::try_from(secs).unwrap_or(i64::MAX),
            nanos: u32::try_from(nanos).unwrap_or(0),
            offset_minutes: 0,
        }
    }

    /// Orders two values as instants, ignoring the offsets they were written with.
    pub fn instant_cmp(&self, other: &Self) -> Ordering {
        (self.unix_seconds, self.nanos).cmp(&(other.unix_seconds, other.nanos))
    }

    /// Parses an `xs:dateTime` with a time zone (`Z` or `±hh:mm`). Month, day, hour, minute
    /// and second may have one digit (RFC 7200's own examples are not always zero-padded);
    /// fractional seconds are kept to the nanosecond; `24:00:00` means the next midnight.
    pub fn parse(s: &str) -> Result<Self, ValueError> {
        match Self::parse_assuming_utc(s)? {
            (t, true) => Ok(t),
            (_, false) => Err(ValueError::new("a time zone is required (Z or ±hh:mm)")),
        }
    }

    /// Parses an `xs:dateTime` like [`Timestamp::parse`], and also one without a time zone,
    /// which is read as UTC (see the module documentation). The flag is true when the value
    /// named its zone, false when UTC was assumed.
    pub fn parse_assuming_utc(s: &str) -> Result<(Self, bool), ValueError> {
        Self::read(s).map_err(ValueError::new)
    }

    fn read(s: &str) -> Result<(Self, bool), &'static str> {
        let mut p = Cursor {
            s: s.as_bytes(),
            i: 0,
        };
        if p.peek() == Some(b'-') {
            return Err("years before 0001 are not supported");
        }
        let year = p.number(4, 9, "expected a year of four or more digits")?;
        p.expect(b'-', "expected '-' after the year")?;
        let month = p.number(1, 2, "expected a month of one or two digits")?;
        p.expect(b'-', "expected '-' after the month")?;
        let day = p.number(1, 2, "expected a day of one or two digits")?;
        p.expect(b'T', "expected 'T' between the date and the time")?;
        let hour = p.number(1, 2, "expected an hour of one or two digits")?;
        p.expect(b':', "expected ':' after the hour")?;
        let minute = p.number(1, 2, "expected minutes of one or two digits")?;
        p.expect(b':', "expected ':' after the minutes")?;
        let second = p.number(1, 2, "expected seconds of one or two digits")?;
        let mut nanos: u32 = 0;
        if p.peek() == Some(b'.') {
            p.i += 1;
            let start = p.i;
            let mut scale = 100_000_000u32;
            while let Some(d) = p.peek().filter(u8::is_ascii_digit) {
                nanos += u32::from(d - b'0') * scale;
                scale /= 10;
                p.i += 1;
            }
            if p.i == start {
                return Err("expected digits after the decimal point of the seconds");
            }
        }
        let mut zoned = true;
        let offset_minutes: i16 = match p.peek() {
            Some(b'Z') => {
                p.i += 1;
                0
            }
            Some(sign @ (b'+' | b'-')) => {
                p.i += 1;
                let h = p.number(2, 2, "expected a two-digit offset hour")?;
                p.expect(b':', "expected ':' in the time-zone offset")?;
                let m = p.number(2, 2, "expected two-digit offset minutes")?;
                if m > 59 {
                    return Err("offset minutes must be below 60");
                }
                let total = i16::try_from(h * 60 + m).unwrap_or(i16::MAX);
                if total > MAX_OFFSET_MINUTES {
                    return Err("a time-zone offset lies within ±14:00");
                }
                if sign == b'-' { -total } else { total }
            }
            None => {
                zoned = false;
                0
            }
            Some(_) => return Err("expected a time zone (Z or ±hh:mm) after the time"),
        };
        if p.i != p.s.len() {
            return Err("unexpected characters after the time zone");
        }
        if !(1..=12).contains(&month) {
            return Err("the month must be 1..12");
        }
        if day < 1 || day > days_in_month(year, month) {
            return Err("the day does not exist in that month");
        }
        let end_of_day = hour == 24 && minute == 0 && second == 0 && nanos == 0;
        if (hour > 23 && !end_of_day) || minute > 59 || second > 59 {
            return Err("the time of day is out of range");
        }
        let days = days_from_civil(year, month, day);
        let local = days * SECONDS_PER_DAY + (hour * 3600 + minute * 60 + second);
        Ok((
            Self {
                unix_seconds: local - i64::from(offset_minutes) * 60,
                nanos,
                offset_minutes,
            },
            zoned,
        ))
    }
}

impl fmt::Display for Timestamp {
    /// The canonical form: zero-padded fields, the shortest fraction, `Z` for UTC.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let local = self.unix_seconds + i64::from(self.offset_minutes) * 60;
        let days = local.div_euclid(SECONDS_PER_DAY);
        let secs = local.rem_euclid(SECONDS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )?;
        if self.nanos != 0 {
            let frac = format!("{:09}", self.nanos);
            write!(f, ".{}", frac.trim_end_matches('0'))?;
        }
        match self.offset_minutes {
            0 => f.write_str("Z"),
            o => {
                let sign = if o < 0 { '-' } else { '+' };
                let o = o.unsigned_abs();
                write!(f, "{sign}{:02}:{:02}", o / 60, o % 60)
            }
        }
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, b: u8, msg: &'static str) -> Result<(), &'static str> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(msg)
        }
    }

    fn number(&mut self, min: usize, max: usize, msg: &'static str) -> Result<i64, &'static str> {
        let start = self.i;
        let mut value: i64 = 0;
        while self.i - start < max {
            match self.peek() {
                Some(d) if d.is_ascii_digit() => {
                    value = value * 10 + i64::from(d - b'0');
                    self.i += 1;
                }
                _ => break,
            }
        }
        if self.i - start < min || self.peek().is_some_and(|d| d.is_ascii_digit()) {
            return Err(msg);
        }
        Ok(value)
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (era-based, exact for all years).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc_example_with_offset() {
        let t = Timestamp::parse("2008-05-31T12:00:00-05:00").expect("valid");
        // 2008-05-31T17:00:00Z
        assert_eq!(t.unix_seconds(), 1_212_253_200);
        assert_eq!(t.offset_minutes(), -300);
        assert_eq!(t.to_string(), "2008-05-31T12:00:00-05:00");
    }

    #[test]
    fn tolerates_single_digit_month_and_day() {
        let a = Timestamp::parse("2012-1-5T09:00:00+01:00").expect("valid");
        let b = Timestamp::parse("2012-01-05T09:00:00+01:00").expect("valid");
        assert_eq!(a, b);
    }

    #[test]
    fn z_and_fraction() {
        let t = Timestamp::parse("1970-01-01T00:00:01.250Z").expect("valid");
        assert_eq!((t.unix_seconds(), t.subsec_nanos()), (1, 250_000_000));
        assert_eq!(t.to_string(), "1970-01-01T00:00:01.25Z");
    }

    #[test]
    fn end_of_day_is_next_midnight() {
        let a = Timestamp::parse("2020-02-28T24:00:00Z").expect("valid");
        let b = Timestamp::parse("2020-02-29T00:00:00Z").expect("valid");
        assert_eq!(a.instant_cmp(&b), Ordering::Equal);
    }

    #[test]
    fn rejects_bad_values() {
        for bad in [
            "2008-05-31T12:00:00",
            "2008-13-01T00:00:00Z",
            "2009-02-29T00:00:00Z",
            "2008-05-31 12:00:00Z",
            "2008-05-31T12:60:00Z",
            "2008-05-31T12:00:00+15:00",
            "2008-05-31T12:00:00Zjunk",
            "-2008-05-31T12:00:00Z",
            "08-05-31T12:00:00Z",
            "2008-05-31T12:00:00.Z",
            "",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn a_value_without_a_zone_is_read_as_utc_and_flagged() {
        let (t, zoned) = Timestamp::parse_assuming_utc("2008-05-31T12:00:00").expect("valid");
        assert!(!zoned);
        let z = Timestamp::parse("2008-05-31T12:00:00Z").expect("valid");
        assert_eq!(t, z);
        assert_eq!(t.to_string(), "2008-05-31T12:00:00Z");
        let (t, zoned) = Timestamp::parse_assuming_utc("2008-05-31T12:00:00-05:00").expect("ok");
        assert!(zoned);
        assert_eq!(t.offset_minutes(), -300);
        // Lenient only about the zone: everything else is still checked.
        for bad in [
            "2008-13-01T00:00:00",
            "2008-05-31T12:00",
            "2008-05-31T12:00:00 ",
        ] {
            assert!(Timestamp::parse_assuming_utc(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn civil_round_trip_over_centuries() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
