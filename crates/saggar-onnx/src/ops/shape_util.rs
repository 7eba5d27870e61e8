//! Helpers every op family shares: numpy broadcasting of symbolic and concrete shapes, axis
//! normalisation, row-major strides and broadcast index mapping.

use saggar_shape::Dim;

use crate::ops::{OpError, unknown_dim};

/// Broadcasts two symbolic shapes (numpy rules). Fixed extents must agree or be 1; a symbolic extent
/// against 1 stays symbolic; two different symbols give an unknown extent (checked again once
/// shapes are concrete).
pub fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>, OpError> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank { Some(&a[i + a.len() - rank]) } else { None };
        let db = if i + b.len() >= rank { Some(&b[i + b.len() - rank]) } else { None };
        let d = match (da, db) {
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (Some(x), Some(y)) => match (x.as_fixed(), y.as_fixed()) {
                (Some(1), _) => y.clone(),
                (_, Some(1)) => x.clone(),
                (Some(p), Some(q)) if p == q => x.clone(),
                (Some(p), Some(q)) => {
                    return Err(OpError::infer(format!(
                        "shapes {} and {} do not broadcast (axis {i}: {p} vs {q})",
                        fmt_dims(a),
                        fmt_dims(b)
                    )));
                }
                (None, None) if x == y => x.clone(),
                (Some(_), None) => x.clone(),
                (None, Some(_)) => y.clone(),
                // An extent inference could not name meets a named one: they must be equal for the
                // model to run (checked again once shapes are concrete), so the name is kept.
                (None, None) if is_unnamed(x) => y.clone(),
                (None, None) if is_unnamed(y) => x.clone(),
                (None, None) => unknown_dim(),
            },
            (None, None) => unreachable!("i < rank means one side has the axis"),
        };
        out.push(d);
    }
    Ok(out)
}

/// Prefix of the symbols inference invents for extents it cannot name.
pub const UNNAMED_PREFIX: &str = "unk__";

/// Whether `d` is an extent inference could not name ([`crate::ops::UNKNOWN_DIM`] or an invented
/// `unk__N` symbol).
pub fn is_unnamed(d: &Dim) -> bool {
    d.symbol().is_some_and(|s| s == crate::ops::UNKNOWN_DIM || s.starts_with(UNNAMED_PREFIX))
}

/// Broadcasts several symbolic shapes.
pub fn broadcast_all<'a>(shapes: impl IntoIterator<Item = &'a [Dim]>) -> Result<Vec<Dim>, OpError> {
    let mut out: Vec<Dim> = Vec::new();
    for s in shapes {
        out = broadcast_dims(&out, s)?;
    }
    Ok(out)
}

/// Broadcasts two concrete shapes.
pub fn broadcast_concrete(a: &[usize], b: &[usize]) -> Result<Vec<usize>, OpError> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
            let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
            match (da, db) {
                (1, d) | (d, 1) => Ok(d),
                (p, q) if p == q => Ok(p),
                (p, q) => Err(OpError::eval(format!("shapes {a:?} and {b:?} do not broadcast ({p} vs {q})"))),
            }
        })
        .collect()
}

/// `[a, b, ?]` for error messages.
pub fn fmt_dims(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// An axis in `-rank..rank` made non-negative.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, OpError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(OpError::infer(format!("axis {axis} is out of range for rank {rank}")));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Several axes normalised; duplicates are an error.
pub fn normalize_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, OpError> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, rank)?;
        if out.contains(&n) {
            return Err(OpError::infer(format!("axis {a} is repeated in {axes:?}")));
        }
        out.push(n);
    }
    Ok(out)
}

/// Row-major strides of `dims`, in elements.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(dims[i + 1]);
    }
    s
}

/// Strides of an input of shape `dims` read at every index of the broadcast shape of rank `rank`:
/// broadcast axes get stride 0.
pub fn broadcast_strides(dims: &[usize], rank: usize) -> Vec<usize> {
    let own = strides(dims);
    let pad = rank - dims.len();
    (0..rank).map(|i| if i < pad || dims[i - pad] == 1 { 0 } else { own[i - pad] }).collect()
}

/// Calls `f(out_index, in_offsets)` for every element of `out_dims` in row-major order, with the
/// offset into each input given its broadcast strides. Walks an odometer, so it does not divide per
/// element.
pub fn for_each_broadcast<const N: usize>(
    out_dims: &[usize],
    in_strides: [&[usize]; N],
    mut f: impl FnMut(usize, [usize; N]),
) {
    let total: usize = out_dims.iter().product();
    if total == 0 {
        return;
    }
    let rank = out_dims.len();
    let mut index = vec![0usize; rank];
    let mut offsets = [0usize; N];
    for linear in 0..total {
        f(linear, offsets);
        for axis in (0..rank).rev() {
            index[axis] += 1;
            for (o, s) in offsets.iter_mut().zip(&in_strides) {
                *o += s[axis];
            }
            if index[axis] < out_dims[axis] {
                break;
            }
            for (o, s) in offsets.iter_mut().zip(&in_strides) {
                *o -= s[axis] * out_dims[axis];
            }
            index[axis] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_broadcasting() {
        let a = [Dim::symbolic("batch"), Dim::Fixed(1), Dim::Fixed(4)];
        let b = [Dim::Fixed(3), Dim::Fixed(1)];
        assert_eq!(broadcast_dims(&a, &b).unwrap(), vec![Dim::symbolic("batch"), Dim::Fixed(3), Dim::Fixed(4)]);
        assert!(broadcast_dims(&[Dim::Fixed(2)], &[Dim::Fixed(3)]).is_err());
        assert_eq!(broadcast_concrete(&[2, 1, 3], &[4, 1]).unwrap(), vec![2, 4, 3]);
    }

    #[test]
    fn broadcast_walk_matches_division() {
        let out = [2, 3, 4];
        let a_dims = [3, 1];
        let sa = broadcast_strides(&a_dims, 3);
        let mut seen = Vec::new();
        for_each_broadcast(&out, [&sa], |i, [oa]| seen.push((i, oa)));
        for (i, oa) in seen {
            let j = (i / 4) % 3;
            assert_eq!(oa, j);
        }
        assert_eq!(normalize_axis(-1, 3).unwrap(), 2);
        assert!(normalize_axis(3, 3).is_err());
    }
}
