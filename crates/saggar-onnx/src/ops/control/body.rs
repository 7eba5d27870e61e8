//! [`Body`], what the control ops see of a subgraph (an If branch, a Loop or Scan body), and
//! [`Subgraph`], the graph-valued attribute holding one.
//!
//! The graph layer imports a subgraph and implements [`Body`] for it (this layer knows nothing of
//! graphs); the control-flow pass reaches the imported graph again through [`Body::as_any`].

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::ops::{InferInput, OpError, ValueType};

/// An imported subgraph as its op sees it: formal inputs, the outer-scope values it reads
/// (captures, by name) and outputs.
pub trait Body: fmt::Debug + Send + Sync + 'static {
    /// The subgraph's name (for errors).
    fn name(&self) -> &str;

    /// Number of formal inputs (a Loop body's iteration number, condition and carried values).
    fn inputs(&self) -> usize;

    /// Number of outputs.
    fn outputs(&self) -> usize;

    /// The outer-scope values the subgraph reads, by name, in the order it takes them after its
    /// formal inputs.
    fn captures(&self) -> &[String];

    /// Nodes in the subgraph, nested subgraphs' included (what one unrolled copy adds).
    fn node_count(&self) -> usize;

    /// The output types for `inputs` (formal inputs, then captures): constants fold on the way.
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError>;

    /// The implementation, for the graph pass that inlines it.
    fn as_any(&self) -> &dyn Any;
}

/// A `GRAPH` attribute: the imported subgraph and the encoded `GraphProto` it came from (written
/// back by the model builder, compared for equality).
#[derive(Clone)]
pub struct Subgraph {
    body: Arc<dyn Body>,
    proto: Arc<[u8]>,
}

impl Subgraph {
    /// The attribute of `body`, imported from the encoded `GraphProto` `proto`.
    pub fn new(body: Arc<dyn Body>, proto: Vec<u8>) -> Subgraph {
        Subgraph { body, proto: proto.into() }
    }

    /// The imported subgraph.
    pub fn body(&self) -> &Arc<dyn Body> {
        &self.body
    }

    /// The encoded `GraphProto`.
    pub fn proto(&self) -> &[u8] {
        &self.proto
    }
}

impl fmt::Debug for Subgraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "graph `{}` ({} nodes)", self.body.name(), self.body.node_count())
    }
}

impl PartialEq for Subgraph {
    fn eq(&self, other: &Subgraph) -> bool {
        self.proto == other.proto
    }
}
