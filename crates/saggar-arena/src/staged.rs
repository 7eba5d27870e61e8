//! Inputs written in place: views of the staging buffer's input slots for callers that write their
//! rows straight into pinned memory (no gather), padding done in place, and views of the read-back
//! buffer's outputs.

use saggar_device::{Backend, PinnedBuffer};
use saggar_shape::{PadPlan, SlicePlan, pad_rows_in_place};

use crate::arena::{Arena, check_fits};
use crate::error::{ArenaError, Result};
use crate::gather::copy_bytes;

impl<B: Backend> Arena<B> {
    /// The bytes of input `index`'s real rows in the staging buffer (the front of its slot, as
    /// `plan` lays it out), for the caller to write in place of a gather. Waits first for the
    /// previous use of the staging buffer. What the caller writes stays there until the next gather
    /// or in-place write; [`Arena::pad_staged`] then pads it.
    pub fn staged_input_mut(&mut self, index: usize, plan: &PadPlan) -> Result<&mut [u8]> {
        self.wait_idle()?;
        let range = self.staged_range(index, plan)?;
        Ok(&mut self.staging.as_mut_slice()[range])
    }

    /// Copies `data` (exactly the real rows `plan` takes) into input `index`'s slot in the staging
    /// buffer, with the stores a gather uses: streaming stores on GPU backends, so the bytes go to
    /// memory instead of sitting dirty in this core's cache, where the copy's DMA read would have to
    /// snoop them out line by line (what makes a buffer refilled with a plain `memcpy` slower to send
    /// than one written with streaming stores). Prefer it to writing through
    /// [`Arena::staged_input_mut`] when the input already exists in other memory. Waits first for
    /// the previous use of the staging buffer. The stores are fenced by [`Arena::enqueue_upload`]
    /// (handing the arena to another thread in between synchronizes, which fences them too).
    pub fn write_staged_input(&mut self, index: usize, plan: &PadPlan, data: &[u8]) -> Result<()> {
        self.wait_idle()?;
        let range = self.staged_range(index, plan)?;
        if range.len() != data.len() {
            return Err(ArenaError::InputLength {
                input: self.layout().inputs()[index].name.to_string(),
                expected: range.len(),
                actual: data.len(),
            });
        }
        let streaming = self.ctx.options.gather.stores.streaming_for(B::KIND);
        // The room up to the next slot: the copy may stream a last partial line whole into it.
        let staging = self.staging.as_mut_slice();
        let room = self.ctx.layouts[self.variant].inputs().get(index + 1).map_or(staging.len(), |next| next.offset);
        // Unfenced: `enqueue_upload` fences once for every input written (a fence per input waits for
        // each one's write-combining buffers to drain, about half a microsecond each).
        copy_bytes(data, &mut staging[range.start..room.max(range.end)], streaming);
        Ok(())
    }

    /// Where input `index`'s real rows lie in the staging buffer, as `plan` lays them out.
    fn staged_range(&self, index: usize, plan: &PadPlan) -> Result<std::ops::Range<usize>> {
        let layout = self.layout();
        let slot = layout.inputs().get(index).ok_or(ArenaError::Count {
            role: "input",
            expected: layout.inputs().len(),
            actual: index + 1,
        })?;
        check_fits(slot, plan)?;
        Ok(slot.offset..slot.offset + plan.src_range().len())
    }

    /// Pads every input written in place ([`Arena::staged_input_mut`]) to its bucket, repeating its
    /// last real row per `plan(index)`. Returns the used span of the staging buffer (what
    /// [`Arena::enqueue_upload`] must send).
    pub fn pad_staged(&mut self, plan: impl Fn(usize) -> PadPlan) -> Result<usize> {
        self.wait_idle()?;
        let layout = &*self.ctx.layouts[self.variant];
        let staging = self.staging.as_mut_slice();
        let mut span_end = 0;
        for (index, slot) in layout.inputs().iter().enumerate() {
            let plan = plan(index);
            check_fits(slot, &plan)?;
            pad_rows_in_place(&mut staging[slot.offset..slot.offset + plan.dst_len()], &plan)?;
            span_end = span_end.max(slot.offset + plan.dst_len());
        }
        Ok(span_end)
    }

    /// The real rows of output `index` in the read-back buffer, as `plan` slices them (the first
    /// chunk of a request: rows from the start of the slot), after a download that was waited for
    /// ([`Arena::wait_idle`]; [`ArenaError::InFlight`] otherwise).
    pub fn downloaded_output(&self, index: usize, plan: &SlicePlan) -> Result<&[u8]> {
        if self.pending {
            return Err(ArenaError::InFlight);
        }
        let layout = &*self.ctx.layouts[self.variant];
        let slot = layout.outputs().get(index).ok_or(ArenaError::Count {
            role: "output",
            expected: layout.outputs().len(),
            actual: index + 1,
        })?;
        let readback = self.readback.as_ref().ok_or(ArenaError::NotDownloaded)?.as_slice();
        let len = plan.dst_range().len();
        if plan.src_len() > slot.capacity {
            return Err(ArenaError::Output {
                output: slot.name.clone(),
                reason: format!("the program output of {} bytes exceeds its slot of {}", plan.src_len(), slot.capacity),
            });
        }
        Ok(&readback[slot.offset..slot.offset + len])
    }
}
