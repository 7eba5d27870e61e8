//! Merging queued requests into one batch and splitting its outputs back: inputs that carry the
//! batch are concatenated along axis 0 (those that do not are equal across the batch, by the merge
//! key); a padded axis (a sequence) is padded to the longest request of the batch with its pad
//! value and each output that carries it is sliced back to each request's extent.

use std::hash::{DefaultHasher, Hash, Hasher};

use saggar_dispatch::OwnedTensor;
use saggar_shape::DType;

use crate::error::{Result, ServeError};
use crate::tensor::InputTensor;

/// Where the batch and the padded axis are in one input or output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TensorLayout {
    /// Axis 0 is the batch.
    pub batched: bool,
    /// The padded axis's index, if the tensor carries it.
    pub axis: Option<usize>,
    /// One element of the pad value, in the tensor's type (inputs with an axis only).
    pub pad: Vec<u8>,
}

/// A model's tensors' layouts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    /// Per input, in the model's order.
    pub inputs: Vec<TensorLayout>,
    /// Per output, in the model's order.
    pub outputs: Vec<TensorLayout>,
    /// The padded axis's buckets (empty without one).
    pub axis_buckets: Vec<u64>,
}

impl Layout {
    /// The extent of the padded axis in a request (the first input carrying it).
    pub fn axis_extent(&self, inputs: &[InputTensor]) -> Option<u64> {
        self.inputs.iter().zip(inputs).find_map(|(l, t)| l.axis.map(|a| t.shape[a]))
    }

    /// The merge key of a request: requests merge only with equal keys. It hashes every extent
    /// but the batch (a padded axis by its bucket) and the bytes of inputs without a batch axis.
    pub fn key(&self, inputs: &[InputTensor]) -> u64 {
        let mut h = DefaultHasher::new();
        for (l, t) in self.inputs.iter().zip(inputs) {
            for (i, &d) in t.shape.iter().enumerate() {
                if i == 0 && l.batched {
                    continue;
                }
                let d = if l.axis == Some(i) { self.axis_bucket(d) } else { d };
                d.hash(&mut h);
            }
            if !l.batched {
                t.data.hash(&mut h);
            }
        }
        h.finish()
    }

    fn axis_bucket(&self, extent: u64) -> u64 {
        self.axis_buckets.iter().copied().find(|&b| b >= extent).unwrap_or(extent)
    }

    /// One batch of the jobs' inputs (each in the model's order).
    pub fn merge(&self, jobs: &[&[InputTensor]]) -> Vec<InputTensor> {
        let target = jobs.iter().filter_map(|j| self.axis_extent(j)).max();
        (0..self.inputs.len())
            .map(|i| {
                let l = &self.inputs[i];
                let first = &jobs[0][i];
                if !l.batched {
                    return first.clone();
                }
                let mut shape = first.shape.clone();
                shape[0] = jobs.iter().map(|j| j[i].shape[0]).sum();
                if let (Some(a), Some(t)) = (l.axis, target) {
                    shape[a] = t;
                }
                let bytes: usize = shape.iter().product::<u64>() as usize * first.dtype.size_bytes();
                let mut data = Vec::with_capacity(bytes);
                for j in jobs {
                    match (l.axis, target) {
                        (Some(a), Some(t)) if j[i].shape[a] != t => pad_axis(&j[i], a, t, &l.pad, &mut data),
                        _ => data.extend_from_slice(&j[i].data),
                    }
                }
                InputTensor { name: first.name.clone(), dtype: first.dtype, shape, data }
            })
            .collect()
    }

    /// Each job's outputs from the batch's: its rows, and a padded axis sliced to its extent.
    /// `jobs` gives each job's rows and padded-axis extent.
    pub fn split(&self, outputs: Vec<OwnedTensor>, jobs: &[(u64, Option<u64>)]) -> Result<Vec<Vec<OwnedTensor>>> {
        let total: u64 = jobs.iter().map(|j| j.0).sum();
        let mut per_job: Vec<Vec<OwnedTensor>> = jobs.iter().map(|_| Vec::with_capacity(outputs.len())).collect();
        for (o, out) in outputs.into_iter().enumerate() {
            let l = self.outputs.get(o).cloned().unwrap_or_default();
            if !l.batched || jobs.len() == 1 {
                for slot in &mut per_job {
                    slot.push(out.clone());
                }
                continue;
            }
            if out.dims.first() != Some(&total) {
                return Err(ServeError::Internal(format!(
                    "output `{}` has shape {:?}, expected {total} rows for the merged batch",
                    out.name, out.dims
                )));
            }
            let row_bytes = out.data.len() / total.max(1) as usize;
            let mut offset = 0usize;
            for (slot, &(rows, extent)) in per_job.iter_mut().zip(jobs) {
                let bytes = &out.data[offset..offset + rows as usize * row_bytes];
                offset += rows as usize * row_bytes;
                let mut dims = out.dims.clone();
                dims[0] = rows;
                let data = match (l.axis, extent) {
                    (Some(a), Some(e)) if a < dims.len() && dims[a] > e => {
                        let sliced = slice_axis(bytes, &dims, a, e, out.dtype);
                        dims[a] = e;
                        sliced
                    }
                    _ => bytes.to_vec(),
                };
                slot.push(OwnedTensor { name: out.name.clone(), dtype: out.dtype, dims, data });
            }
        }
        Ok(per_job)
    }
}

/// Appends `t` padded along `axis` to extent `target` with the element `pad`.
fn pad_axis(t: &InputTensor, axis: usize, target: u64, pad: &[u8], out: &mut Vec<u8>) {
    let elem = t.dtype.size_bytes();
    let inner: usize = t.shape[axis + 1..].iter().product::<u64>() as usize;
    let outer: usize = t.shape[..axis].iter().product::<u64>() as usize;
    let have = t.shape[axis] as usize * inner * elem;
    let missing = (target - t.shape[axis]) as usize * inner;
    for o in 0..outer {
        out.extend_from_slice(&t.data[o * have..(o + 1) * have]);
        for _ in 0..missing {
            out.extend_from_slice(pad);
        }
    }
}

/// `bytes` of shape `dims`, keeping the first `keep` positions of `axis`.
fn slice_axis(bytes: &[u8], dims: &[u64], axis: usize, keep: u64, dtype: DType) -> Vec<u8> {
    let elem = dtype.size_bytes();
    let inner: usize = dims[axis + 1..].iter().product::<u64>() as usize * elem;
    let outer: usize = dims[..axis].iter().product::<u64>() as usize;
    let (full, kept) = (dims[axis] as usize * inner, keep as usize * inner);
    let mut out = Vec::with_capacity(outer * kept);
    for o in 0..outer {
        out.extend_from_slice(&bytes[o * full..o * full + kept]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, shape: &[u64], values: &[i64]) -> InputTensor {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        InputTensor { name: name.into(), dtype: DType::I64, shape: shape.to_vec(), data }
    }

    fn ints(bytes: &[u8]) -> Vec<i64> {
        bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
    }

    fn seq_layout() -> Layout {
        let input = TensorLayout { batched: true, axis: Some(1), pad: 0i64.to_le_bytes().to_vec() };
        Layout { inputs: vec![input.clone()], outputs: vec![input], axis_buckets: vec![4, 8] }
    }

    #[test]
    fn sequences_in_one_bucket_merge_padded_and_split_back() {
        let layout = seq_layout();
        let a = [t("ids", &[1, 3], &[1, 2, 3])];
        let b = [t("ids", &[2, 2], &[4, 5, 6, 7])];
        let c = [t("ids", &[1, 6], &[0; 6])];
        assert_eq!(layout.key(&a), layout.key(&b), "3 and 2 share the bucket 4");
        assert_ne!(layout.key(&a), layout.key(&c), "6 is in the bucket 8");
        let merged = layout.merge(&[&a, &b]);
        assert_eq!(merged[0].shape, [3, 3]);
        assert_eq!(ints(&merged[0].data), [1, 2, 3, 4, 5, 0, 6, 7, 0]);
        // An identity model: the outputs are the merged inputs.
        let out = OwnedTensor { name: "y".into(), dtype: DType::I64, dims: vec![3, 3], data: merged[0].data.clone() };
        let split = layout.split(vec![out], &[(1, Some(3)), (2, Some(2))]).unwrap();
        assert_eq!((split[0][0].dims.clone(), ints(&split[0][0].data)), (vec![1, 3], vec![1, 2, 3]));
        assert_eq!((split[1][0].dims.clone(), ints(&split[1][0].data)), (vec![2, 2], vec![4, 5, 6, 7]));
    }

    #[test]
    fn unbatched_inputs_merge_only_when_equal() {
        let layout = Layout {
            inputs: vec![TensorLayout { batched: true, ..Default::default() }, TensorLayout::default()],
            outputs: vec![TensorLayout { batched: true, ..Default::default() }],
            axis_buckets: Vec::new(),
        };
        let a = [t("x", &[1, 2], &[1, 2]), t("table", &[2], &[9, 9])];
        let b = [t("x", &[1, 2], &[3, 4]), t("table", &[2], &[9, 9])];
        let c = [t("x", &[1, 2], &[3, 4]), t("table", &[2], &[8, 9])];
        assert_eq!(layout.key(&a), layout.key(&b));
        assert_ne!(layout.key(&a), layout.key(&c));
        let merged = layout.merge(&[&a, &b]);
        assert_eq!((merged[0].shape.clone(), merged[1].shape.clone()), (vec![2, 2], vec![2]));
        let wrong = OwnedTensor { name: "y".into(), dtype: DType::I64, dims: vec![3, 2], data: vec![0; 48] };
        assert!(layout.split(vec![wrong], &[(1, None), (1, None)]).is_err());
    }
}
