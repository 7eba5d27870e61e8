//! Plans: a matmul description made into the library's objects (a descriptor and three layouts) with
//! the algorithm chosen for it ([`super::algorithm`]), one per description and operand alignment,
//! made on first use and kept by the handle.

use std::ffi::c_int;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Shared;
use super::algorithm::{HeuristicResult, preferred_workspace};
use super::library::{Handle, check};
use crate::blas::{Epilogue, MatmulDesc, MatmulPrecision, MatmulType};
use crate::error::{Error, Result};
use crate::gpu::driver::Driver;

/// What planning calls itself in errors.
const OP: &str = "blas.prepare";

/// Epilogue numbers, the same in both libraries: DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS.
fn epilogue_code(epilogue: Epilogue, bias: bool) -> u32 {
    match (epilogue, bias) {
        (Epilogue::None, false) => 1,
        (Epilogue::Relu, false) => 2,
        (Epilogue::None, true) => 4,
        (Epilogue::Relu, true) => 6,
        (Epilogue::GeluTanh, false) => 32,
        (Epilogue::GeluTanh, true) => 36,
    }
}

/// A planned matmul: the descriptor, the three layouts (C doubles as D) and the chosen algorithm.
pub(super) struct Plan {
    pub(super) desc: Handle,
    pub(super) layouts: [Handle; 3],
    pub(super) algo: Box<HeuristicResult>,
    /// `alpha` and `beta` in the scale type ([`scalar`]), passed by address to every call.
    pub(super) alpha: u32,
    pub(super) beta: u32,
    /// Held while the descriptor's bias pointer is written and read by the call that follows, so two
    /// threads never race on it (plans without a bias are never written after planning).
    pub(super) bias: Mutex<()>,
}

// SAFETY: a plan's handles are plain host objects of the library, which may be used from any thread;
// after planning the only write (the bias pointer) happens under `bias`.
unsafe impl Send for Plan {}
// SAFETY: as above.
unsafe impl Sync for Plan {}

/// The bits of a scale `value` in the scale type of `desc`: an `i32` for `i8` inputs (whose checked
/// scales are 0 or 1), else an `f32`. Both are 4 bytes, so a plan passes either by the same address.
fn scalar(desc: &MatmulDesc, value: f32) -> u32 {
    if desc.inputs.is_integer() { value as i32 as u32 } else { value.to_bits() }
}

/// The largest operand alignment a plan asks for: what the fast kernels need.
const MAX_ALIGNMENT: u32 = 16;

/// The alignment in bytes every matrix of `desc` keeps when the first batch starts at `ptrs`: the
/// largest power of two up to [`MAX_ALIGNMENT`] dividing every address and every batch stride in
/// bytes (of 2-byte elements for half matrices: an odd stride of them leaves 2-byte alignment, which
/// the tensor-core kernels wanting 16 bytes must not be chosen for).
pub(super) fn alignment(desc: &MatmulDesc, ptrs: &[u64]) -> u32 {
    let (input, output) = (desc.inputs.bytes() as u64, desc.output.bytes() as u64);
    let strides = [desc.stride_a * input, desc.stride_b * input, desc.stride_c * output]
        .map(|s| if desc.batch > 1 { s } else { 0 });
    let all = ptrs.iter().chain(&strides).fold(u64::from(MAX_ALIGNMENT), |acc, &v| acc | v);
    1 << all.trailing_zeros().min(MAX_ALIGNMENT.trailing_zeros())
}

/// Plans by description and the operand alignment they were chosen for.
pub(super) type PlanKey = (MatmulDesc, u32);

/// Destroys a half-made plan if planning fails.
struct PlanGuard<'a, D: Driver> {
    shared: &'a Shared<D>,
    plan: Option<Plan>,
}

impl<D: Driver> Drop for PlanGuard<'_, D> {
    fn drop(&mut self) {
        if let Some(plan) = self.plan.take()
            && let Err(e) = self.shared.destroy(plan)
        {
            self.shared.device.defer(e);
        }
    }
}

impl<D: Driver> Shared<D> {
    /// The plan of `desc` for operands aligned to `align` bytes, made on first use: tuned when
    /// `tune` ([`Blas::prepare`](crate::blas::Blas::prepare)), else host calls only, so a first use
    /// during a capture creates nothing on the device.
    pub(super) fn plan_for(&self, desc: &MatmulDesc, align: u32, tune: bool) -> Result<Arc<Plan>> {
        let key = (*desc, align);
        if let Some(plan) = self.plans.lock().get(&key) {
            return Ok(plan.clone());
        }
        self.device.enter(OP)?;
        let plan = self.plan(desc, align, tune)?;
        let mut plans = self.plans.lock();
        if let Some(theirs) = plans.get(&key) {
            // Another thread planned it meanwhile; keep theirs.
            let theirs = theirs.clone();
            drop(plans);
            self.destroy(plan)?;
            return Ok(theirs);
        }
        let plan = Arc::new(plan);
        plans.insert(key, plan.clone());
        Ok(plan)
    }

    /// A new plan for `desc` (already checked). Without `tune`, host calls only: nothing is enqueued
    /// or allocated on the device. With `tune` ([`Blas::prepare`](crate::blas::Blas::prepare)), a
    /// small problem's candidates are timed ([`Shared::run_candidates`]) unless this process timed
    /// them before, and the chosen kernels are launched once unless this process launched them before
    /// ([`Shared::load_kernels`]), so a later launch during a capture loads no code.
    fn plan(&self, desc: &MatmulDesc, align: u32, tune: bool) -> Result<Plan> {
        let empty = Plan {
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            algo: Box::new([0; 16]),
            alpha: scalar(desc, desc.alpha()),
            beta: scalar(desc, desc.beta()),
            bias: Mutex::new(()),
        };
        // Destroying a plan skips the objects not created yet.
        let mut guard = PlanGuard { shared: self, plan: Some(empty) };
        let plan = guard.plan.as_mut().expect("set above");
        self.describe(plan, desc)?;
        self.lay_out(plan, desc)?;
        self.with_preference(desc, align, |pref| self.choose_algorithm(plan, desc, align, tune, pref))?;
        Ok(guard.plan.take().expect("set above"))
    }

    /// Creates `plan`'s matmul descriptor for `desc`: the compute type (`f32` accumulation, TF32 only
    /// for `f32` inputs, with `f32` scales; `i32` accumulation and scales for `i8` inputs), the
    /// transposes (swapped: the vendor's A is our B, see the module docs; an `i8` product's `trans_b`
    /// is the vendor's transposed A of the "TN" form its integer kernels take), the epilogue and the
    /// bias type (the output's).
    fn describe(&self, plan: &mut Plan, desc: &MatmulDesc) -> Result<()> {
        let (spec, api) = (D::BLAS_LT, &self.api);
        let (compute, scale) = if desc.inputs == MatmulType::I8 {
            (spec.compute[2], spec.data_type(MatmulType::I32))
        } else {
            let tf32 = desc.inputs == MatmulType::F32 && desc.precision == MatmulPrecision::Tf32;
            (spec.compute[usize::from(tf32)], spec.data_type(MatmulType::F32))
        };
        let mut created = std::ptr::null_mut();
        // SAFETY: the out-pointer is writable; the plan's guard destroys what is created.
        check::<D>(OP, unsafe { (api.desc_create)(&mut created, compute, scale) })?;
        plan.desc = created;
        let [transa, transb, epilogue, _, bias_type] = spec.desc_attrs;
        let op_of = |t: bool| spec.op[usize::from(t)];
        // SAFETY: `plan.desc` was created above and is live for these `set`s.
        unsafe {
            self.set(OP, api.desc_set, plan.desc, transa, &op_of(desc.trans_b))?;
            self.set(OP, api.desc_set, plan.desc, transb, &op_of(desc.trans_a))?;
            self.set(OP, api.desc_set, plan.desc, epilogue, &epilogue_code(desc.epilogue, desc.bias))?;
            if desc.bias {
                self.set(OP, api.desc_set, plan.desc, bias_type, &spec.data_type(desc.output))?;
            }
        }
        Ok(())
    }

    /// Creates `plan`'s three layouts: column-major (rows, cols, ld) of the vendor's A (our B), B
    /// (our A), both of the input type, and C/D (our C^T) of the output type, with the batch count and
    /// stride of a strided batch.
    fn lay_out(&self, plan: &mut Plan, desc: &MatmulDesc) -> Result<()> {
        let (spec, api) = (D::BLAS_LT, &self.api);
        let (m, n, k) = (desc.m, desc.n, desc.k);
        let shapes = [
            if desc.trans_b { (k, n, k) } else { (n, k, n) },
            if desc.trans_a { (m, k, m) } else { (k, m, k) },
            (n, m, n),
        ];
        let strides = [desc.stride_b, desc.stride_a, desc.stride_c];
        let types = [desc.inputs, desc.inputs, desc.output].map(|ty| spec.data_type(ty));
        for (i, ((rows, cols, ld), (stride, ty))) in shapes.into_iter().zip(strides.into_iter().zip(types)).enumerate()
        {
            let mut layout = std::ptr::null_mut();
            // SAFETY: the out-pointer is writable.
            check::<D>(OP, unsafe { (api.layout_create)(&mut layout, ty, rows, cols, ld as i64) })?;
            plan.layouts[i] = layout;
            if desc.batch > 1 {
                let [count_attr, stride_attr] = spec.layout_attrs;
                // SAFETY: `layout` was created above and is live; the values have the attributes' types
                // (int32_t, int64_t); the checks bound both.
                unsafe {
                    self.set(OP, api.layout_set, layout, count_attr, &(desc.batch as i32))?;
                    self.set(OP, api.layout_set, layout, stride_attr, &(stride as i64))?;
                }
            }
        }
        Ok(())
    }

    /// Runs `choose` with a matmul preference that offers `desc`'s workspace
    /// ([`preferred_workspace`]) and asks for operands aligned to `align` bytes, destroyed afterwards.
    fn with_preference(&self, desc: &MatmulDesc, align: u32, choose: impl FnOnce(Handle) -> Result<()>) -> Result<()> {
        let (spec, api) = (D::BLAS_LT, &self.api);
        let mut pref = std::ptr::null_mut();
        // SAFETY: the out-pointer is writable.
        check::<D>(OP, unsafe { (api.pref_create)(&mut pref) })?;
        let result = (|| {
            let workspace = preferred_workspace(desc, self.workspace_bytes) as u64;
            // SAFETY: `pref` is live (created above, destroyed below).
            unsafe { self.set(OP, api.pref_set, pref, spec.pref_max_workspace, &workspace)? };
            for attr in spec.pref_min_alignment.into_iter().flatten() {
                // SAFETY: as above; the attribute is a uint32_t.
                unsafe { self.set(OP, api.pref_set, pref, attr, &align)? };
            }
            choose(pref)
        })();
        // SAFETY: `pref` is live and not used again.
        let destroyed = check::<D>(OP, unsafe { (api.pref_destroy)(pref) });
        result?;
        destroyed
    }

    /// Up to `wanted` algorithms the heuristic offers for `plan` under `pref`: the results (each
    /// [`LtSpec::heuristic_result_bytes`](super::LtSpec::heuristic_result_bytes) long, a multiple of
    /// 8) and how many came back, at least one.
    pub(super) fn heuristic(
        &self,
        plan: &Plan,
        desc: &MatmulDesc,
        pref: Handle,
        wanted: usize,
    ) -> Result<(Vec<u64>, usize)> {
        let spec = D::BLAS_LT;
        let mut results = vec![0u64; (wanted * spec.heuristic_result_bytes).div_ceil(8)];
        let [a, b, c] = plan.layouts;
        let mut returned: c_int = 0;
        // SAFETY: every handle is live; `results` holds `wanted` results of the library's size.
        check::<D>(OP, unsafe {
            (self.api.heuristic)(
                self.handle,
                plan.desc,
                a,
                b,
                c,
                c,
                pref,
                wanted as c_int,
                results.as_mut_ptr().cast(),
                &mut returned,
            )
        })?;
        if returned < 1 {
            return Err(Error::InvalidMatmul {
                m: desc.m,
                n: desc.n,
                k: desc.k,
                batch: desc.batch,
                reason: format!("{} has no algorithm for it on this device", spec.library),
            });
        }
        Ok((results, (returned as usize).min(wanted)))
    }

    /// Destroys a plan's objects, returning the first error.
    pub(super) fn destroy(&self, plan: Plan) -> Result<()> {
        let mut first = Ok(());
        for layout in plan.layouts.into_iter().filter(|l| !l.is_null()) {
            // SAFETY: each layout is live and destroyed once (the plan is consumed).
            let r = check::<D>("blas.drop", unsafe { (self.api.layout_destroy)(layout) });
            first = first.and(r);
        }
        if !plan.desc.is_null() {
            // SAFETY: as above.
            let r = check::<D>("blas.drop", unsafe { (self.api.desc_destroy)(plan.desc) });
            first = first.and(r);
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_is_the_largest_power_of_two_up_to_16_of_addresses_and_strides() {
        let desc = MatmulDesc::gemm(3, 5, 7);
        assert_eq!(alignment(&desc, &[]), 16);
        assert_eq!(alignment(&desc, &[0x1000, 0x2040, 0x3008]), 8);
        assert_eq!(alignment(&desc, &[0x1004]), 4);
        let batched = MatmulDesc { batch: 2, ..desc };
        assert_eq!(alignment(&batched, &[0x1000]), 4, "a stride of 21 floats is 4-byte aligned");
        let even = MatmulDesc { batch: 2, stride_a: 24, stride_b: 40, stride_c: 16, ..desc };
        assert_eq!(alignment(&even, &[0x1000]), 16);
    }

    #[test]
    fn half_strides_count_two_bytes_an_element() {
        let desc = MatmulDesc { batch: 2, stride_a: 24, stride_b: 40, stride_c: 16, ..MatmulDesc::gemm(3, 5, 7) };
        let half = desc.with_types(MatmulType::F16, MatmulType::F16);
        assert_eq!(alignment(&half, &[0x1000]), 16, "24 and 40 halves are 48 and 80 bytes");
        let odd = MatmulDesc { stride_a: 21, ..half };
        assert_eq!(alignment(&odd, &[0x1000]), 2, "21 halves are 42 bytes");
        let mixed = MatmulDesc { stride_c: 18, ..half.with_types(MatmulType::BF16, MatmulType::F32) };
        assert_eq!(alignment(&mixed, &[0x1000]), 8, "18 f32s of C are 72 bytes");
        assert_eq!(alignment(&half, &[0x1002]), 2, "a half pointer may be 2-byte aligned");
    }

    #[test]
    fn plans_of_other_types_are_other_plans() {
        use std::collections::HashSet;
        let desc = MatmulDesc::gemm(64, 64, 64);
        let keys: HashSet<PlanKey> =
            crate::blas::MATMUL_TYPES.iter().map(|&(i, o)| (desc.with_types(i, o), alignment(&desc, &[]))).collect();
        assert_eq!(keys.len(), crate::blas::MATMUL_TYPES.len());
    }

    #[test]
    fn integer_scales_are_i32_bits() {
        let desc = MatmulDesc::gemm_i8(4, 4, 4).with_scales(1.0, 1.0);
        assert_eq!(scalar(&desc, desc.alpha()), 1);
        assert_eq!(scalar(&desc, 0.0), 0);
        let float = MatmulDesc::gemm(4, 4, 4);
        assert_eq!(scalar(&float, 1.0), 1.0f32.to_bits());
    }

    #[test]
    fn epilogue_codes_are_the_vendors() {
        assert_eq!(epilogue_code(Epilogue::None, false), 1);
        assert_eq!(epilogue_code(Epilogue::Relu, true), 6);
        assert_eq!(epilogue_code(Epilogue::GeluTanh, true), 36);
    }
}
