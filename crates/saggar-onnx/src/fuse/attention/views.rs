//! Reading a value through the Transposes and reshaping views that produced it: the strides of the
//! final view over the first tensor's memory, when one exists.
//!
//! Each axis is tracked as a list of atoms `(extent, stride)`, outer to inner. A Transpose permutes
//! axes; a reshape regroups the atoms of all axes in order into the new extents, splitting an atom
//! where a new extent divides it (always possible for one strided axis). Merged atoms stay separate
//! until the end, so a merge that a later reshape splits again (`[B, H, S, D] → [B·H, S, D] → ... →
//! [B, H, D, S]`, as exporters write a key transpose) costs nothing. At the end every axis must be
//! one stride: its atoms contiguous among themselves. Atoms of extent 1 are kept and checked like
//! any other, so whether a chain reads through strides does not depend on a batch of 1.
//!
//! A slice of an axis (a Split's part, a Slice with unit steps) or one index of it (a Gather of a
//! constant index, the axis dropped) keeps the strides and moves the view's start, `offset`
//! elements into the first tensor: so Q, K and V split off one stacked projection are read in place.

/// The atoms of one axis.
type Axis = Vec<(usize, i64)>;

/// A strided view being followed through a chain of views.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    axes: Vec<Axis>,
    /// Where the view's first element is, in elements of the first tensor.
    offset: i64,
}

impl Layout {
    /// A contiguous tensor of `dims`.
    pub(crate) fn contiguous(dims: &[usize]) -> Layout {
        let strides = crate::ops::gpu::contiguous(dims);
        Layout { axes: dims.iter().zip(strides).map(|(&d, s)| vec![(d, s)]).collect(), offset: 0 }
    }

    /// The axes permuted (`out[i] = in[perm[i]]`), or `None` for a permutation of another rank.
    pub(crate) fn transpose(&self, perm: &[usize]) -> Option<Layout> {
        if perm.len() != self.axes.len() {
            return None;
        }
        Some(Layout {
            axes: perm.iter().map(|&a| self.axes.get(a).cloned()).collect::<Option<_>>()?,
            offset: self.offset,
        })
    }

    /// Elements `start..start + len` of axis `axis`, or `None` when the axis's atoms do not allow it
    /// (the slice must keep every atom but the outermost whole).
    pub(crate) fn slice(&self, axis: usize, start: usize, len: usize) -> Option<Layout> {
        let atoms = self.axes.get(axis)?;
        let (&(outer, stride), inner_atoms) = atoms.split_first()?;
        let inner: usize = inner_atoms.iter().map(|a| a.0).product();
        if inner == 0 || !start.is_multiple_of(inner) || !len.is_multiple_of(inner) || start + len > outer * inner {
            return None;
        }
        let mut axes = self.axes.clone();
        axes[axis][0] = (len / inner, stride);
        let moved = i64::try_from(start / inner).ok()?.checked_mul(stride)?;
        Some(Layout { axes, offset: self.offset.checked_add(moved)? })
    }

    /// Index `index` of axis `axis`, the axis dropped.
    pub(crate) fn select(&self, axis: usize, index: usize) -> Option<Layout> {
        let mut one = self.slice(axis, index, 1)?;
        one.axes.remove(axis);
        Some(one)
    }

    /// Where the view starts, in elements of the first tensor.
    pub(crate) fn offset(&self) -> i64 {
        self.offset
    }

    /// The same elements viewed as `dims` (row-major order), or `None` when an atom cannot be split
    /// at a boundary of `dims`.
    pub(crate) fn reshape(&self, dims: &[usize]) -> Option<Layout> {
        let mut atoms: std::collections::VecDeque<(usize, i64)> = self.axes.iter().flatten().copied().collect();
        let mut axes = Vec::with_capacity(dims.len());
        for &n in dims {
            let mut axis: Axis = Vec::new();
            let mut prod = 1usize;
            // At least one atom per axis when the next is an extent of 1, so a batch of 1 takes the
            // same atoms as any other batch.
            while prod < n || (axis.is_empty() && atoms.front().is_some_and(|a| a.0 == 1)) {
                let (e, s) = atoms.pop_front()?;
                let need = n.checked_div(prod)?;
                if n % prod != 0 {
                    return None;
                }
                if e <= need && need % e == 0 {
                    axis.push((e, s));
                    prod *= e;
                } else if e % need == 0 {
                    // The outer `need` of the atom goes here; the rest stays next in line.
                    let inner = e / need;
                    axis.push((need, s.checked_mul(i64::try_from(inner).ok()?)?));
                    atoms.push_front((inner, s));
                    prod *= need;
                } else {
                    return None;
                }
            }
            if prod != n {
                return None;
            }
            axes.push(axis);
        }
        // Whatever is left holds one element.
        atoms.iter().all(|a| a.0 == 1).then_some(Layout { axes, offset: self.offset })
    }

    /// One stride per axis, when every axis's atoms are contiguous among themselves.
    pub(crate) fn strides(&self) -> Option<Vec<i64>> {
        self.axes
            .iter()
            .map(|axis| {
                for w in axis.windows(2) {
                    let ((_, outer), (e, inner)) = (w[0], w[1]);
                    if outer != inner.checked_mul(i64::try_from(e).ok()?)? {
                        return None;
                    }
                }
                Some(axis.last().map_or(1, |a| a.1))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_split_and_the_exporters_key_transpose_read_through_strides() {
        let (b, s, h, d) = (3, 5, 4, 2);
        // Q: [B, S, H*D] -> [B, S, H, D] -> [B, H, S, D].
        let q = Layout::contiguous(&[b, s, h * d]).reshape(&[b, s, h, d]).unwrap().transpose(&[0, 2, 1, 3]).unwrap();
        assert_eq!(q.strides().unwrap(), vec![(s * h * d) as i64, d as i64, (h * d) as i64, 1]);
        // K: ... -> [B*H, S, D] -> [B*H, D, S] -> [B, H, D, S]: the merge is split again.
        let k = q.reshape(&[b * h, s, d]).unwrap().transpose(&[0, 2, 1]).unwrap().reshape(&[b, h, d, s]).unwrap();
        assert_eq!(k.strides().unwrap(), vec![(s * h * d) as i64, d as i64, 1, (h * d) as i64]);
        // The merged [B*H, S, D] itself has no single stride for its first axis.
        assert!(q.reshape(&[b * h, s, d]).unwrap().strides().is_none());
        // Batch 1 decides the same way as any batch.
        let q1 = Layout::contiguous(&[1, s, h * d]).reshape(&[1, s, h, d]).unwrap().transpose(&[0, 2, 1, 3]).unwrap();
        assert!(q1.reshape(&[h, s, d]).unwrap().strides().is_none());
    }

    #[test]
    fn contiguous_reshapes_stay_contiguous_and_bad_splits_fail() {
        let l = Layout::contiguous(&[6, 4]);
        assert_eq!(l.reshape(&[2, 3, 4]).unwrap().strides().unwrap(), vec![12, 4, 1]);
        assert_eq!(l.reshape(&[24]).unwrap().strides().unwrap(), vec![1]);
        assert_eq!(l.reshape(&[6, 1, 4]).unwrap().strides().unwrap()[2], 1);
        let t = l.transpose(&[1, 0]).unwrap();
        assert!(t.reshape(&[24]).unwrap().strides().is_none(), "a transposed tensor does not flatten");
        assert!(Layout::contiguous(&[6]).reshape(&[4, 2]).is_none(), "another element count");
        assert!(
            Layout::contiguous(&[4, 3]).transpose(&[1, 0]).unwrap().reshape(&[2, 6]).is_none(),
            "3 is not split in 2"
        );
    }

    #[test]
    fn a_stacked_projection_split_or_gathered_reads_in_place_at_an_offset() {
        let (s, b, h, d) = (5, 2, 3, 4);
        let e = h * d;
        // GPT-2: [B, S, 3E] split along the last axis; part 1 (K) as heads [B, H, S, D].
        let k = Layout::contiguous(&[b, s, 3 * e]).slice(2, e, e).unwrap();
        let heads = k.reshape(&[b, s, h, d]).unwrap().transpose(&[0, 2, 1, 3]).unwrap();
        assert_eq!(heads.offset(), e as i64);
        assert_eq!(heads.strides().unwrap(), vec![(s * 3 * e) as i64, d as i64, (3 * e) as i64, 1]);
        // torchvision's ViT: [S, B, 3E] -> [S, B, 3, E] -> [3, S, B, E] (a transposed view) -> index 2.
        let stacked = Layout::contiguous(&[s, b, 3 * e]).reshape(&[s, b, 3, e]).unwrap();
        let v = stacked.transpose(&[2, 0, 1, 3]).unwrap().select(0, 2).unwrap();
        assert_eq!((v.offset(), v.strides().unwrap()), (2 * e as i64, vec![(b * 3 * e) as i64, (3 * e) as i64, 1]));
        // A slice that cuts through an inner atom has no strided form; one past the end is refused.
        let merged = Layout::contiguous(&[4, 6]).transpose(&[1, 0]).unwrap().reshape(&[24]).unwrap();
        assert!(merged.slice(0, 2, 4).is_none());
        assert!(Layout::contiguous(&[4, 6]).slice(1, 4, 3).is_none());
        assert!(Layout::contiguous(&[4, 6]).select(0, 4).is_none());
    }

    /// A SplitMix64 step.
    fn next(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Random chains of transposes and reshapes, applied for real to a tensor holding each
        /// element's offset: wherever the layout claims strides, they address every element.
        #[test]
        fn claimed_strides_address_every_element(mut seed: u64) {
            let rank = 1 + (next(&mut seed) % 4) as usize;
            let mut dims: Vec<usize> = (0..rank).map(|_| 1 + (next(&mut seed) % 4) as usize).collect();
            let n: usize = dims.iter().product();
            let mut values: Vec<i64> = (0..n as i64).collect();
            let mut layout = Some(Layout::contiguous(&dims));
            for _ in 0..1 + next(&mut seed) % 4 {
                if next(&mut seed).is_multiple_of(2) {
                    // A random permutation: elements move.
                    let mut perm: Vec<usize> = (0..dims.len()).collect();
                    for i in (1..perm.len()).rev() {
                        perm.swap(i, (next(&mut seed) % (i as u64 + 1)) as usize);
                    }
                    let out: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
                    let (src, dst) = (crate::ops::gpu::contiguous(&dims), crate::ops::gpu::contiguous(&out));
                    let mut moved = vec![0; n];
                    for (flat, slot) in moved.iter_mut().enumerate() {
                        let off: i64 = (0..out.len()).map(|k| (flat as i64 / dst[k]) % out[k] as i64 * src[perm[k]]).sum();
                        *slot = values[off as usize];
                    }
                    values = moved;
                    dims = out;
                    layout = layout.and_then(|l| l.transpose(&perm));
                } else {
                    // A random regrouping of the same element count: elements stay.
                    let mut factors: Vec<usize> = Vec::new();
                    let mut rest = n;
                    for p in [2, 3] {
                        while rest.is_multiple_of(p) {
                            factors.push(p);
                            rest /= p;
                        }
                    }
                    let mut out = vec![1usize];
                    for f in factors {
                        if next(&mut seed).is_multiple_of(2) { out.push(f) } else { *out.last_mut().unwrap() *= f }
                    }
                    if next(&mut seed).is_multiple_of(3) {
                        out.insert((next(&mut seed) % (out.len() as u64 + 1)) as usize, 1);
                    }
                    dims = out;
                    layout = layout.and_then(|l| l.reshape(&dims));
                }
            }
            if let Some(strides) = layout.and_then(|l| l.strides()) {
                let own = crate::ops::gpu::contiguous(&dims);
                for (flat, &want) in values.iter().enumerate() {
                    let at: i64 = (0..dims.len()).map(|k| (flat as i64 / own[k]) % dims[k] as i64 * strides[k]).sum();
                    proptest::prop_assert_eq!(at, want, "dims {:?} strides {:?} element {}", dims, strides, flat);
                }
            }
        }
    }
}
