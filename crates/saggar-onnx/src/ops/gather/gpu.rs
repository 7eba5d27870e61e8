//! The GPU kernels of the gather family: Gather (`gather.cu`), GatherElements
//! (`gather_elements.cu`) and GatherND (`gather_nd.cu`), moving elements as bits.

use saggar_shape::DType;

use crate::ops::gpu::{GpuKernel, bits_type, index_type, render};

/// Which gather a [`GatherKernel`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GatherForm {
    /// Gather along one axis.
    Axis,
    /// GatherElements.
    Elements,
    /// GatherND.
    Nd,
}

/// A gather of `elem_bytes`-byte elements with `index` typed indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GatherKernel {
    pub(crate) form: GatherForm,
    pub(crate) elem_bytes: u8,
    pub(crate) index: DType,
}

impl GpuKernel for GatherKernel {
    fn prefix(&self) -> &'static str {
        match self.form {
            GatherForm::Axis => "gather",
            GatherForm::Elements => "gather_elements",
            GatherForm::Nd => "gather_nd",
        }
    }

    fn source(&self) -> String {
        let template = match self.form {
            GatherForm::Axis => include_str!("gather.cu"),
            GatherForm::Elements => include_str!("gather_elements.cu"),
            GatherForm::Nd => include_str!("gather_nd.cu"),
        };
        render(template, &[("T", bits_type(self.elem_bytes)), ("IX", index_type(self.index))])
    }
}
