//! Merging queued requests into one batch and splitting its outputs back: inputs that carry the
//! batch are concatenated along axis 0 (those that do not are equal across the batch, by the merge
//! key); a padded axis (a sequence) is padded to the longest request of the batch with its pad
//! value and each output that carries it is sliced back to each request's extent.

use std::hash::{DefaultHasher, Hash, Hasher};

use saggar_dispatch::{HostTensor, OwnedTensor};
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

    /// The bucket of the padded axis that holds `extent` (`extent` itself above every bucket).
    pub fn axis_bucket(&self, extent: u64) -> u64 {
        self.axis_buckets.iter().copied().find(|&b| b >= extent).unwrap_or(extent)
    }

    /// The padded axis's extent in the batch of `jobs`: the longest request's, or its bucket when
    /// `bucketed` (a batch written in place is written at a bucket of the axis).
    pub fn batch_axis(&self, jobs: &[&[InputTensor]], bucketed: bool) -> Option<u64> {
        let longest = jobs.iter().filter_map(|j| self.axis_extent(j)).max()?;
        Some(if bucketed { self.axis_bucket(longest) } else { longest })
    }

    /// Each input's dimensions in the batch of `jobs`: the rows of every job on a batch axis, the
    /// padded axis at `axis`.
    pub fn batch_dims(&self, jobs: &[&[InputTensor]], axis: Option<u64>) -> Vec<Vec<u64>> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let mut shape = jobs[0][i].shape.clone();
                if l.batched {
                    shape[0] = jobs.iter().map(|j| j[i].shape[0]).sum();
                }
                if let (Some(a), Some(t)) = (l.axis, axis) {
                    shape[a] = t;
                }
                shape
            })
            .collect()
    }

    /// Writes input `i` of the batch of `jobs` into `out`, which holds exactly its bytes at
    /// [`Layout::batch_dims`]: every job's rows in order (the first job's tensor for an input
    /// without a batch axis), each padded along the padded axis to `axis` with the pad value.
    pub fn write_input(&self, i: usize, jobs: &[&[InputTensor]], axis: Option<u64>, out: &mut [u8]) -> Result<()> {
        let l = &self.inputs[i];
        let sources = if l.batched { jobs } else { &jobs[..1] };
        let target = l.axis.zip(axis);
        let need: usize = sources.iter().map(|j| padded_len(&j[i], target)).sum();
        if need != out.len() {
            return Err(ServeError::Internal(format!(
                "input `{}`: the batch's {need} bytes do not fit the session's {} bytes of staging",
                jobs[0][i].name,
                out.len()
            )));
        }
        let mut offset = 0;
        for j in sources {
            let len = padded_len(&j[i], target);
            write_padded(&j[i], target, &l.pad, &mut out[offset..offset + len]);
            offset += len;
        }
        Ok(())
    }

    /// One batch of the jobs' inputs (each in the model's order), the padded axis at the longest
    /// request's extent (the session pads further, to the axis's bucket).
    pub fn merge(&self, jobs: &[&[InputTensor]]) -> Vec<InputTensor> {
        let axis = self.batch_axis(jobs, false);
        self.batch_dims(jobs, axis)
            .into_iter()
            .enumerate()
            .map(|(i, shape)| {
                let first = &jobs[0][i];
                if !self.inputs[i].batched && shape == first.shape {
                    return first.clone();
                }
                let bytes = shape.iter().product::<u64>() as usize * first.dtype.size_bytes();
                let mut data = vec![0; bytes];
                self.write_input(i, jobs, axis, &mut data).expect("sized by batch_dims");
                InputTensor { name: first.name.clone(), dtype: first.dtype, shape, data }
            })
            .collect()
    }

    /// Each job's outputs (those it asked for, in the order asked) from the batch's, borrowed from
    /// wherever they are (the session's pinned read-back buffer, or tensors it returned): its rows,
    /// and a padded axis sliced to its extent. One copy.
    pub fn split(&self, outputs: &[HostTensor<'_>], parts: &[Part<'_>]) -> Result<Vec<Vec<OwnedTensor>>> {
        let total: u64 = parts.iter().map(|p| p.rows).sum();
        for (o, out) in outputs.iter().enumerate() {
            if self.outputs.get(o).is_some_and(|l| l.batched) && out.dims.first() != Some(&total) {
                return Err(ServeError::Internal(format!(
                    "output `{}` has shape {:?}, expected {total} rows for the merged batch",
                    out.name, out.dims
                )));
            }
        }
        let mut first_row = 0;
        let mut per_job = Vec::with_capacity(parts.len());
        for part in parts {
            let mut tensors = Vec::with_capacity(part.outputs.len());
            for &o in part.outputs {
                let out = outputs.get(o).ok_or_else(|| ServeError::Internal(format!("the batch has no output {o}")))?;
                tensors.push(self.cut(o, out, first_row, part));
            }
            first_row += part.rows;
            per_job.push(tensors);
        }
        Ok(per_job)
    }

    /// Output `o`'s part of one job: rows `first_row..` of a batched output (all of it otherwise),
    /// the padded axis kept to the job's extent.
    fn cut(&self, o: usize, out: &HostTensor<'_>, first_row: u64, part: &Part<'_>) -> OwnedTensor {
        let (batched, axis) = self.outputs.get(o).map_or((false, None), |l| (l.batched, l.axis));
        let mut dims = out.dims.to_vec();
        let mut bytes = out.data;
        if batched {
            let row_bytes = out.data.len() / dims[0].max(1) as usize;
            let start = first_row as usize * row_bytes;
            bytes = &out.data[start..start + part.rows as usize * row_bytes];
            dims[0] = part.rows;
        }
        let data = match (axis, part.extent) {
            (Some(a), Some(e)) if a < dims.len() && dims[a] > e => {
                let sliced = slice_axis(bytes, &dims, a, e, out.dtype);
                dims[a] = e;
                sliced
            }
            _ => bytes.to_vec(),
        };
        OwnedTensor { name: out.name.to_string(), dtype: out.dtype, dims, data }
    }
}

/// Where one request's rows are in its batch, and what it asked for.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    /// Its rows on the batch axis.
    pub rows: u64,
    /// Its extent of the padded axis, if the model has one.
    pub extent: Option<u64>,
    /// The outputs it asked for, by index in the model's order, in the order asked.
    pub outputs: &'a [usize],
}

/// A view of a tensor the session returned, as a batch's output for [`Layout::split`].
pub fn view(t: &OwnedTensor) -> HostTensor<'_> {
    HostTensor { name: &t.name, dtype: t.dtype, dims: &t.dims, data: &t.data }
}

/// The bytes of `t` padded along `target`'s axis to its extent (`t`'s own bytes without one).
fn padded_len(t: &InputTensor, target: Option<(usize, u64)>) -> usize {
    match target {
        Some((a, extent)) if t.shape[a] < extent => {
            let others: u64 = t.shape.iter().enumerate().filter(|&(i, _)| i != a).map(|(_, &d)| d).product();
            (others * extent) as usize * t.dtype.size_bytes()
        }
        _ => t.data.len(),
    }
}

/// Writes `t` into `out`, padded along `target`'s axis to its extent with the element `pad`.
fn write_padded(t: &InputTensor, target: Option<(usize, u64)>, pad: &[u8], out: &mut [u8]) {
    let Some((axis, extent)) = target.filter(|&(a, e)| t.shape[a] < e) else {
        out.copy_from_slice(&t.data);
        return;
    };
    let elem = t.dtype.size_bytes();
    let inner = t.shape[axis + 1..].iter().product::<u64>() as usize * elem;
    let outer = t.shape[..axis].iter().product::<u64>() as usize;
    let (have, want) = (t.shape[axis] as usize * inner, extent as usize * inner);
    for o in 0..outer {
        let (real, padding) = out[o * want..(o + 1) * want].split_at_mut(have);
        real.copy_from_slice(&t.data[o * have..(o + 1) * have]);
        match pad {
            [] => padding.fill(0),
            [first, rest @ ..] if rest.iter().all(|b| b == first) => padding.fill(*first),
            _ => padding.chunks_exact_mut(elem).for_each(|e| e.copy_from_slice(pad)),
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
        let split = layout.split(&[view(&out)], &[part(1, Some(3), &[0]), part(2, Some(2), &[0])]).unwrap();
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
        assert!(layout.split(&[view(&wrong)], &[part(1, None, &[0]), part(1, None, &[0])]).is_err());
    }

    fn part(rows: u64, extent: Option<u64>, outputs: &[usize]) -> Part<'_> {
        Part { rows, extent, outputs }
    }

    #[test]
    fn a_batch_written_in_place_is_padded_to_the_axis_bucket_and_split_back() {
        let layout = seq_layout();
        let a = [t("ids", &[1, 3], &[1, 2, 3])];
        let b = [t("ids", &[2, 2], &[4, 5, 6, 7])];
        let jobs: [&[InputTensor]; 2] = [&a, &b];
        let axis = layout.batch_axis(&jobs, true);
        assert_eq!(axis, Some(4), "the longest, 3, is in the bucket 4");
        let dims = layout.batch_dims(&jobs, axis);
        assert_eq!(dims, [vec![3, 4]]);
        // Staging as the session leases it: exactly the batch's bytes, dirty from an earlier run.
        let mut staging = vec![0xAB; 3 * 4 * 8];
        layout.write_input(0, &jobs, axis, &mut staging).unwrap();
        assert_eq!(ints(&staging), [1, 2, 3, 0, 4, 5, 0, 0, 6, 7, 0, 0]);
        assert!(layout.write_input(0, &jobs, axis, &mut staging[8..]).is_err(), "a view of the wrong size");
        // An identity model read back from the pinned buffer's view of the real rows.
        let view = HostTensor { name: "y", dtype: DType::I64, dims: &dims[0], data: &staging };
        let split = layout.split(&[view], &[part(1, Some(3), &[0]), part(2, Some(2), &[0])]).unwrap();
        assert_eq!((split[0][0].dims.clone(), ints(&split[0][0].data)), (vec![1, 3], vec![1, 2, 3]));
        assert_eq!((split[1][0].dims.clone(), ints(&split[1][0].data)), (vec![2, 2], vec![4, 5, 6, 7]));
        // One request alone is sliced back from the bucket too.
        let alone = layout.split(&[view], &[part(3, Some(3), &[0])]).unwrap();
        assert_eq!(alone[0][0].dims, [3, 3]);
    }

    #[test]
    fn each_request_gets_the_outputs_it_asked_for_in_its_order() {
        let batched = TensorLayout { batched: true, ..Default::default() };
        let layout = Layout {
            inputs: vec![batched.clone()],
            outputs: vec![batched.clone(), batched, TensorLayout::default()],
            axis_buckets: Vec::new(),
        };
        let y = OwnedTensor { name: "y".into(), dtype: DType::I64, dims: vec![3], data: ints_bytes(&[1, 2, 3]) };
        let z = OwnedTensor { name: "z".into(), dtype: DType::I64, dims: vec![3, 1], data: ints_bytes(&[4, 5, 6]) };
        let table = OwnedTensor { name: "t".into(), dtype: DType::I64, dims: vec![2], data: ints_bytes(&[8, 9]) };
        let views = [view(&y), view(&z), view(&table)];
        let split = layout.split(&views, &[part(1, None, &[1]), part(1, None, &[2, 0]), part(1, None, &[])]).unwrap();
        let got: Vec<Vec<(String, Vec<i64>)>> =
            split.iter().map(|job| job.iter().map(|o| (o.name.clone(), ints(&o.data))).collect()).collect();
        assert_eq!(
            got,
            [vec![("z".to_string(), vec![4])], vec![("t".to_string(), vec![8, 9]), ("y".to_string(), vec![2])], vec![],]
        );
    }

    fn ints_bytes(values: &[i64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}
