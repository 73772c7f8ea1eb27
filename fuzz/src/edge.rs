//! Values drawn toward the edges where size arithmetic and casts break: zero, one, minus one,
//! the limits of each width, powers of two past every budget, and for floats the non-finite.

use arbitrary::{Result, Unstructured};

const INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    -2,
    3,
    i64::MAX,
    i64::MIN,
    i64::MAX - 1,
    i64::MIN + 1,
    i32::MAX as i64,
    i32::MIN as i64,
    1 << 31,
    1 << 32,
    (1 << 32) + 1,
    1 << 40,
    1 << 62,
    (1 << 62) + 1,
    -(1 << 40),
    u32::MAX as i64,
    65_535,
    65_536,
    1 << 20,
];

const FLOATS: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f32::MAX as f64,
    f32::MIN as f64,
    f32::MIN_POSITIVE as f64,
    1e-45,
    1e30,
    -1e30,
    4_294_967_296.0,
    9.3e18,
];

/// An integer: an edge value, a small one, or any.
pub fn int(u: &mut Unstructured) -> Result<i64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 | 1 => *u.choose(INTS)?,
        2 => u.int_in_range(-4..=16)?,
        _ => u.arbitrary()?,
    })
}

/// A float: an edge value, a small one, or any bit pattern.
pub fn float(u: &mut Unstructured) -> Result<f64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 | 1 => *u.choose(FLOATS)?,
        2 => f64::from(u.int_in_range(-8..=8i8)?) / 2.0,
        _ => f64::from(f32::from_bits(u.arbitrary()?)),
    })
}

/// A length for a dimension or a count: mostly small, sometimes an edge value.
pub fn dim(u: &mut Unstructured) -> Result<i64> {
    Ok(if u.ratio(1, 4)? {
        int(u)?
    } else {
        u.int_in_range(0..=6)?
    })
}

/// A name: one of the given, a fresh one, or one of the shapes names take that break things
/// (empty, the separators that output files are named with, very long, control characters).
pub fn name(u: &mut Unstructured, known: &[String]) -> Result<String> {
    Ok(match u.int_in_range(0..=7u8)? {
        0..=3 if !known.is_empty() => u.choose(known)?.clone(),
        4 => String::new(),
        5 => (*u.choose(&["y/0", "y:0", "y_0", "../up", "a\nb", ".", "\u{0}", "é"])?).into(),
        6 => "n".repeat(u.int_in_range(200..=5000)?),
        _ => format!("fuzz_{}", u.int_in_range(0..=9u8)?),
    })
}
