//! Kubernetes quantities ("500m", "2Gi", "1e3"), read exactly: the render
//! step validates them, the apply engine compares them (the API server
//! writes "2048Mi" back as "2Gi").

/// A Kubernetes quantity as an exact count of nano-units: "2Gi", "2048Mi",
/// "2", "2000m", "1.5", "1e3", "500n". None when it is not a quantity.
/// (Long on purpose: the grammar's cases in the order the API server reads them.)
pub fn quantity(text: &str) -> Option<i128> {
    let s = text.trim();
    let (number, suffix) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        // An exponent ("1e3", "1E-3") is part of the number.
        Some(i)
            if matches!(&s[i..i + 1], "e" | "E")
                && s[i + 1..]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '-' || c == '+')
                && s.len() > i + 1 =>
        {
            (s, "")
        }
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let (mantissa, exponent) = match number.find(['e', 'E']) {
        Some(i) => (&number[..i], number[i + 1..].parse::<i32>().ok()?),
        None => (number, 0),
    };
    let negative = mantissa.starts_with('-');
    let mantissa = mantissa.trim_start_matches(['+', '-']);
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole
            .chars()
            .chain(frac.chars())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    // digits * 10^(exponent - frac digits) * suffix, in nano-units (10^-9).
    let digits: i128 = format!("{whole}{frac}").parse().ok()?;
    let mut scale: i32 = exponent - i32::try_from(frac.len()).ok()? + 9;
    let mut value = digits;
    let binary: i128 = match suffix {
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        _ => 1,
    };
    scale += match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => 0,
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        _ => return None,
    };
    value = value.checked_mul(binary)?;
    if scale >= 0 {
        value = value.checked_mul(10i128.checked_pow(u32::try_from(scale).ok()?)?)?;
    } else {
        // Below a nano-unit the server rounds up; so do we.
        let div = 10i128.checked_pow(u32::try_from(-scale).ok()?)?;
        value = (value + div - 1) / div;
    }
    Some(if negative { -value } else { value })
}
