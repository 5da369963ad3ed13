//! The value parsers the commands share: a template id, a time (`--since`), a rate, a ratio,
//! a field separator, a send window.

/// `--template`: 1 to 256 printable characters, no `@` (no vendor's template id has one, and
/// the status page shows it: an address there would be personal data).
pub fn parse_template(v: &str) -> Result<String, String> {
    if v.trim().is_empty() || v.len() > 256 || v.chars().any(char::is_control) || v.contains('@') {
        return Err(
            "must be 1 to 256 printable characters, no at sign (the vendor's template id, alias or name)"
                .into(),
        );
    }
    Ok(v.to_string())
}

/// `--since`: an RFC 3339 time, or a duration ago (`90m`, `2h 30m`). A duration no date can
/// be that long ago (`300000y`) is refused, never clamped: a cutoff must mean what was typed.
pub fn parse_since(v: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let ago = humantime::parse_duration(v)
        .map_err(|e| format!("neither an RFC 3339 time nor a duration like 2h ({e})"))?;
    ago_from(chrono::Utc::now(), ago)
}

/// `--older-than`: a duration (`30d`, `12h`) that a date can be that long ago.
pub fn parse_age(v: &str) -> Result<chrono::TimeDelta, String> {
    let age = humantime::parse_duration(v).map_err(|e| format!("not a duration like 30d ({e})"))?;
    ago_from(chrono::Utc::now(), age)?;
    chrono::TimeDelta::from_std(age).map_err(|_| TOO_LONG.into())
}

const TOO_LONG: &str = "is longer ago than a date can be (at most some 260 000 years, e.g. 30d)";

/// The instant `ago` before `now`, or why there is none.
fn ago_from(
    now: chrono::DateTime<chrono::Utc>,
    ago: std::time::Duration,
) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::TimeDelta::from_std(ago)
        .ok()
        .and_then(|d| now.checked_sub_signed(d))
        .ok_or_else(|| TOO_LONG.into())
}

pub fn parse_rate(v: &str) -> Result<f64, String> {
    let max = crate::config::MAX_RATE_PER_S as f64;
    match v.parse::<f64>() {
        Ok(r) if (0.01..=max).contains(&r) => Ok(r),
        _ => Err(format!(
            "'{}' is not a rate: requests per second, from 0.01 to {max} (e.g. 100)",
            v.chars().take(20).collect::<String>()
        )),
    }
}

pub fn parse_ratio(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err("must be a number between 0 and 1".into()),
    }
}

/// `configure --weight`: a campaign's weight under its rate-limit key, within
/// [`crate::store::campaigns::WEIGHT_MIN`]..=[`crate::store::campaigns::WEIGHT_MAX`].
pub fn parse_weight(v: &str) -> Result<f64, String> {
    use crate::store::campaigns::{WEIGHT_MAX, WEIGHT_MIN};
    match v.parse::<f64>() {
        Ok(w) if (WEIGHT_MIN..=WEIGHT_MAX).contains(&w) => Ok(w),
        _ => Err(format!(
            "must be a number from {WEIGHT_MIN} to {WEIGHT_MAX}"
        )),
    }
}

/// `--delimiter`: one ASCII separator; `tab` (or `\t`) for a tab.
pub fn parse_delimiter(v: &str) -> Result<u8, String> {
    match v {
        "tab" | "\\t" | "\t" => Ok(b'\t'),
        _ if v.len() == 1 && v.is_ascii() && v != "\"" => Ok(v.as_bytes()[0]),
        _ => Err("must be one character, e.g. , or ; (or `tab`)".into()),
    }
}

pub use crate::window::WindowArg;

pub fn parse_window(v: &str) -> Result<WindowArg, String> {
    if v.eq_ignore_ascii_case("none") {
        return Ok(WindowArg::None);
    }
    let (start, end) = crate::window::parse_span(v)?;
    Ok(WindowArg::Span(start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_longer_ago_than_a_date_can_be_is_refused_never_clamped() {
        for huge in ["300000y", "300000000y", "18446744073709551615s"] {
            assert!(
                parse_since(huge).unwrap_err().contains("longer ago"),
                "{huge}"
            );
            assert!(
                parse_age(huge).unwrap_err().contains("longer ago"),
                "{huge}"
            );
        }
        let week = parse_age("7d").unwrap();
        assert_eq!(week, chrono::TimeDelta::days(7));
        let since = parse_since("2h").unwrap();
        let took = chrono::Utc::now() - since;
        assert!(
            took >= chrono::TimeDelta::hours(2)
                && took < chrono::TimeDelta::hours(2) + chrono::TimeDelta::minutes(1)
        );
        assert!(parse_age("soon").is_err());
    }

    #[test]
    fn a_live_rate_is_bounded_and_an_absurd_one_is_refused_short() {
        assert_eq!(parse_rate("100"), Ok(100.0));
        assert_eq!(parse_rate("100000"), Ok(100_000.0));
        for bad in ["1e30", "100001", "0", "NaN", "inf", "-5"] {
            let err = parse_rate(bad).unwrap_err();
            assert!(err.contains("from 0.01 to 100000"), "{bad}: {err}");
        }
        let long = "9".repeat(5000);
        assert!(
            parse_rate(&long).unwrap_err().len() < 120,
            "the value is cut"
        );
    }

    #[test]
    fn a_template_is_checked_and_an_address_shaped_one_refused_unechoed() {
        assert_eq!(parse_template("d-123"), Ok("d-123".into()));
        for bad in ["", "  ", "a\nb", &"t".repeat(257), "ann@example.com"] {
            let err = parse_template(bad).unwrap_err();
            assert!(!err.contains('@'), "{err}");
        }
    }
}
