//! `NodeArg` (an input or output: name, shape, type) and `ModelMetadata`, as ONNX Runtime shows
//! them.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use saggar_onnx::ops::shape_util::is_unnamed;
use saggar_shape::{Dim, TensorSpec};

use crate::dtypes::onnx_type;

/// One dimension as ONNX Runtime shows it: an int, a symbol's name, or `None` for an extent the
/// file leaves unnamed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ShownDim {
    Fixed(u64),
    Symbol(String),
    Unnamed,
}

/// A model input or output: `name`, `shape` (ints, with strings for symbolic dimensions) and
/// `type` (`"tensor(float)"`).
#[pyclass(module = "saggar", frozen)]
#[derive(Debug, Clone)]
pub struct NodeArg {
    name: String,
    dims: Vec<ShownDim>,
    ty: &'static str,
}

impl NodeArg {
    /// The node arg of `spec`. saggar names an input axis the file leaves unnamed
    /// `<input>_<axis>`; ONNX Runtime shows it as `None`, and so does this.
    pub(crate) fn of(spec: &TensorSpec) -> NodeArg {
        let dims = spec
            .dims()
            .iter()
            .enumerate()
            .map(|(axis, d)| match d {
                Dim::Fixed(n) => ShownDim::Fixed(*n),
                d if is_unnamed(d) => ShownDim::Unnamed,
                Dim::Symbolic(s) if **s == *format!("{}_{axis}", spec.name()) => ShownDim::Unnamed,
                Dim::Symbolic(s) => ShownDim::Symbol(s.to_string()),
            })
            .collect();
        NodeArg { name: spec.name().to_string(), dims, ty: onnx_type(spec.dtype()) }
    }
}

#[pymethods]
impl NodeArg {
    /// The tensor's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Its shape: ints for fixed extents, the symbol's name for symbolic ones, `None` for unnamed ones.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for d in &self.dims {
            match d {
                ShownDim::Fixed(n) => list.append(n)?,
                ShownDim::Symbol(s) => list.append(s)?,
                ShownDim::Unnamed => list.append(py.None())?,
            }
        }
        Ok(list)
    }

    /// Its type, ONNX Runtime's string: `"tensor(float)"`, `"tensor(int64)"`, ...
    #[getter]
    fn r#type(&self) -> &'static str {
        self.ty
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("NodeArg(name='{}', type='{}', shape={})", self.name, self.ty, self.shape(py)?.repr()?))
    }
}

/// What the model file says about itself (`InferenceSession.get_modelmeta()`).
#[pyclass(module = "saggar", frozen)]
#[derive(Debug, Clone)]
pub struct ModelMetadata {
    meta: saggar_onnx::ModelMetadata,
}

impl ModelMetadata {
    pub(crate) fn of(meta: &saggar_onnx::ModelMetadata) -> ModelMetadata {
        ModelMetadata { meta: meta.clone() }
    }
}

#[pymethods]
impl ModelMetadata {
    #[getter]
    fn producer_name(&self) -> &str {
        &self.meta.producer_name
    }

    #[getter]
    fn graph_name(&self) -> &str {
        &self.meta.graph_name
    }

    #[getter]
    fn domain(&self) -> &str {
        &self.meta.domain
    }

    #[getter]
    fn description(&self) -> &str {
        &self.meta.doc_string
    }

    #[getter]
    fn graph_description(&self) -> &str {
        &self.meta.graph_doc_string
    }

    /// The model's version; ONNX Runtime's "no version" (the largest int64) when the file sets none.
    #[getter]
    fn version(&self) -> i64 {
        self.meta.model_version.unwrap_or(i64::MAX)
    }

    #[getter]
    fn custom_metadata_map<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let map = PyDict::new(py);
        for (k, v) in &self.meta.properties {
            map.set_item(k, v)?;
        }
        Ok(map)
    }
}
