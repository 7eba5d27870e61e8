//! Attention's operands at concrete shapes: every extent, each operand's strides as
//! `(batch, head, position, element)` whichever of the 3-D and 4-D layouts it has, and the mask's
//! broadcast strides over `(batch, head, query, key)`. Host and GPU address the operands through
//! these alone.

use crate::ops::OpError;

/// Strides of one operand along `(batch, head, position, element)`.
pub(super) type Strides = [usize; 4];

/// The mask's strides over `(batch, q head, query, key)` (0 where it broadcasts) and the length
/// of its key axis (keys past it are masked: the spec pads a short mask with `-inf` / false).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MaskGeometry {
    pub(super) strides: Strides,
    pub(super) len: usize,
}

/// See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Geometry {
    pub(super) b: usize,
    pub(super) hq: usize,
    pub(super) hkv: usize,
    pub(super) sq: usize,
    /// Keys and values of the `K` and `V` inputs.
    pub(super) skv: usize,
    /// Keys and values of `past_key` and `past_value` (0 without them).
    pub(super) past: usize,
    /// Head sizes of Q and K, and of V.
    pub(super) dk: usize,
    pub(super) dv: usize,
    pub(super) three_d: bool,
    pub(super) q: Strides,
    pub(super) k: Strides,
    pub(super) v: Strides,
    pub(super) y: Strides,
    pub(super) mask: Option<MaskGeometry>,
}

/// The operand shapes a [`Geometry`] is made from.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shapes<'a> {
    pub(super) q: &'a [usize],
    pub(super) k: &'a [usize],
    pub(super) v: &'a [usize],
    pub(super) mask: Option<&'a [usize]>,
    pub(super) past_key: Option<&'a [usize]>,
    pub(super) past_value: Option<&'a [usize]>,
    pub(super) nonpad: Option<&'a [usize]>,
}

fn err(why: impl Into<String>) -> OpError {
    OpError::infer(format!("Attention: {}", why.into()))
}

/// `(batch, heads, positions, head size)` and strides of a 4-D `[B, H, S, D]` operand, or of a 3-D
/// `[B, S, H * D]` one split into `heads`.
fn split(name: &str, dims: &[usize], heads: Option<usize>) -> Result<([usize; 4], Strides), OpError> {
    match (dims, heads) {
        (&[b, h, s, d], _) => Ok(([b, h, s, d], [h * s * d, s * d, d, 1])),
        (&[b, s, hidden], Some(h)) if h > 0 && hidden % h == 0 => {
            let d = hidden / h;
            Ok(([b, h, s, d], [s * hidden, d, hidden, 1]))
        }
        (&[_, _, hidden], _) => Err(err(format!(
            "a 3-D {name} needs q_num_heads and kv_num_heads dividing its hidden size {hidden}, found {heads:?}"
        ))),
        _ => Err(err(format!("{name} must be 3-D or 4-D, found {dims:?}"))),
    }
}

impl Geometry {
    /// Checks the shapes against each other and the head counts (for 3-D inputs).
    pub(super) fn new(s: &Shapes<'_>, q_heads: Option<usize>, kv_heads: Option<usize>) -> Result<Geometry, OpError> {
        if s.q.len() != s.k.len() || s.q.len() != s.v.len() {
            return Err(err(format!("Q {:?}, K {:?} and V {:?} must have one rank", s.q, s.k, s.v)));
        }
        let ([b, hq, sq, dk], q) = split("Q", s.q, q_heads)?;
        let ([kb, hkv, skv, kd], k) = split("K", s.k, kv_heads)?;
        let ([vb, vh, vs, dv], v) = split("V", s.v, kv_heads)?;
        if [kb, vb] != [b, b] || vh != hkv || vs != skv || kd != dk {
            return Err(err(format!(
                "K {:?} and V {:?} do not match Q {:?} (batch, kv heads, kv length, head size)",
                s.k, s.v, s.q
            )));
        }
        if hkv == 0 || hq % hkv != 0 {
            return Err(err(format!("{hq} query heads are not a multiple of {hkv} key/value heads")));
        }
        let past = match (s.past_key, s.past_value) {
            (None, None) => 0,
            (Some(&[pb, ph, p, pd]), Some(&[qb, qh, pv, pdv]))
                if [pb, ph, pd] == [b, hkv, dk] && [qb, qh, pv, pdv] == [b, hkv, p, dv] =>
            {
                p
            }
            (pk, pv) => {
                return Err(err(format!(
                    "past_key {pk:?} and past_value {pv:?} must come together as [{b}, {hkv}, past, {dk}] and [{b}, {hkv}, past, {dv}]"
                )));
            }
        };
        if let Some(n) = s.nonpad
            && (n != [b] || past > 0)
        {
            return Err(err(format!("nonpad_kv_seqlen must be [{b}] and come without past_key, found {n:?}")));
        }
        let total = past + skv;
        let mask = s.mask.map(|m| mask_geometry(m, [b, hq, sq, total])).transpose()?;
        let three_d = s.q.len() == 3;
        let y = if three_d { [sq * hq * dv, dv, hq * dv, 1] } else { [hq * sq * dv, sq * dv, dv, 1] };
        Ok(Geometry { b, hq, sq, hkv, skv, past, dk, dv, three_d, q, k, v, y, mask })
    }

    /// Keys a query sees: the past ones and the new ones.
    pub(super) fn total(&self) -> usize {
        self.past + self.skv
    }

    /// Y's dimensions.
    pub(super) fn y_dims(&self) -> Vec<usize> {
        if self.three_d { vec![self.b, self.sq, self.hq * self.dv] } else { vec![self.b, self.hq, self.sq, self.dv] }
    }

    /// The strides of the past cache of element size `d`.
    pub(super) fn past_strides(&self, d: usize) -> Strides {
        [self.hkv * self.past * d, self.past * d, d, 1]
    }
}

/// The mask's geometry over `out = [B, Hq, Sq, T]`: its leading axes broadcast one way, its last
/// may be shorter than `T`.
fn mask_geometry(m: &[usize], out: [usize; 4]) -> Result<MaskGeometry, OpError> {
    let bad = || err(format!("attn_mask {m:?} does not broadcast to {out:?} (its last axis at most {})", out[3]));
    let (&len, lead) = m.split_last().ok_or_else(bad)?;
    if m.len() > 4 || len > out[3] {
        return Err(bad());
    }
    let mut strides = [0usize; 4];
    let mut pitch = len;
    strides[3] = 1;
    for (i, &d) in lead.iter().enumerate().rev() {
        let axis = 4 - m.len() + i;
        if d != 1 && d != out[axis] {
            return Err(bad());
        }
        strides[axis] = if d == 1 { 0 } else { pitch };
        pitch *= d;
    }
    Ok(MaskGeometry { strides, len })
}
