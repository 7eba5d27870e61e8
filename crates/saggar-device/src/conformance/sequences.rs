//! Random work sequences: fills, axpys, copies, memsets, row padding and pinned uploads run eagerly
//! and captured-then-replayed give byte-identical results.

use super::{axpy, builtin_module, download, f32_bytes, fill, pattern};
use crate::api::{Backend, Device, DeviceBuffer, Module, PinnedBuffer, Stream};
use crate::builtin;
use crate::types::{CaptureMode, KernelArg, LaunchConfig};

/// One step of a random work sequence (see [`replay_equals_eager`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SequenceStep {
    /// Fill buffer `buf` with `value`.
    Fill {
        /// Buffer index (modulo the buffer count).
        buf: usize,
        /// The word to fill with.
        value: u32,
    },
    /// `buf[y] = a * buf[x] + buf[y]`.
    Axpy {
        /// Source buffer.
        x: usize,
        /// Destination buffer.
        y: usize,
        /// Multiplier.
        a: f32,
    },
    /// Device-to-device copy of a whole buffer.
    Copy {
        /// Source buffer.
        src: usize,
        /// Destination buffer.
        dst: usize,
    },
    /// Set bytes `offset..offset + len` (clamped) of a buffer.
    Memset {
        /// Buffer.
        buf: usize,
        /// First byte.
        offset: usize,
        /// Bytes.
        len: usize,
        /// Value.
        value: u8,
    },
    /// Copy the first `rows` 64-byte rows of `src` into `dst`, repeating the last to fill `dst`.
    PadRows {
        /// Source buffer.
        src: usize,
        /// Destination buffer.
        dst: usize,
        /// Real rows (clamped to 1..=rows in a buffer).
        rows: u64,
    },
    /// Copy a pinned host pattern into a buffer asynchronously.
    FromPinned {
        /// Destination buffer.
        buf: usize,
    },
}

const SEQ_BUFFERS: usize = 4;
const SEQ_FLOATS: usize = 1024;
const SEQ_ROW: u64 = 64;

/// Runs `steps` eagerly on one set of buffers and captured-then-replayed on another, from the same
/// initial bytes, and asserts the results are byte-identical.
pub fn replay_equals_eager<B: Backend>(device: &B::Device, steps: &[SequenceStep]) {
    let module = builtin_module::<B>(device);
    let (fill_k, axpy_k, rows_k) = (
        module.kernel(builtin::FILL_U32).unwrap(),
        module.kernel(builtin::AXPY_F32).unwrap(),
        module.kernel(builtin::COPY_ROWS).unwrap(),
    );
    let stream = device.create_stream().unwrap();
    let bytes = SEQ_FLOATS * 4;
    let mut pinned = device.alloc_pinned(bytes).unwrap();
    pinned.as_mut_slice().copy_from_slice(&pattern(bytes, 99));
    let sets: Vec<Vec<B::DeviceBuffer>> =
        (0..2).map(|_| (0..SEQ_BUFFERS).map(|_| device.alloc(bytes).unwrap()).collect()).collect();
    for set in &sets {
        for (i, buf) in set.iter().enumerate() {
            // Small floats keep axpy finite and exact enough to compare bit for bit.
            let init: Vec<f32> = (0..SEQ_FLOATS).map(|j| ((i * 31 + j) % 17) as f32 - 8.0).collect();
            stream.upload(&f32_bytes(&init), buf.as_slice()).unwrap();
        }
    }
    let run = |set: &[B::DeviceBuffer]| {
        let b = |i: usize| &set[i % SEQ_BUFFERS];
        for step in steps {
            // SAFETY: every buffer and the pinned source live until the end of this function, after the
            // final synchronize; the host does not touch `pinned` meanwhile.
            unsafe {
                match *step {
                    SequenceStep::Fill { buf, value } => fill::<B>(&stream, &fill_k, b(buf).as_slice(), value),
                    SequenceStep::Axpy { x, y, a } => {
                        axpy::<B>(&stream, &axpy_k, SEQ_FLOATS as u64, a, b(x).ptr(), b(y).ptr())
                    }
                    SequenceStep::Copy { src, dst } => {
                        if src % SEQ_BUFFERS != dst % SEQ_BUFFERS {
                            stream.copy_d2d(b(src).as_slice(), b(dst).as_slice()).unwrap()
                        }
                    }
                    SequenceStep::Memset { buf, offset, len, value } => {
                        let offset = offset % bytes;
                        let len = len.clamp(1, bytes - offset);
                        stream.memset(b(buf).slice(offset, len).unwrap(), value).unwrap()
                    }
                    SequenceStep::PadRows { src, dst, rows } => {
                        if src % SEQ_BUFFERS != dst % SEQ_BUFFERS {
                            let total = bytes as u64 / SEQ_ROW;
                            let args = [
                                KernelArg::Ptr(b(dst).ptr()),
                                KernelArg::Ptr(b(src).ptr()),
                                KernelArg::U64(SEQ_ROW),
                                KernelArg::U64(rows.clamp(1, total)),
                                KernelArg::U64(total),
                            ];
                            stream.launch(&rows_k, &LaunchConfig::for_elements(bytes as u64, 256), &args).unwrap()
                        }
                    }
                    SequenceStep::FromPinned { buf } => stream.copy_h2d_async(&pinned, 0, b(buf).as_slice()).unwrap(),
                }
            }
        }
    };
    run(&sets[0]);
    stream.synchronize().unwrap();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    run(&sets[1]);
    let graph = stream.end_capture().unwrap();
    let exec = device.instantiate(&graph).unwrap();
    // SAFETY: the captured buffers and `pinned` are live until the end of this function.
    unsafe { stream.launch_graph(&exec) }.unwrap();
    stream.synchronize().unwrap();
    for (i, (eager, replayed)) in sets[0].iter().zip(&sets[1]).enumerate() {
        let eager = download::<B>(&stream, eager.as_slice());
        let replayed = download::<B>(&stream, replayed.as_slice());
        assert!(eager == replayed, "buffer {i} differs between eager and replay after {steps:?}");
    }
}

/// A few fixed pseudo-random sequences through [`replay_equals_eager`] (the host backend's tests run
/// many more through proptest).
pub fn random_sequences_replay_equal_to_eager<B: Backend>(device: &B::Device) {
    for seed in 1..=4u32 {
        let r = pattern(64 * 8, seed);
        let steps: Vec<SequenceStep> = r
            .chunks_exact(8)
            .map(|c| {
                let (i, j) = (c[1] as usize, c[2] as usize);
                match c[0] % 6 {
                    0 => SequenceStep::Fill { buf: i, value: u32::from_le_bytes([c[3], c[4], c[5], 0]) },
                    1 => SequenceStep::Axpy { x: i, y: j, a: (c[3] as f32 - 128.0) / 64.0 },
                    2 => SequenceStep::Copy { src: i, dst: j },
                    3 => {
                        SequenceStep::Memset { buf: i, offset: c[3] as usize * 16, len: c[4] as usize * 8, value: c[5] }
                    }
                    4 => SequenceStep::PadRows { src: i, dst: j, rows: c[3] as u64 % 64 },
                    _ => SequenceStep::FromPinned { buf: i },
                }
            })
            .collect();
        replay_equals_eager::<B>(device, &steps);
    }
}
