//! One JSON number read from text without `serde_json`: its digits eight at a time, its
//! value as `serde_json` would give it.
//!
//! The hot loop of a large JSON tensor. Only numbers whose digits fit a `u64` (19 at
//! most) and whose power of ten is at most 22 are read here; `exact` is false for the
//! others, which the caller hands to `serde_json` itself, so every number means what it
//! meant when the whole body went through `serde_json::Value`.

/// Where a number's text is not JSON's grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Malformed(pub(super) usize);

/// A number's parts, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Number {
    /// A leading minus sign.
    pub(super) negative: bool,
    /// Every digit, the fraction's included (meaningless unless `exact`).
    pub(super) digits: u64,
    /// The power of ten `digits` is scaled by: the exponent less the fraction's digits.
    pub(super) exponent: i64,
    /// No fraction and no exponent: what `serde_json` reads as an integer.
    pub(super) integer: bool,
    /// `digits` holds every digit (19 at most) and the exponent was short.
    pub(super) exact: bool,
    /// Where its text ends.
    pub(super) end: usize,
}

/// Powers of ten that are exact in a `f64`.
const EXACT: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Powers of ten up to eight digits.
const TENS: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

impl Number {
    /// Its value as `serde_json` computes it (`significand as f64`, then one multiply or
    /// divide by an exact power of ten: correctly rounded here, since the significand is
    /// below 2^64 and the power at most 10^22); `None` where that needs `serde_json`.
    #[inline(always)]
    pub(super) fn float(&self) -> Option<f64> {
        if !self.exact {
            return None;
        }
        // Through i64 where it fits: the same value, converted in one instruction.
        let mut f = match i64::try_from(self.digits) {
            Ok(digits) => digits as f64,
            Err(_) => self.digits as f64,
        };
        if !self.integer {
            let power = *EXACT.get(self.exponent.unsigned_abs() as usize)?;
            if self.exponent >= 0 {
                f *= power;
            } else {
                f /= power;
            }
        }
        Some(if self.negative { -f } else { f })
    }

    /// Its value as an integer, as `serde_json` reads one (`-0` is a float there); `None`
    /// where it is not one, `Err` where that needs `serde_json`.
    #[inline(always)]
    pub(super) fn integer(&self) -> Result<Option<i128>, ()> {
        match (self.integer, self.exact) {
            (false, _) => Ok(None),
            (true, false) => Err(()),
            (true, true) if self.negative && self.digits == 0 => Ok(None),
            (true, true) if self.negative => Ok(Some(-i128::from(self.digits))),
            (true, true) => Ok(Some(i128::from(self.digits))),
        }
    }
}

/// The digits of `x` (digit values, the first in the lowest byte) in its `n` lowest
/// bytes, 1 to 8: moved to the top (zeros below are leading zeros), then pairs, fours and
/// eights combined by three multiplications.
#[inline(always)]
fn combine(x: u64, n: usize) -> u64 {
    let mut v = x << (64 - 8 * n as u32);
    v = (v.wrapping_mul(10) + (v >> 8)) & 0x00FF_00FF_00FF_00FF;
    v = (v.wrapping_mul(100) + (v >> 16)) & 0x0000_FFFF_0000_FFFF;
    (v.wrapping_mul(10_000) + (v >> 32)) & 0xFFFF_FFFF
}

/// The value and count of the ASCII digits at `pos`, up to eight.
#[inline(always)]
fn eight(text: &[u8], pos: usize) -> (u64, usize) {
    let Some(chunk) = text.get(pos..).and_then(|t| t.first_chunk::<8>()) else {
        let mut value = 0;
        let mut n = 0;
        while let Some(d) = text.get(pos + n).map(|c| c.wrapping_sub(b'0')) {
            if d > 9 || n == 8 {
                break;
            }
            value = value * 10 + u64::from(d);
            n += 1;
        }
        return (value, n);
    };
    // Each byte less '0'; a byte is a digit if that is below 10. The lowest flagged byte
    // is exact (a carry only reaches the bytes above a flagged one).
    let x = u64::from_le_bytes(*chunk) ^ 0x3030_3030_3030_3030;
    let flagged = (x.wrapping_add(0x7676_7676_7676_7676) | x) & 0x8080_8080_8080_8080;
    let n = (flagged.trailing_zeros() / 8) as usize;
    if n == 0 {
        return (0, 0);
    }
    (combine(x, n), n)
}

/// A run of digits at `pos` added to `digits`: where it ends and how many it had.
#[inline(always)]
fn run(text: &[u8], mut pos: usize, digits: &mut u64) -> (usize, usize) {
    let start = pos;
    loop {
        let (value, n) = eight(text, pos);
        *digits = digits.wrapping_mul(TENS[n]).wrapping_add(value);
        pos += n;
        if n < 8 {
            return (pos, pos - start);
        }
    }
}

/// Reads the number at `start` (its first byte is `-` or a digit, else it is malformed).
#[inline(always)]
pub(super) fn number(text: &[u8], start: usize) -> Result<Number, Malformed> {
    let negative = text.get(start) == Some(&b'-');
    let first = start + usize::from(negative);
    let mut digits = 0u64;
    let (mut pos, whole) = run(text, first, &mut digits);
    // JSON: at least one digit, and no leading zero before another digit.
    if whole == 0 || (whole > 1 && text[first] == b'0') {
        return Err(Malformed(first));
    }
    let mut fraction = 0;
    if text.get(pos) == Some(&b'.') {
        let (end, n) = run(text, pos + 1, &mut digits);
        if n == 0 {
            return Err(Malformed(end));
        }
        (pos, fraction) = (end, n);
    }
    let mut exponent = 0i64;
    let mut short = true;
    let has_exponent = matches!(text.get(pos), Some(b'e' | b'E'));
    if has_exponent {
        pos += 1;
        let negative = text.get(pos) == Some(&b'-');
        pos += usize::from(matches!(text.get(pos), Some(b'-' | b'+')));
        let mut e = 0u64;
        let (end, n) = run(text, pos, &mut e);
        if n == 0 {
            return Err(Malformed(end));
        }
        short = n <= 9;
        exponent = if negative { -(e as i64) } else { e as i64 };
        pos = end;
    }
    Ok(Number {
        negative,
        digits,
        exponent: exponent - fraction as i64,
        integer: fraction == 0 && !has_exponent,
        exact: short && whole + fraction <= 19,
        end: pos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Number, Malformed> {
        number(text.as_bytes(), 0)
    }

    #[test]
    fn digits_are_read_eight_at_a_time_and_near_the_end() {
        for text in [
            "7",
            "12345678",
            "123456789012",
            "00000001",
            "98765432,",
            "1234 ",
        ] {
            let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
            let mut value = 0;
            let (end, n) = run(text.as_bytes(), 0, &mut value);
            assert_eq!((end, n), (digits.len(), digits.len()), "{text}");
            assert_eq!(value, digits.parse::<u64>().unwrap(), "{text}");
        }
    }

    #[test]
    fn numbers_mean_what_serde_json_reads() {
        for text in [
            "0",
            "-0",
            "1.5",
            "-0.12346",
            "3e5",
            "1E-7",
            "2.5e+3",
            "123456789.125",
        ] {
            let number = read(text).unwrap();
            assert_eq!(number.end, text.len(), "{text}");
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(number.float(), value.as_f64(), "{text}");
        }
        assert_eq!(read("-7").unwrap().integer(), Ok(Some(-7)));
        assert_eq!(
            read("-0").unwrap().integer(),
            Ok(None),
            "a float in serde_json"
        );
        assert_eq!(read("1.0").unwrap().integer(), Ok(None));
        assert_eq!(read("18446744073709551615").unwrap().integer(), Err(()));
        assert_eq!(read("1e400").unwrap().float(), None, "left to serde_json");
    }

    #[test]
    fn text_outside_the_grammar_is_malformed() {
        for text in ["-", "01", "1.", "1.e5", "1e", "1e+", "-a", ".5"] {
            assert!(read(text).is_err(), "{text}");
        }
    }
}
