//! Resource quantities as the API server reads them: the Rust twin of apimachinery's
//! `resource.ParseQuantity` (v0.36) and of the CEL quantity library built on it (`isQuantity`,
//! `quantity(…).isInteger()`, `asInteger()`, `compareTo()`), which the CRD's rules on
//! `resources` use.
//!
//! Only what those rules need is ported: whether a string parses, its exact value (with the API
//! server's rounding up to 1n and its cap of binary-suffixed values at 2⁶³−1), and whether it
//! has the int64 representation `isInteger()` asks for. That last one is a property of the
//! spelling, not only of the value: `1`, `1k` and `1Ki` are integers, `1.0` and `1000m` are not.

use std::cmp::Ordering;

/// A quantity the API server accepts, with its exact value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedQuantity {
    negative: bool,
    /// Significant decimal digits (0–9), without leading or trailing zeros; empty for zero.
    digits: Vec<u8>,
    /// The value is `digits × 10^exp`.
    exp: i64,
    /// The value as an int64, when the API server's parser keeps it as one (CEL `isInteger()`).
    int64: Option<i64>,
}

/// How a suffix scales the number (`interpret` of apimachinery's suffixer).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    /// `""`, `n` … `E`, or `e<int>`: times 10^exponent.
    Decimal,
    /// `Ki` … `Ei`: times 2^exponent.
    Binary,
}

/// The parts of a quantity string (`parseQuantityString`).
struct Parts<'a> {
    positive: bool,
    /// Integer digits without leading zeros (`"0"` when there are none).
    num: &'a str,
    /// Fraction digits.
    denom: &'a str,
    suffix: &'a str,
    /// Whether the number as written (sign, integer, fraction) has a digit: the slow path of
    /// ParseQuantity parses it again and refuses `.` and `-` (which the fast path takes as 0).
    has_digit: bool,
}

fn split(s: &str) -> Option<Parts<'_>> {
    let parts = |positive, num, denom, number: &str, suffix| Parts {
        positive,
        num,
        denom,
        suffix,
        has_digit: number.bytes().any(|c| c.is_ascii_digit()),
    };
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Some(parts(positive, "0", "", "0", ""));
    }
    let start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = if pos == start {
        "0"
    } else {
        s.get(start..pos)?
    };
    if pos >= end {
        return Some(parts(positive, num, "", s, ""));
    }
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = s.get(start..pos)?;
        if pos >= end {
            return Some(parts(positive, num, denom, s, ""));
        }
    }
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && matches!(b[pos], b'-' | b'+') {
        pos += 1;
    }
    while pos < end {
        if !b[pos].is_ascii_digit() {
            return None;
        }
        pos += 1;
    }
    Some(parts(
        positive,
        num,
        denom,
        s.get(..suffix_start)?,
        s.get(suffix_start..)?,
    ))
}

/// The base-10 or base-2 exponent a suffix stands for.
fn interpret(suffix: &str) -> Option<(Format, i32)> {
    let decimal = |e| Some((Format::Decimal, e));
    let binary = |e| Some((Format::Binary, e));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ if suffix.len() > 1 && suffix.starts_with(['e', 'E']) => {
            // strconv.ParseInt(…, 10, 64), then a conversion to int32 that wraps.
            let rest = &suffix[1..];
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let exponent: i64 = rest.parse().ok()?;
            decimal(exponent as i32)
        }
        _ => None,
    }
}

/// `int64Amount.AsInt64`: `value × 10^scale` when that is an integer that fits.
fn int64_at_scale(value: i64, scale: i32) -> Option<i64> {
    match scale.cmp(&0) {
        Ordering::Equal => Some(value),
        Ordering::Less => None,
        Ordering::Greater if value == 0 => Some(0),
        Ordering::Greater => {
            let mut v = value;
            for _ in 0..scale {
                v = v.checked_mul(10)?;
            }
            Some(v)
        }
    }
}

impl ParsedQuantity {
    /// `resource.ParseQuantity`: None when the API server refuses the string (CEL
    /// `isQuantity` is false). Accepts a little more than [`crate::rules::QUANTITY_RE`]
    /// (`G` and `.` are zero), as the API server does.
    pub fn parse(s: &str) -> Option<ParsedQuantity> {
        if s.is_empty() {
            return None;
        }
        if s == "0" {
            return Some(ParsedQuantity {
                negative: false,
                digits: Vec::new(),
                exp: 0,
                int64: Some(0),
            });
        }
        let Parts {
            positive,
            num,
            denom,
            suffix,
            has_digit,
        } = split(s)?;
        let (format, exponent) = interpret(suffix)?;

        // The fast path of ParseQuantity, which keeps the value as an int64 with a decimal
        // scale; only such values are integers to CEL.
        let (precision, mut scale, mantissa): (i64, i32, i64) = match format {
            Format::Decimal => (18 - (num.len() + denom.len()) as i64, exponent, 1),
            Format::Binary if exponent >= 0 && denom.is_empty() => {
                let digits_of_suffix = (exponent as f32 * 3.0 / 10.0) as i64;
                (
                    15 - num.len() as i64 - digits_of_suffix - 1,
                    0,
                    1i64 << exponent,
                )
            }
            Format::Binary => (-1, 0, 1),
        };
        let mut int64 = None;
        let mut fast = false;
        if precision >= 0 {
            scale = scale.saturating_sub(denom.len() as i32);
            if scale >= -9 {
                // At most 18 digits: always an int64.
                let value: i64 = format!("{num}{denom}").parse().ok()?;
                if let Some(result) = value.checked_mul(mantissa) {
                    fast = true;
                    let result = if positive { result } else { -result };
                    int64 = int64_at_scale(result, scale);
                }
            }
        }

        // The exact value: digits × 10^exp (× 2^exponent for binary suffixes).
        let mut digits: Vec<u8> = num.bytes().chain(denom.bytes()).map(|c| c - b'0').collect();
        let mut exp = -(denom.len() as i64);
        match format {
            Format::Decimal => exp += i64::from(exponent),
            Format::Binary => {
                for _ in 0..exponent / 10 {
                    multiply(&mut digits, 1024);
                }
            }
        }
        if !fast && !has_digit {
            return None;
        }
        let mut q = ParsedQuantity {
            negative: !positive,
            digits,
            exp,
            int64,
        };
        q.normalize();
        if !fast {
            q.round_up_to_nano();
            if format == Format::Binary {
                let max = ParsedQuantity::from_i64(i64::MAX);
                if q.cmp_magnitude(&max) == Ordering::Greater {
                    q.digits = max.digits;
                    q.exp = max.exp;
                }
            }
        }
        if q.digits.is_empty() {
            q.negative = false;
        }
        Some(q)
    }

    fn from_i64(v: i64) -> ParsedQuantity {
        let mut q = ParsedQuantity {
            negative: v < 0,
            digits: v
                .unsigned_abs()
                .to_string()
                .bytes()
                .map(|c| c - b'0')
                .collect(),
            exp: 0,
            int64: Some(v),
        };
        q.normalize();
        q
    }

    /// CEL `isInteger()`: the API server holds the value as an int64 (`AsInt64`).
    pub fn is_integer(&self) -> bool {
        self.int64.is_some()
    }

    /// CEL `asInteger()`, when [`Self::is_integer`].
    pub fn as_integer(&self) -> Option<i64> {
        self.int64
    }

    /// CEL `sign()`.
    pub fn sign(&self) -> i64 {
        match (self.digits.is_empty(), self.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        }
    }

    /// CEL `compareTo()` (`Quantity.Cmp`).
    pub fn compare(&self, other: &ParsedQuantity) -> Ordering {
        match self.sign().cmp(&other.sign()) {
            Ordering::Equal if self.negative => other.cmp_magnitude(self),
            Ordering::Equal => self.cmp_magnitude(other),
            unequal => unequal,
        }
    }

    fn cmp_magnitude(&self, other: &ParsedQuantity) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        // The power of ten just above the leading digit decides, then the digits.
        let magnitude = |q: &ParsedQuantity| q.digits.len() as i64 + q.exp;
        magnitude(self)
            .cmp(&magnitude(other))
            .then_with(|| self.digits.cmp(&other.digits))
    }

    /// Strips leading and trailing zeros (the latter into `exp`).
    fn normalize(&mut self) {
        let leading = self.digits.iter().take_while(|d| **d == 0).count();
        self.digits.drain(..leading);
        while self.digits.last() == Some(&0) {
            self.digits.pop();
            self.exp += 1;
        }
        if self.digits.is_empty() {
            self.exp = 0;
        }
    }

    /// ParseQuantity rounds non-zero values away from zero to a multiple of 1n.
    fn round_up_to_nano(&mut self) {
        if self.digits.is_empty() || self.exp >= -9 {
            return;
        }
        // Digits at 10^-9 and above; what is below is non-zero (no trailing zeros).
        let keep = self.digits.len() as i64 + self.exp + 9;
        if keep <= 0 {
            self.digits = vec![1];
        } else {
            self.digits.truncate(keep as usize);
            let mut i = self.digits.len();
            loop {
                if i == 0 {
                    self.digits.insert(0, 1);
                    break;
                }
                i -= 1;
                if self.digits[i] == 9 {
                    self.digits[i] = 0;
                } else {
                    self.digits[i] += 1;
                    break;
                }
            }
        }
        self.exp = -9;
        self.normalize();
    }
}

/// `digits` (most significant first) times a small factor.
fn multiply(digits: &mut Vec<u8>, factor: u32) {
    let mut carry = 0u32;
    for d in digits.iter_mut().rev() {
        let v = u32::from(*d) * factor + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    while carry > 0 {
        digits.insert(0, (carry % 10) as u8);
        carry /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> ParsedQuantity {
        ParsedQuantity::parse(s).unwrap_or_else(|| panic!("{s} does not parse"))
    }

    #[test]
    fn parses_what_the_api_server_parses() {
        for ok in [
            "0",
            "1",
            "+1",
            "-1",
            "1.",
            ".5",
            "1.5",
            "16Gi",
            "500m",
            "1e3",
            "1E-3",
            "1E",
            "1Ei",
            "007",
            "-0",
            "G",
            ".",
            "1.G",
            "e3",
            "-",
            "99999999999999999999Ti",
        ] {
            assert!(ParsedQuantity::parse(ok).is_some(), "{ok}");
        }
        for bad in [
            "",
            "lots",
            "1GB",
            "1 Gi",
            "1ki",
            "1K",
            "1e",
            "1e+",
            "1e1.5",
            "1.2.3",
            "1e3Gi",
            "1e99999999999999999999",
            "1i",
        ] {
            assert!(ParsedQuantity::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn integers_as_cel_sees_them() {
        for (s, v) in [
            ("0", 0),
            ("1", 1),
            ("1k", 1000),
            ("1Ki", 1024),
            ("1e3", 1000),
            ("1.5k", 1500),
            ("-2", -2),
            ("1Ti", 1 << 40),
            ("99Gi", 99 << 30),
        ] {
            assert_eq!(q(s).as_integer(), Some(v), "{s}");
        }
        // Integral values spelled with a fraction or a sub-unit suffix, 19 digits, and binary
        // values beyond the fast path are not int64s to the API server.
        for s in [
            "1.0",
            "1000m",
            "0.5",
            "1n",
            "1234567890123456789",
            "8Ei",
            "1Pi",
            "999Ti",
            "99999999999999999999Ti",
            "1e19",
        ] {
            assert_eq!(q(s).as_integer(), None, "{s}");
        }
    }

    #[test]
    fn compares_exactly() {
        use Ordering::*;
        for (a, b, want) in [
            ("1", "1000m", Equal),
            ("1Ki", "1024", Equal),
            ("1.5Gi", "1536Mi", Equal),
            ("2", "1", Greater),
            ("500m", "0.5", Equal),
            ("1e3", "1k", Equal),
            ("-1", "0", Less),
            ("-2", "-1", Less),
            ("0", "-0", Equal),
            ("0.0000000001", "1n", Equal),
            ("99999999999999999999Ti", "9223372036854775807", Equal),
            ("99999999999999999999T", "9223372036854775807", Greater),
            ("1Mi", "1M", Greater),
        ] {
            assert_eq!(q(a).compare(&q(b)), want, "{a} vs {b}");
        }
        assert_eq!(q("-5").sign(), -1);
        assert_eq!(q("0").sign(), 0);
        assert_eq!(q(".").sign(), 0);
    }
}
