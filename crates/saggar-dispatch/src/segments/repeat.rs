//! Loops run at run time: a segment that is a loop body ([`Repeat`]), run once per iteration with
//! ONNX `Loop`'s semantics, its condition read back after each (one synchronisation per iteration,
//! counted in [`crate::StatsSnapshot::segment_reads`]).
//!
//! The body's inputs are the iteration number (i64 scalar), the condition (bool scalar), the carried
//! values, then the values it reads unchanged; its outputs are the next condition, the carried
//! values' next values, then the scan outputs of the iteration. Carried values live in two buffers
//! per value that trade places each iteration (the last values always end in the segment's output
//! slots); each scan output is written in place at its row of one stacked buffer, grown by doubling.
//! Every iteration is a device request of the body's session, served a program per shape
//! ([`crate::ModelSpec::per_shape`]) on its standard path, eagerly (counted in `eager_runs`).

use saggar_device::{Backend, Device as _, DeviceBuffer as _, DeviceSlice, Stream as _};
use saggar_shape::DType;

use super::{Chain, Produced, SegmentSource, Workspace};
use crate::ModelSpec;
use crate::compiler::ProgramCompiler;
use crate::error::{DispatchError, Result};
use crate::request::request_bytes;
use crate::tensors::{DeviceTensor, HostTensor};
use saggar_shape::TensorSpec;

/// How a segment that is a loop body repeats ([`super::Segment::repeat`]): ONNX `Loop`'s rules.
/// The body runs while the iteration count is under the trip count and the condition holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeat {
    /// The loop node's name, for errors.
    pub name: String,
    /// Where the trip count (an i64 scalar) comes from; `None`: no bound.
    pub trip_count: Option<SegmentSource>,
    /// Where the first condition (a bool scalar) comes from; `None`: true.
    pub cond: Option<SegmentSource>,
    /// How many of the body's inputs after the condition are carried values (the rest are read
    /// unchanged each iteration).
    pub carried: usize,
    /// Most iterations a request may run: past it the request fails with
    /// [`DispatchError::LoopIterations`] (a condition that never turns false must not hang).
    pub max_iterations: u64,
}

/// A value the body reads: where it is and what it is.
#[derive(Clone)]
struct Held {
    dtype: DType,
    dims: Vec<u64>,
    bytes: usize,
    slot: usize,
    host: Option<Vec<u8>>,
}

/// One scan output's row: one iteration's extents and bytes (from the first iteration).
type Row = Option<(Vec<u64>, usize)>;

impl Repeat {
    /// The body's inputs the loop supplies itself, before those its wiring names: the iteration
    /// number and the condition.
    pub const OWN_INPUTS: usize = 2;

    /// [`Repeat::OWN_INPUTS`] of a segment's `repeat` (none for a segment run once).
    pub fn own_inputs(repeat: Option<&Repeat>) -> usize {
        if repeat.is_some() { Repeat::OWN_INPUTS } else { 0 }
    }

    /// Scratch slots a request of this loop uses: the iteration number and condition in, the
    /// condition out, and a second buffer per carried value.
    pub(crate) fn scratch_slots(&self) -> usize {
        2 + self.carried
    }

    /// Checks the body's signature against the loop's wiring (`wired` sources after the two
    /// inputs the loop supplies).
    pub(crate) fn check(&self, k: usize, spec: &ModelSpec, wired: usize) -> Result<()> {
        let bad = |what: String| Err(DispatchError::Config(format!("loop segment {k} (`{}`): {what}", self.name)));
        let scalar = |t: &TensorSpec, dtype: DType| t.dtype() == dtype && t.dims().is_empty();
        if !spec.inputs.first().is_some_and(|t| scalar(t, DType::I64)) {
            return bad("the body's first input must be the iteration number, an i64 scalar".into());
        }
        if !spec.inputs.get(1).is_some_and(|t| scalar(t, DType::Bool)) {
            return bad("the body's second input must be the condition, a bool scalar".into());
        }
        if spec.outputs.first().is_none_or(|t| t.dtype() != DType::Bool) {
            return bad("the body's first output must be the condition, a bool".into());
        }
        if self.carried > wired || spec.outputs.len() < 1 + self.carried {
            return bad(format!(
                "{} carried values, but the body takes {wired} values and makes {} outputs after the condition",
                self.carried,
                spec.outputs.len().saturating_sub(1)
            ));
        }
        Ok(())
    }
}

impl<B: Backend> Workspace<B> {
    /// `bytes` bytes of slot `slot` from `offset` (allocated by an earlier [`Workspace::slice`]).
    fn part(&self, slot: usize, offset: usize, bytes: usize) -> Result<DeviceSlice> {
        match &self.buffers[slot] {
            Some(b) => Ok(b.slice(offset, bytes)?),
            None => Err(DispatchError::Config(format!("segment workspace slot {slot} was never written"))),
        }
    }

    /// Grows slot `slot` to hold at least `bytes` bytes, keeping its first `used` bytes: doubling,
    /// so stacking `n` rows copies O(n) rows in all.
    fn grow_keeping(&mut self, device: &B::Device, slot: usize, used: usize, bytes: usize) -> Result<()> {
        let len = self.buffers[slot].as_ref().map_or(0, |b| b.len());
        if len >= bytes.max(1) {
            return Ok(());
        }
        let grown = device.alloc(bytes.max(len.saturating_mul(2)).max(1))?;
        if let (Some(old), true) = (&self.buffers[slot], used > 0) {
            self.stream.copy_d2d(old.slice(0, used)?, grown.slice(0, used)?)?;
            // The old buffer is freed below: the copy must be done first.
            self.stream.synchronize()?;
        }
        self.buffers[slot] = Some(grown);
        Ok(())
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Chain<B, C> {
    /// The host bytes of a value the chain read back (a model input's bytes, or a segment output
    /// marked for reading back).
    fn host_bytes<'a>(
        &self,
        source: SegmentSource,
        ordered: &'a [HostTensor<'_>],
        produced: &'a [Vec<Produced>],
    ) -> Result<&'a [u8]> {
        match source {
            SegmentSource::Input(i) => Ok(ordered[i].data),
            SegmentSource::Output { segment, output } => produced[segment][output]
                .host
                .as_deref()
                .ok_or_else(|| DispatchError::Config(format!("{source:?} is a loop control but was not read back"))),
        }
    }

    /// What the loop body reads from `source`; its host bytes when `keyed` (the body is keyed by it).
    fn held(&self, source: SegmentSource, keyed: bool, ordered: &[HostTensor<'_>], produced: &[Vec<Produced>]) -> Held {
        match source {
            SegmentSource::Input(i) => {
                let t = &ordered[i];
                let host = keyed.then(|| t.data.to_vec());
                Held { dtype: t.dtype, dims: t.dims.to_vec(), bytes: t.data.len(), slot: i, host }
            }
            SegmentSource::Output { segment, output } => {
                let p = &produced[segment][output];
                Held {
                    dtype: p.dtype,
                    dims: p.dims.clone(),
                    bytes: p.bytes,
                    slot: self.slot(source),
                    host: p.host.clone(),
                }
            }
        }
    }

    /// Runs loop segment `k` on the workspace and returns its outputs as later segments see them.
    pub(super) fn run_repeat(
        &self,
        k: usize,
        repeat: &Repeat,
        ws: &mut Workspace<B>,
        ordered: &[HostTensor<'_>],
        produced: &[Vec<Produced>],
        reads: &std::sync::atomic::AtomicU64,
    ) -> Result<Vec<Produced>> {
        let limit = match repeat.trip_count {
            None => u64::MAX,
            Some(s) => {
                let bytes = self.host_bytes(s, ordered, produced)?;
                let m = bytes.get(..8).map_or(0, |b| i64::from_le_bytes(b.try_into().expect("eight bytes")));
                u64::try_from(m).unwrap_or(0)
            }
        };
        let mut cond = match repeat.cond {
            None => true,
            Some(s) => self.host_bytes(s, ordered, produced)?.first().is_some_and(|&b| b != 0),
        };
        let n = repeat.carried;
        let sources = &self.inputs[k];
        let keyed = &self.sessions[k].inner.compiler.model().value_inputs;
        let held: Vec<Held> = (sources.iter().enumerate())
            .map(|(j, &s)| self.held(s, keyed.contains(&(2 + j)), ordered, produced))
            .collect();
        let (mut carried, rest) = (held[..n].to_vec(), &held[n..]);
        let scans = self.sessions[k].signature().outputs().len() - 1 - n;
        let mut stacked: Vec<Row> = vec![None; scans];
        let mut i = 0u64;
        while cond && i < limit {
            if i >= repeat.max_iterations {
                return Err(DispatchError::LoopIterations { node: repeat.name.clone(), limit: repeat.max_iterations });
            }
            let (next, next_cond) = self.iterate(k, i, ws, &carried, rest, &mut stacked)?;
            crate::stats::Stats::bump(reads);
            carried = next;
            cond = next_cond;
            i += 1;
        }
        self.finish(k, i, ws, carried, rest, stacked)
    }

    /// The body's request as its session sees it on the host: extents, and the bytes of its value
    /// inputs.
    fn body_view<'a>(
        &'a self,
        k: usize,
        control: &'a [u8; 9],
        carried: &'a [Held],
        rest: &'a [Held],
    ) -> Vec<HostTensor<'a>> {
        let specs = self.sessions[k].signature().inputs();
        let mut view = vec![
            HostTensor { name: specs[0].name(), dtype: DType::I64, dims: &[], data: &control[..8] },
            HostTensor { name: specs[1].name(), dtype: DType::Bool, dims: &[], data: &control[8..] },
        ];
        for (h, spec) in carried.iter().chain(rest).zip(&specs[2..]) {
            view.push(HostTensor {
                name: spec.name(),
                dtype: h.dtype,
                dims: &h.dims,
                data: h.host.as_deref().unwrap_or(&[]),
            });
        }
        view
    }

    /// Runs iteration `i` of loop segment `k`: returns the carried values' next values (in the
    /// segment's output slots) and the next condition.
    fn iterate(
        &self,
        k: usize,
        i: u64,
        ws: &mut Workspace<B>,
        carried: &[Held],
        rest: &[Held],
        stacked: &mut [Row],
    ) -> Result<(Vec<Held>, bool)> {
        let session = &self.sessions[k];
        let n = carried.len();
        let mut control = [0u8; 9];
        control[..8].copy_from_slice(&(i as i64).to_le_bytes());
        control[8] = 1;
        let view = self.body_view(k, &control, carried, rest);
        let out_dims = session.request_output_dims(&view)?;
        let specs = session.signature().outputs();
        let scratch = self.scratch_base[k];
        let (control_slot, cond_slot, alt) = (scratch, scratch + 1, scratch + 2);
        let control_dst = ws.slice(&self.device, control_slot, control.len())?;
        ws.stream.upload(&control, control_dst)?;
        let cond_bytes = request_bytes(&specs[0], &out_dims[0])?;
        ws.slice(&self.device, cond_slot, cond_bytes)?;
        // Iteration 0 reads the initial values where they are and writes the output slots; later
        // ones read the output slots and write the second buffers, which then trade places.
        let target = |j: usize| if i == 0 { self.slot_base[k] + j } else { alt + j };
        let mut bytes = Vec::with_capacity(specs.len());
        for (o, (spec, dims)) in specs.iter().zip(&out_dims).enumerate().skip(1) {
            let b = request_bytes(spec, dims)?;
            if o <= n {
                ws.slice(&self.device, target(o - 1), b)?;
            } else {
                let row = &mut stacked[o - 1 - n];
                match row {
                    Some((first, _)) if first != dims => {
                        return Err(DispatchError::Config(format!(
                            "the loop `{}`'s scan output {} has extents {dims:?} in iteration {i}, {:?} before: \
                             every iteration's must match",
                            self.repeats[k].as_ref().map_or("", |r| &r.name),
                            o - 1 - n,
                            first
                        )));
                    }
                    Some(_) => {}
                    None => *row = Some((dims.clone(), b)),
                }
                let used = usize::try_from(i).ok().and_then(|i| i.checked_mul(b)).ok_or_else(too_large)?;
                let needed = used.checked_add(b).ok_or_else(too_large)?;
                ws.grow_keeping(&self.device, self.slot_base[k] + o - 1, used, needed)?;
            }
            bytes.push(b);
        }
        let mut inputs = vec![
            DeviceTensor { name: view[0].name, dtype: DType::I64, dims: &[], data: ws.part(control_slot, 0, 8)? },
            DeviceTensor { name: view[1].name, dtype: DType::Bool, dims: &[], data: ws.part(control_slot, 8, 1)? },
        ];
        for (h, t) in carried.iter().chain(rest).zip(&view[2..]) {
            inputs.push(DeviceTensor {
                name: t.name,
                dtype: h.dtype,
                dims: &h.dims,
                data: ws.filled(h.slot, h.bytes)?,
            });
        }
        let mut outputs = Vec::with_capacity(specs.len());
        outputs.push(DeviceTensor {
            name: specs[0].name(),
            dtype: DType::Bool,
            dims: &out_dims[0],
            data: ws.filled(cond_slot, cond_bytes)?,
        });
        for (o, spec) in specs.iter().enumerate().skip(1) {
            let b = bytes[o - 1];
            let data = if o <= n {
                ws.filled(target(o - 1), b)?
            } else {
                ws.part(self.slot_base[k] + o - 1, i as usize * b, b)?
            };
            outputs.push(DeviceTensor { name: spec.name(), dtype: spec.dtype(), dims: &out_dims[o], data });
        }
        session.run_device(&inputs, &outputs)?;
        drop((inputs, outputs));
        let cond = ws.read(cond_slot, cond_bytes)?;
        let value_inputs = &session.inner.compiler.model().value_inputs;
        let mut next = Vec::with_capacity(n);
        for j in 0..n {
            if i > 0 {
                ws.buffers.swap(self.slot_base[k] + j, alt + j);
            }
            let slot = self.slot_base[k] + j;
            // A carried value the body is keyed by is read back for the next iteration's request.
            let host = if value_inputs.contains(&(2 + j)) { Some(ws.read(slot, bytes[j])?) } else { None };
            let dims = out_dims[1 + j].clone();
            next.push(Held { dtype: specs[1 + j].dtype(), dims, bytes: bytes[j], slot, host });
        }
        Ok((next, cond.first().is_some_and(|&c| c != 0)))
    }

    /// The loop segment's outputs after `iterations` iterations: the carried values (copied to the
    /// output slots when no iteration ran) and the stacked scan outputs, read back where a later
    /// segment is keyed by them.
    fn finish(
        &self,
        k: usize,
        iterations: u64,
        ws: &mut Workspace<B>,
        carried: Vec<Held>,
        rest: &[Held],
        stacked: Vec<Row>,
    ) -> Result<Vec<Produced>> {
        let n = carried.len();
        let specs = self.sessions[k].signature().outputs();
        let mut rows: Vec<(Vec<u64>, usize)> = Vec::with_capacity(stacked.len());
        if iterations == 0 {
            for (j, h) in carried.iter().enumerate() {
                let dst = ws.slice(&self.device, self.slot_base[k] + j, h.bytes)?;
                if h.bytes > 0 {
                    ws.stream.copy_d2d(ws.filled(h.slot, h.bytes)?, dst)?;
                }
            }
            ws.stream.synchronize()?;
            // No iteration ran: the scan outputs' row extents are those the first would have had.
            let control = [0u8; 9];
            let view = self.body_view(k, &control, &carried, rest);
            let out_dims = self.sessions[k].request_output_dims(&view)?;
            for (spec, dims) in specs.iter().zip(out_dims).skip(1 + n) {
                ws.slice(&self.device, self.slot_base[k] + n + rows.len(), 0)?;
                let bytes = request_bytes(spec, &dims)?;
                rows.push((dims, bytes));
            }
        } else {
            rows.extend(stacked.into_iter().map(Option::unwrap_or_default));
        }
        let mut outs = Vec::with_capacity(specs.len() - 1);
        for (j, h) in carried.into_iter().enumerate() {
            outs.push(self.produced(k, j, ws, h.dtype, h.dims, h.bytes)?);
        }
        for (s, (row, row_bytes)) in rows.into_iter().enumerate() {
            let mut dims = vec![iterations];
            dims.extend(row);
            let bytes =
                usize::try_from(iterations).ok().and_then(|i| i.checked_mul(row_bytes)).ok_or_else(too_large)?;
            let o = n + s;
            outs.push(self.produced(k, o, ws, specs[1 + o].dtype(), dims, bytes)?);
        }
        Ok(outs)
    }
}

fn too_large() -> DispatchError {
    DispatchError::Config("a loop's stacked scan output does not fit the address space".into())
}
