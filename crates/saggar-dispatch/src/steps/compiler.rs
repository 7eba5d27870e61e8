//! [`StepCompiler`]: the one [`ProgramCompiler`] every step-program compiler shares.

use saggar_device::{Backend, BackendKind};

use super::StepProgram;
use crate::{CompileRequest, CompilerCapabilities, CompilerError, CompilerIdentity, ModelSpec, ProgramCompiler};

/// A compiler whose programs are [`StepProgram`]s (saggar-models' reference compiler, saggar-onnx).
///
/// Implementing it implements [`ProgramCompiler`] for every backend, with what such a compiler
/// declares about itself:
/// - **thread-safe**: a compile is a function of the model and the request (plus the device's
///   NVRTC/hipRTC, which compiles concurrently), so a session's plans compile in parallel;
/// - **one artifact per model on CUDA and HIP**: the generated code takes the batch (and the other
///   request dimensions) as kernel arguments, and a load checks that the request's code is the
///   artifact's. The host backend's plans are specialised per shape, so there each bucket has its
///   own artifact.
///
/// The compiler's own error type is boxed into [`CompilerError`]; `downcast_ref` recovers it.
pub trait StepCompiler: Send + Sync + 'static {
    /// What compiling or loading fails with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The model's inputs and outputs ([`ProgramCompiler::model`]).
    fn spec(&self) -> &ModelSpec;

    /// What identifies the generated code besides shapes and device ([`ProgramCompiler::identity`]).
    fn code_identity(&self) -> CompilerIdentity;

    /// Compiles `request` on `device`'s architecture into artifact bytes ([`ProgramCompiler::compile`]).
    fn compile_steps<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
    ) -> Result<Vec<u8>, Self::Error>;

    /// The chain of segments the model runs as ([`ProgramCompiler::segments`]); `None` by default.
    fn segments(&self) -> Option<crate::Segments<Self>>
    where
        Self: Sized,
    {
        None
    }

    /// Loads artifact bytes (untrusted: they come from the cache) into a program for `request` on
    /// `device` ([`ProgramCompiler::load`]).
    fn load_steps<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<StepProgram<B>, Self::Error>;
}

impl<B: Backend, C: StepCompiler> ProgramCompiler<B> for C {
    type Program = StepProgram<B>;

    fn model(&self) -> &ModelSpec {
        self.spec()
    }

    fn identity(&self) -> CompilerIdentity {
        self.code_identity()
    }

    fn capabilities(&self) -> CompilerCapabilities {
        CompilerCapabilities::default().with_thread_safe(true).with_one_artifact_per_model(B::KIND != BackendKind::Host)
    }

    fn segments(&self) -> Option<crate::Segments<Self>> {
        StepCompiler::segments(self)
    }

    fn compile(&self, device: &B::Device, request: &CompileRequest<'_>) -> Result<Vec<u8>, CompilerError> {
        Ok(self.compile_steps::<B>(device, request)?)
    }

    fn load(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<StepProgram<B>, CompilerError> {
        Ok(self.load_steps::<B>(device, request, artifact)?)
    }
}
