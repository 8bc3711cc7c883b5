//! The JSON forms of `meta.v1.Time`, `MicroTime` and `Duration`, written without allocating
//! (a pod carries a dozen timestamps).

/// A UTC timestamp as RFC 3339: `2024-01-02T03:04:05Z`, or with `micros`
/// `2024-01-02T03:04:05.123456Z` (the forms Go's `Time` and `MicroTime` marshal to JSON).
/// `None` for a year outside 0..=9999, which RFC 3339 cannot write.
pub(crate) fn rfc3339(seconds: i64, nanos: i32, micros: bool, out: &mut Buf) -> Option<&str> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return None;
    }
    out.len = 0;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    out.digits(year as u32, 4);
    out.push(b'-');
    out.digits(month, 2);
    out.push(b'-');
    out.digits(day, 2);
    out.push(b'T');
    out.digits(h as u32, 2);
    out.push(b':');
    out.digits(m as u32, 2);
    out.push(b':');
    out.digits(s as u32, 2);
    if micros {
        out.push(b'.');
        out.digits((nanos.clamp(0, 999_999_999) / 1000) as u32, 6);
    }
    out.push(b'Z');
    Some(out.as_str())
}

/// Days since 1970-01-01 as a proleptic Gregorian date (the civil-from-days algorithm of
/// Howard Hinnant's date library, public domain).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A small stack buffer for a formatted value.
#[derive(Debug)]
pub(crate) struct Buf {
    bytes: [u8; 40],
    len: usize,
}

impl Default for Buf {
    fn default() -> Self {
        Self {
            bytes: [0; 40],
            len: 0,
        }
    }
}

impl Buf {
    fn push(&mut self, b: u8) {
        if self.len < self.bytes.len() {
            self.bytes[self.len] = b;
            self.len += 1;
        }
    }

    /// `n` in `width` decimal digits, zero-padded (the low ones if it has more).
    fn digits(&mut self, mut n: u32, width: usize) {
        let end = self.len + width;
        if end > self.bytes.len() {
            return;
        }
        for i in (self.len..end).rev() {
            self.bytes[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        self.len = end;
    }

    fn as_str(&self) -> &str {
        // Only ASCII is ever written.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// A duration in nanoseconds as Go's `time.Duration.String` writes it (`1h2m3s`, `1.5s`,
/// `300ms`, `0s`).
pub fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, div) = match n {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", fraction(n, div));
    }
    let (h, m) = (n / 3_600_000_000_000, (n / 60_000_000_000) % 60);
    let s = fraction(n % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, m) => format!("{sign}{m}m{s}s"),
        (h, m) => format!("{sign}{h}h{m}m{s}s"),
    }
}

fn fraction(n: u64, div: u64) -> String {
    let (whole, rest) = (n / div, n % div);
    if rest == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_as_go_writes_them() {
        let mut buf = Buf::default();
        assert_eq!(
            rfc3339(0, 0, false, &mut buf).unwrap(),
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339(1_704_164_645, 123_456_789, true, &mut buf).unwrap(),
            "2024-01-02T03:04:05.123456Z"
        );
        assert_eq!(
            rfc3339(951_782_400, 0, false, &mut buf).unwrap(),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339(-1, 0, false, &mut buf).unwrap(),
            "1969-12-31T23:59:59Z"
        );
        assert!(rfc3339(i64::MAX, 0, false, &mut buf).is_none());
        assert!(rfc3339(i64::MIN, 0, true, &mut buf).is_none());
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(go_duration(3_723_500_000_000), "1h2m3.5s");
        assert_eq!(go_duration(1_500_000), "1.5ms");
        assert_eq!(go_duration(-2_000), "-2µs");
        assert_eq!(go_duration(60_000_000_000), "1m0s");
        assert_eq!(go_duration(i64::MIN), "-2562047h47m16.854775808s");
    }
}
