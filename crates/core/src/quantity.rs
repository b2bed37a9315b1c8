//! Kubernetes resource quantities (`100m`, `1`, `0.5`, `128Mi`, `1Gi`, `1e3`, `2k`) as exact
//! integers: CPU in millicores, memory in bytes, rounded up as Kubernetes' `MilliValue` /
//! `Value` do.

/// Binary suffixes: each multiplies by 2^10 more than the one before, from `Ki` = 2^10.
const BINARY_SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// Decimal suffixes: each multiplies by 10^3 more than the one before, from `n` = 10^-9
/// (no suffix is 10^0).
const DECIMAL_SUFFIXES: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];

/// The (power of 2, power of 10) a named suffix multiplies by; `None` for any other suffix.
fn named_suffix(suffix: &str) -> Option<(u32, i32)> {
    let binary = BINARY_SUFFIXES
        .iter()
        .zip((10u32..).step_by(10))
        .map(|(name, pow2)| (*name, (pow2, 0)));
    let decimal = DECIMAL_SUFFIXES
        .iter()
        .zip((-9i32..).step_by(3))
        .map(|(name, pow10)| (*name, (0, pow10)));
    binary
        .chain(decimal)
        .find(|(name, _)| *name == suffix)
        .map(|(_, pows)| pows)
}

/// Parses `text` and returns `ceil(value × 10^scale)`: `scale` 3 gives millicores, 0 bytes.
/// Negative quantities are rejected (requests cannot be negative).
pub fn parse_scaled(text: &str, scale: i32) -> Result<i64, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty quantity".into());
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(format!(
            "{text:?} is not a quantity (expected e.g. 100m, 1, 128Mi)"
        ));
    }
    if frac_part.contains('.') {
        return Err(format!("{text:?} has more than one decimal point"));
    }
    let (binary_pow2, decimal_pow10) = match named_suffix(suffix) {
        Some(pows) => pows,
        None => {
            let exp = suffix
                .strip_prefix(['e', 'E'])
                .and_then(|e| e.parse::<i32>().ok())
                .filter(|e| e.abs() <= 1000)
                .ok_or_else(|| format!("{text:?}: unknown suffix {suffix:?}"))?;
            (0, exp)
        }
    };
    // Leading zeros do not count; trailing fraction digits shift the exponent.
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(format!("{text:?} is negative"));
    }
    if digits.len() > 36 {
        return Err(format!("{text:?} has too many digits"));
    }
    let mantissa: i128 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    let frac_len = i32::try_from(frac_part.len()).map_err(|_| format!("{text:?} is too long"))?;
    let pow10 = decimal_pow10 + scale - frac_len;
    let too_large = || format!("{text:?} is too large");
    let scaled = mantissa
        .checked_mul(1i128 << binary_pow2)
        .ok_or_else(too_large)?;
    let value = if pow10 >= 0 {
        let factor = 10i128
            .checked_pow(u32::try_from(pow10).map_err(|_| too_large())?)
            .ok_or_else(too_large)?;
        scaled.checked_mul(factor).ok_or_else(too_large)?
    } else {
        match 10i128.checked_pow(pow10.unsigned_abs()) {
            // ceil(scaled / divisor) for positive values
            Some(divisor) => (scaled + divisor - 1) / divisor,
            // smaller than any representable unit: rounds up to one
            None => 1,
        }
    };
    i64::try_from(value).map_err(|_| too_large())
}

/// CPU quantity in millicores.
pub fn cpu_millis(text: &str) -> Result<i64, String> {
    parse_scaled(text, 3)
}

/// Memory quantity in bytes.
pub fn memory_bytes(text: &str) -> Result<i64, String> {
    parse_scaled(text, 0)
}

/// `amount` of resource `name` as Kubernetes writes it: cpu in cores, or millicores when it
/// is not whole (`2`, `250m`); bytes (memory, storage, hugepages) in the largest binary
/// suffix that divides them (`128Mi`); anything else as the plain count.
pub fn format(name: &str, amount: i64) -> String {
    if name == "cpu" {
        return if amount % 1000 == 0 {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        };
    }
    if matches!(name, "memory" | "ephemeral-storage") || name.starts_with("hugepages-") {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i64 << shift;
            if amount != 0 && amount % unit == 0 {
                return format!("{}{suffix}", amount / unit);
            }
        }
    }
    amount.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_writes_kubernetes_quantities() {
        for (name, amount, want) in [
            ("cpu", 2000, "2"),
            ("cpu", 250, "250m"),
            ("cpu", 0, "0"),
            ("memory", 128 << 20, "128Mi"),
            ("memory", 3 << 30, "3Gi"),
            ("memory", 1000, "1000"),
            ("ephemeral-storage", 10 << 30, "10Gi"),
            ("nvidia.com/gpu", 2, "2"),
            ("pods", 110, "110"),
        ] {
            assert_eq!(format(name, amount), want, "{name} {amount}");
            let back = if name == "cpu" {
                cpu_millis(want)
            } else {
                parse_scaled(want, 0)
            };
            assert_eq!(back, Ok(amount), "{want} reads back");
        }
    }

    #[test]
    fn cpu_quantities_in_millicores() {
        let cases = [
            ("100m", 100),
            ("1", 1000),
            ("0.5", 500),
            (".25", 250),
            ("2", 2000),
            ("1.5k", 1_500_000),
            ("250000u", 250),
            ("1n", 1), // rounds up, as MilliValue does
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("0", 0),
            ("0.0", 0),
            ("+3", 3000),
        ];
        for (text, want) in cases {
            assert_eq!(cpu_millis(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn memory_quantities_in_bytes() {
        let cases = [
            ("128Mi", 128 * 1024 * 1024),
            ("1Gi", 1 << 30),
            ("1G", 1_000_000_000),
            ("64Ki", 65536),
            ("1.5Gi", 3 << 29),
            ("100", 100),
            ("2E", 2_000_000_000_000_000_000),
            ("1500m", 2), // 1.5 bytes rounds up
        ];
        for (text, want) in cases {
            assert_eq!(memory_bytes(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_garbage_and_negatives() {
        for text in [
            "", "abc", "1x", "1..2", "-1", "--1", "1Zi", "10E", "1e999999", ".",
        ] {
            assert!(memory_bytes(text).is_err(), "{text:?} must be rejected");
        }
        assert_eq!(memory_bytes("-0"), Ok(0));
    }
}
