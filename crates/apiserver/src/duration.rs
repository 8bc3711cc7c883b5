//! Go durations (`time.ParseDuration`), as the API takes them in `?timeout=` and in
//! `metav1.Duration` fields.

use std::time::Duration;

/// Go's `time.ParseDuration` for the non-negative durations a timeout takes (`"1.5s"`,
/// `"1m30s"`, `"250ms"`), with its error messages. A negative one is zero.
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {text:?}");
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_end];
        if number.is_empty() || number == "." {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        let scale = match unit {
            "" => return Err(format!("time: missing unit in duration {text:?}")),
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(format!("time: unknown unit {other:?} in duration {text:?}")),
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    if negative {
        return Ok(Duration::ZERO);
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}
