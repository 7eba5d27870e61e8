//! The GPU kernels of the signal family: DFT (`dft.cu`) and STFT (`stft.cu`), one thread per output
//! bin summing its `O(length)` terms in double precision (no radix FFT).

use crate::ops::gpu::{GpuKernel, render};

/// A direct DFT along one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DftKernel;

impl GpuKernel for DftKernel {
    fn prefix(&self) -> &'static str {
        "dft"
    }

    fn source(&self) -> String {
        render(include_str!("dft.cu"), &[])
    }
}

/// A direct STFT, with a window input when `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StftKernel {
    pub(crate) window: bool,
}

impl GpuKernel for StftKernel {
    fn prefix(&self) -> &'static str {
        "stft"
    }

    fn source(&self) -> String {
        let (param, weight) =
            if self.window { (", const float* __restrict__ window", "(double)window[n]") } else { ("", "1.0") };
        render(include_str!("stft.cu"), &[("WINDOW_PARAM", param), ("WEIGHT", weight)])
    }
}
