//! Pad and slice plans, and their CPU reference implementation.
//!
//! A program compiled for a bucket of `B` rows takes inputs with `B` rows. A request chunk of
//! `r <= B` rows is padded on the way in: its `r` real rows are copied, then the last real row
//! is repeated `B - r` times (repeating a real row keeps the padding numerically harmless, where
//! zeros could produce NaNs in a normalisation). On the way out every batched output is sliced
//! back to its `r` real rows. Inputs and outputs without a batch axis are copied whole.
//!
//! Plans are plain numbers (byte offsets, row counts, row sizes) computed without touching any
//! buffer, so a device backend can turn one into copies on a stream while
//! [`pad_rows_into`] and [`slice_rows`] do the same on the host.

use std::ops::Range;

use crate::shape::product;
use crate::{Chunk, Shape, ShapeError, SizeOverflow, TensorShape};

/// How to build one padded input for one chunk: copy `rows` rows of `row_bytes` bytes starting
/// at byte `src_offset` of the request's buffer, then repeat the last of them up to
/// `padded_rows` rows.
///
/// An input without a batch axis gets a pass-through plan: its whole buffer is one "row",
/// copied once and never repeated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PadPlan {
    src_offset: usize,
    row_bytes: usize,
    rows: u64,
    padded_rows: u64,
    src_len: usize,
    dst_len: usize,
    batched: bool,
}

impl PadPlan {
    /// The plan for `input` (the request's whole tensor) in `chunk`, padded along axis 0 when
    /// `batched`.
    ///
    /// Fails when a batched input is a scalar, when the chunk asks for rows the input does not
    /// have or for more rows than its bucket, or when a byte count does not fit in `usize`.
    pub fn new(input: TensorShape<'_>, batched: bool, chunk: Chunk) -> Result<PadPlan, ShapeError> {
        let element_bytes = input.dtype.size_bytes() as u64;
        if !batched {
            let bytes = host_bytes(input, 1, product(input.dims, element_bytes))?;
            return Ok(PadPlan {
                src_offset: 0,
                row_bytes: bytes,
                rows: 1,
                padded_rows: 1,
                src_len: bytes,
                dst_len: bytes,
                batched,
            });
        }
        let (&available, row_dims) =
            input.dims.split_first().ok_or_else(|| ShapeError::ScalarBatched { tensor: input.name.into() })?;
        check_chunk(chunk)?;
        let needed = chunk.offset.saturating_add(chunk.rows);
        if needed > available {
            return Err(ShapeError::RowsOutOfRange { tensor: input.name.into(), needed, available });
        }
        let row_bytes = host_bytes(input, 1, product(row_dims, element_bytes))?;
        Ok(PadPlan {
            src_offset: host_bytes(input, row_bytes as u64, Ok(chunk.offset))?,
            row_bytes,
            rows: chunk.rows,
            padded_rows: chunk.bucket,
            src_len: host_bytes(input, row_bytes as u64, Ok(chunk.rows))?,
            dst_len: host_bytes(input, row_bytes as u64, Ok(chunk.bucket))?,
            batched,
        })
    }

    /// Whether the input is padded (false for a pass-through copy).
    pub fn is_batched(&self) -> bool {
        self.batched
    }

    /// Bytes per row (the whole tensor for a pass-through plan).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Real rows copied from the request.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Rows in the padded buffer: the chunk's bucket.
    pub fn padded_rows(&self) -> u64 {
        self.padded_rows
    }

    /// The bytes of the request's buffer the chunk reads.
    pub fn src_range(&self) -> Range<usize> {
        self.src_offset..self.src_offset + self.src_len
    }

    /// The size of the padded buffer.
    pub fn dst_len(&self) -> usize {
        self.dst_len
    }

    /// The padded buffer's rows that repeat the last real row.
    pub fn replicated_rows(&self) -> Range<u64> {
        self.rows..self.padded_rows
    }
}

/// How to return one output of one chunk: copy the first `rows` rows of the program's output
/// (which has at least that many) to byte `dst_offset` of the request's output buffer.
///
/// An output without a batch axis is copied whole from the chunk at row offset 0, and not at
/// all from the later chunks of a split request (its plan is empty), so the request sees one
/// consistent copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlicePlan {
    dst_offset: usize,
    row_bytes: usize,
    rows: u64,
    src_len: usize,
    copy_len: usize,
    batched: bool,
}

impl SlicePlan {
    /// The plan for `output` (as the program produced it, with the bucket as its batch) in
    /// `chunk`, sliced along axis 0 when `batched`.
    pub fn new(output: TensorShape<'_>, batched: bool, chunk: Chunk) -> Result<SlicePlan, ShapeError> {
        let element_bytes = output.dtype.size_bytes() as u64;
        check_chunk(chunk)?;
        if !batched {
            let bytes = host_bytes(output, 1, product(output.dims, element_bytes))?;
            let copy_len = if chunk.offset == 0 { bytes } else { 0 };
            return Ok(SlicePlan { dst_offset: 0, row_bytes: bytes, rows: 1, src_len: bytes, copy_len, batched });
        }
        let (&produced, row_dims) =
            output.dims.split_first().ok_or_else(|| ShapeError::ScalarBatched { tensor: output.name.into() })?;
        if produced < chunk.rows {
            return Err(ShapeError::RowsOutOfRange {
                tensor: output.name.into(),
                needed: chunk.rows,
                available: produced,
            });
        }
        let row_bytes = host_bytes(output, 1, product(row_dims, element_bytes))?;
        Ok(SlicePlan {
            dst_offset: host_bytes(output, row_bytes as u64, Ok(chunk.offset))?,
            row_bytes,
            rows: chunk.rows,
            src_len: host_bytes(output, row_bytes as u64, Ok(produced))?,
            copy_len: host_bytes(output, row_bytes as u64, Ok(chunk.rows))?,
            batched,
        })
    }

    /// Whether the output is sliced (false for a whole copy).
    pub fn is_batched(&self) -> bool {
        self.batched
    }

    /// Bytes per row (the whole tensor for a whole copy).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Real rows returned to the request.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes of the program's output.
    pub fn src_len(&self) -> usize {
        self.src_len
    }

    /// The bytes of the request's output buffer this chunk writes (empty for a whole-copy
    /// output in a later chunk).
    pub fn dst_range(&self) -> Range<usize> {
        self.dst_offset..self.dst_offset + self.copy_len
    }
}

/// Pads one input on the host: copies the plan's rows from `src` (the request's whole input)
/// into the front of `dst` and repeats the last of them to fill the plan's padded rows.
///
/// `dst` may be longer than [`PadPlan::dst_len`] (a reused buffer); bytes past it are left
/// alone. Fails, writing nothing, when either buffer is too short.
pub fn pad_rows_into(src: &[u8], dst: &mut [u8], plan: &PadPlan) -> Result<(), ShapeError> {
    let range = plan.src_range();
    let real = src.get(range.clone()).ok_or(ShapeError::BufferTooShort {
        buffer: "source",
        needed: range.end,
        actual: src.len(),
    })?;
    if dst.len() < plan.dst_len {
        return Err(ShapeError::BufferTooShort { buffer: "destination", needed: plan.dst_len, actual: dst.len() });
    }
    dst[..real.len()].copy_from_slice(real);
    pad_rows_in_place(dst, plan)
}

/// Pads one input whose real rows are already at the front of `buf`: repeats the last of them to
/// fill the plan's padded rows. What [`pad_rows_into`] does after its copy, for callers that write
/// their rows straight into the padded buffer.
///
/// `buf` may be longer than [`PadPlan::dst_len`]; bytes past it are left alone. Fails, writing
/// nothing, when `buf` is shorter.
pub fn pad_rows_in_place(buf: &mut [u8], plan: &PadPlan) -> Result<(), ShapeError> {
    if buf.len() < plan.dst_len {
        return Err(ShapeError::BufferTooShort { buffer: "destination", needed: plan.dst_len, actual: buf.len() });
    }
    let filled_real = plan.src_len;
    if plan.dst_len > filled_real && plan.row_bytes > 0 {
        // Repeat the last real row, doubling the repeated region each step: O(log) copies.
        let last_row = filled_real - plan.row_bytes..filled_real;
        buf.copy_within(last_row, filled_real);
        let mut filled = filled_real + plan.row_bytes;
        while filled < plan.dst_len {
            let count = (filled - filled_real).min(plan.dst_len - filled);
            buf.copy_within(filled_real..filled_real + count, filled);
            filled += count;
        }
    }
    Ok(())
}

/// Slices one output on the host: copies the plan's real rows from `src` (the program's
/// output) into their place in `dst` (the request's whole output).
///
/// Fails, writing nothing, when `src` is shorter than the program's output or `dst` cannot
/// hold the rows at their offset.
pub fn slice_rows(src: &[u8], dst: &mut [u8], plan: &SlicePlan) -> Result<(), ShapeError> {
    if src.len() < plan.src_len {
        return Err(ShapeError::BufferTooShort { buffer: "source", needed: plan.src_len, actual: src.len() });
    }
    let range = plan.dst_range();
    let actual = dst.len();
    let target = dst.get_mut(range.clone()).ok_or(ShapeError::BufferTooShort {
        buffer: "destination",
        needed: range.end,
        actual,
    })?;
    target.copy_from_slice(&src[..plan.copy_len]);
    Ok(())
}

fn check_chunk(chunk: Chunk) -> Result<(), ShapeError> {
    if chunk.rows == 0 || chunk.rows > chunk.bucket {
        return Err(ShapeError::InvalidChunk { offset: chunk.offset, rows: chunk.rows, bucket: chunk.bucket });
    }
    Ok(())
}

/// `rows * row_bytes` as a host byte count, or an overflow error naming the tensor.
fn host_bytes(tensor: TensorShape<'_>, row_bytes: u64, rows: Result<u64, SizeOverflow>) -> Result<usize, ShapeError> {
    rows.ok().and_then(|rows| rows.checked_mul(row_bytes)).and_then(|bytes| usize::try_from(bytes).ok()).ok_or_else(
        || ShapeError::Overflow {
            input: tensor.name.into(),
            source: SizeOverflow { dims: Shape::new(tensor.dims), element_bytes: tensor.dtype.size_bytes() as u64 },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn pads_by_repeating_the_last_row() {
        let src: Vec<u8> = (0..12).collect(); // 3 rows of 4 bytes ([3, 2] of u16)
        let input = TensorShape::new("x", DType::U16, &[3, 2]);
        let plan = PadPlan::new(input, true, Chunk::whole(3, 5)).unwrap();
        assert_eq!(plan.replicated_rows(), 3..5);
        let mut dst = vec![0xAA; 24];
        pad_rows_into(&src, &mut dst, &plan).unwrap();
        assert_eq!(&dst[..12], &src[..]);
        assert_eq!(&dst[12..16], &src[8..12]);
        assert_eq!(&dst[16..20], &src[8..12]);
        assert_eq!(&dst[20..], &[0xAA; 4], "bytes past the plan stay untouched");
    }

    #[test]
    fn chunk_reads_its_own_rows() {
        let src: Vec<u8> = (0..10).collect(); // 10 rows of 1 byte
        let plan = PadPlan::new(TensorShape::new("x", DType::U8, &[10]), true, Chunk { offset: 8, rows: 2, bucket: 4 })
            .unwrap();
        assert_eq!(plan.src_range(), 8..10);
        let mut dst = [0u8; 4];
        pad_rows_into(&src, &mut dst, &plan).unwrap();
        assert_eq!(dst, [8, 9, 9, 9]);
    }

    #[test]
    fn unbatched_input_passes_through() {
        let plan = PadPlan::new(
            TensorShape::new("table", DType::F32, &[4, 2]),
            false,
            Chunk { offset: 8, rows: 2, bucket: 4 },
        )
        .unwrap();
        assert!(!plan.is_batched());
        assert_eq!(plan.src_range(), 0..32);
        assert_eq!(plan.dst_len(), 32);
        assert!(plan.replicated_rows().is_empty());
    }

    #[test]
    fn bad_plans_and_buffers_are_errors() {
        let x = TensorShape::new("x", DType::U8, &[3]);
        assert!(matches!(
            PadPlan::new(x, true, Chunk { offset: 2, rows: 2, bucket: 2 }),
            Err(ShapeError::RowsOutOfRange { needed: 4, available: 3, .. })
        ));
        assert!(matches!(
            PadPlan::new(TensorShape::new("s", DType::U8, &[]), true, Chunk::whole(1, 1)),
            Err(ShapeError::ScalarBatched { .. })
        ));
        assert_eq!(
            PadPlan::new(x, true, Chunk::whole(0, 1)),
            Err(ShapeError::InvalidChunk { offset: 0, rows: 0, bucket: 1 })
        );
        assert!(matches!(PadPlan::new(x, true, Chunk::whole(3, 2)), Err(ShapeError::InvalidChunk { .. })));
        let plan = PadPlan::new(x, true, Chunk::whole(3, 4)).unwrap();
        let mut dst = [0u8; 3];
        assert!(matches!(
            pad_rows_into(&[1, 2, 3], &mut dst, &plan),
            Err(ShapeError::BufferTooShort { buffer: "destination", .. })
        ));
        let mut dst = [0u8; 4];
        assert!(matches!(
            pad_rows_into(&[1, 2], &mut dst, &plan),
            Err(ShapeError::BufferTooShort { buffer: "source", .. })
        ));
        let huge = TensorShape::new("huge", DType::F64, &[2, u64::MAX / 4]);
        assert!(matches!(PadPlan::new(huge, true, Chunk::whole(1, 1)), Err(ShapeError::Overflow { .. })));
    }

    #[test]
    fn slices_real_rows_into_place() {
        let program: Vec<u8> = (0..8).collect(); // bucket of 4 rows of 2 bytes
        let plan =
            SlicePlan::new(TensorShape::new("y", DType::U8, &[4, 2]), true, Chunk { offset: 1, rows: 3, bucket: 4 })
                .unwrap();
        let mut out = [0u8; 8];
        slice_rows(&program, &mut out, &plan).unwrap();
        assert_eq!(out, [0, 0, 0, 1, 2, 3, 4, 5]);
        let later =
            SlicePlan::new(TensorShape::new("z", DType::U8, &[2]), false, Chunk { offset: 4, rows: 1, bucket: 1 })
                .unwrap();
        assert!(later.dst_range().is_empty());
    }
}
