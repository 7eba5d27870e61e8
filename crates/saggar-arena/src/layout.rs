//! Arena layouts: where each tensor lives in the staging buffer and the device arena.

use crate::error::{ArenaError, Result};

/// The default slot alignment: 256 bytes, what CUDA and HIP allocations guarantee, so a slot is as
/// aligned as a buffer of its own would be.
pub const DEFAULT_ALIGNMENT: usize = 256;

/// One tensor to place: its name, its size at the largest bucket it serves, its element size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSpec {
    /// The tensor's name (for errors).
    pub name: Box<str>,
    /// Bytes at the largest bucket.
    pub bytes: usize,
    /// Element size in bytes; host pointers must be aligned to it.
    pub element_bytes: usize,
}

impl SlotSpec {
    /// A slot of `bytes` bytes of elements of `element_bytes` bytes.
    pub fn new(name: impl Into<Box<str>>, bytes: usize, element_bytes: usize) -> SlotSpec {
        SlotSpec { name: name.into(), bytes, element_bytes }
    }
}

/// A placed slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The tensor's name.
    pub name: Box<str>,
    /// Byte offset from the start of its span (inputs: the staging buffer and the arena's start;
    /// outputs: the output span's start).
    pub offset: usize,
    /// Bytes available.
    pub capacity: usize,
    /// Element size in bytes.
    pub element_bytes: usize,
}

/// Where every input (and output) of a program lives: inputs first, then outputs, each slot at an
/// aligned offset. The device arena is one allocation of [`ArenaLayout::device_bytes`]; the staging
/// buffer holds the input span, the read-back buffer the output span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArenaLayout {
    inputs: Box<[Slot]>,
    outputs: Box<[Slot]>,
    input_span: usize,
    output_offset: usize,
    output_span: usize,
    alignment: usize,
}

fn place(specs: &[SlotSpec], alignment: usize) -> Result<(Box<[Slot]>, usize)> {
    let mut offset = 0usize;
    let mut slots = Vec::with_capacity(specs.len());
    for spec in specs {
        if spec.element_bytes == 0 || !spec.element_bytes.is_power_of_two() || spec.element_bytes > alignment {
            return Err(ArenaError::Layout {
                reason: format!(
                    "`{}` has element size {}, which must be a power of two no larger than the alignment {alignment}",
                    spec.name, spec.element_bytes
                ),
            });
        }
        slots.push(Slot { name: spec.name.clone(), offset, capacity: spec.bytes, element_bytes: spec.element_bytes });
        offset = offset
            .checked_add(spec.bytes)
            .and_then(|end| end.checked_next_multiple_of(alignment))
            .ok_or_else(|| ArenaError::Layout { reason: format!("the layout overflows at `{}`", spec.name) })?;
    }
    Ok((slots.into_boxed_slice(), offset))
}

impl ArenaLayout {
    /// Places `inputs` and `outputs` at offsets aligned to `alignment` (a power of two).
    pub fn new(inputs: &[SlotSpec], outputs: &[SlotSpec], alignment: usize) -> Result<ArenaLayout> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(ArenaError::Layout { reason: format!("alignment {alignment} is not a power of two") });
        }
        let (inputs, input_span) = place(inputs, alignment)?;
        let (outputs, output_span) = place(outputs, alignment)?;
        Ok(ArenaLayout { inputs, outputs, input_span, output_offset: input_span, output_span, alignment })
    }

    /// The input slots, in program order.
    pub fn inputs(&self) -> &[Slot] {
        &self.inputs
    }

    /// The output slots, in program order.
    pub fn outputs(&self) -> &[Slot] {
        &self.outputs
    }

    /// Bytes of the input span (the staging buffer's size).
    pub fn input_span(&self) -> usize {
        self.input_span
    }

    /// Where the output span starts in the device arena.
    pub fn output_offset(&self) -> usize {
        self.output_offset
    }

    /// Bytes of the output span (the read-back buffer's size).
    pub fn output_span(&self) -> usize {
        self.output_span
    }

    /// Bytes of the device arena (at least 1, so an empty layout still allocates).
    pub fn device_bytes(&self) -> usize {
        (self.input_span + self.output_span).max(1)
    }

    /// The slot alignment.
    pub fn alignment(&self) -> usize {
        self.alignment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_aligned_and_disjoint() {
        let specs: Vec<_> = (0..10).map(|i| SlotSpec::new(format!("in{i}"), 1 + i * 300, 4)).collect();
        let layout = ArenaLayout::new(&specs, &[SlotSpec::new("out", 64, 4)], 256).unwrap();
        let mut end = 0;
        for slot in layout.inputs() {
            assert_eq!(slot.offset % 256, 0);
            assert!(slot.offset >= end);
            end = slot.offset + slot.capacity;
        }
        assert!(layout.output_offset() >= end);
        assert_eq!(layout.output_offset() % 256, 0);
    }

    #[test]
    fn bad_layouts_are_errors() {
        assert!(ArenaLayout::new(&[], &[], 100).is_err());
        assert!(ArenaLayout::new(&[SlotSpec::new("x", 8, 3)], &[], 256).is_err());
        assert!(ArenaLayout::new(&[SlotSpec::new("x", usize::MAX, 4)], &[], 256).is_err());
    }
}
