//! `const fn` floating-point helpers (`core` has no `ln` or `exp`) and the
//! false-positive formulas built on them.
//!
//! Accurate to about 1e-15 relative for the arguments the sizing code uses.

const LN_2: f64 = core::f64::consts::LN_2;

/// Natural logarithm of a positive, normal `x` (`-inf` for 0 and below).
pub const fn ln(x: f64) -> f64 {
    if x <= 0.0 {
        return f64::NEG_INFINITY;
    }
    let bits = x.to_bits();
    let mut exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    // The fraction bits under a biased exponent of 0 (disjoint fields, so
    // their sum is their union): the mantissa in [1, 2).
    let mut mantissa = f64::from_bits((bits & ((1 << 52) - 1)) + (1023 << 52));
    if mantissa > core::f64::consts::SQRT_2 {
        mantissa /= 2.0;
        exponent += 1;
    }
    // ln(m) = 2 atanh(z) with z = (m - 1) / (m + 1), |z| < 0.172.
    let z = (mantissa - 1.0) / (mantissa + 1.0);
    let z2 = z * z;
    let mut term = z;
    let mut sum = 0.0;
    let mut k = 1;
    while k < 40 {
        sum += term / k as f64;
        term *= z2;
        k += 2;
    }
    exponent as f64 * LN_2 + 2.0 * sum
}

/// `e^x - 1`, precise for small `|x|` too.
pub const fn exp_m1(x: f64) -> f64 {
    if x.abs() >= 0.01 {
        return exp(x) - 1.0;
    }
    let mut term = x;
    let mut sum = 0.0;
    let mut k = 1;
    while k < 12 {
        sum += term;
        k += 1;
        term *= x / k as f64;
    }
    sum
}

/// `e^x`.
pub const fn exp(x: f64) -> f64 {
    if x < -708.0 {
        return 0.0;
    }
    if x > 709.0 {
        return f64::INFINITY;
    }
    let n = (x / LN_2) as i64;
    let r = x - n as f64 * LN_2;
    let mut term = 1.0;
    let mut sum = 1.0;
    let mut k = 1;
    while k < 30 {
        term *= r / k as f64;
        sum += term;
        k += 1;
    }
    sum * f64::from_bits(((n + 1023) as u64) << 52)
}

/// `base^exponent` for a small non-negative integer exponent.
pub const fn powi(base: f64, exponent: u32) -> f64 {
    let mut result = 1.0;
    let mut i = 0;
    while i < exponent {
        result *= base;
        i += 1;
    }
    result
}

/// Expected false-positive rate of a cuckoo filter with `fingerprint_bits`,
/// `slots` per bucket, at `load` (0..=1): `1 - (1 - 1/(2^f - 1))^(2·b·load)`.
pub const fn cuckoo_fpr(fingerprint_bits: u32, slots: usize, load: f64) -> f64 {
    let fingerprint_values = powi(2.0, fingerprint_bits) - 1.0;
    let probes = 2.0 * slots as f64 * load;
    -exp_m1(probes * ln(1.0 - 1.0 / fingerprint_values))
}

/// Expected false-positive rate of a Bloom filter of `bits` bits and
/// `hashes` hash functions holding `items`: `(1 - e^(-k·n/m))^k`.
pub const fn bloom_fpr(bits: usize, hashes: u32, items: usize) -> f64 {
    let fill = -exp_m1(-(hashes as f64) * items as f64 / bits as f64);
    powi(fill, hashes)
}

/// Smallest integer `>= x` (for non-negative `x` below 2^63).
pub const fn ceil_to_u64(x: f64) -> u64 {
    let truncated = x as u64;
    if (truncated as f64) < x {
        truncated.saturating_add(1)
    } else {
        truncated
    }
}
