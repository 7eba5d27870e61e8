//! Which attention kernel the compiler plans per bucket (the row kernel or a tile size), from one
//! generated source, and what it refuses.

use saggar_device::BackendKind;

use crate::fuse::attention::kernel::{Form, TILED_THREADS};
use crate::plan::PlanStep;
use crate::synthetic::{AttentionConfig, attention_block};
use crate::{AttentionKernel, ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions};

/// The synthetic block's attention: masked, unguarded, f32 out.
const FORM: Form = Form { mask: true, nan_to_zero: false, store: None, inputs: [saggar_shape::DType::F32; 3] };

fn compiler(kernel: AttentionKernel) -> OnnxCompiler {
    let cfg =
        AttentionConfig { heads: 4, head_dim: 64, div_scale: true, nan_guard: false, ..AttentionConfig::default() };
    let model = OnnxModel::from_bytes(&attention_block(cfg).to_bytes(), "attention", &ImportLimits::default()).unwrap();
    OnnxCompiler::new(model, OnnxOptions::default().with_attention(kernel))
}

/// The attention launch of the CUDA plan at `batch` (sequence 128): its kernel and threads.
fn attention_launch(c: &OnnxCompiler, batch: u64) -> (String, u32) {
    let dims = vec![vec![batch, 128, 256], vec![batch, 1, 1, 128]];
    let lowered = c.lower(&dims, &[], BackendKind::Cuda).unwrap();
    let launches: Vec<_> = lowered
        .steps
        .iter()
        .filter_map(|s| match s {
            PlanStep::Launch(l) if l.kernel.starts_with("onnx_attention") => Some((l.kernel.clone(), l.config.block.x)),
            _ => None,
        })
        .collect();
    assert_eq!(launches.len(), 1, "{launches:?}");
    launches[0].clone()
}

#[test]
fn auto_picks_the_row_kernel_or_the_largest_filling_tile_per_bucket_from_one_source() {
    use crate::fuse::attention::kernel::{gpu_kernel, gpu_tiled_kernel};
    let auto = compiler(AttentionKernel::Auto);
    let rows = gpu_kernel(FORM).0;
    let tiled = |r: usize| gpu_tiled_kernel(FORM, 64, 64, r).0;
    // 4 heads, 128 queries: batch 1 gives 32 tiles of 16 rows (row kernel); batch 4 gives 128
    // tiles of 16 rows and fewer than 256 of any larger tile; batch 64 gives 512 tiles of 64.
    assert_eq!(attention_launch(&auto, 1), (rows.clone(), 128), "one key per thread, 128 keys");
    assert_eq!(attention_launch(&auto, 4), (tiled(16), TILED_THREADS));
    assert_eq!(attention_launch(&auto, 16), (tiled(32), TILED_THREADS), "256 tiles of 32 rows");
    assert_eq!(attention_launch(&auto, 64), (tiled(64), TILED_THREADS));
    let source = |batch: u64| auto.gpu_source(&[vec![batch, 128, 256], vec![batch, 1, 1, 128]]).unwrap();
    let one = source(1);
    assert_eq!(one, source(64), "every bucket compiles the same source");
    for name in [rows.clone(), tiled(16), tiled(32), tiled(64)] {
        assert!(one.contains(&name), "{name} is defined");
    }
    // Forced, each bucket launches a kernel of the kind asked for, and only that kind is generated.
    let rows_only = compiler(AttentionKernel::Rows);
    let tiled_only = compiler(AttentionKernel::Tiled);
    for batch in [1, 64] {
        assert_eq!(attention_launch(&rows_only, batch).0, rows);
    }
    assert_eq!(attention_launch(&tiled_only, 1).0, tiled(16));
    assert_eq!(attention_launch(&tiled_only, 64).0, tiled(64));
    let source = |c: &OnnxCompiler| c.gpu_source(&[vec![1, 128, 256], vec![1, 1, 1, 128]]).unwrap();
    assert!(!source(&rows_only).contains("onnx_attention_tiled_"));
    assert!(!source(&tiled_only).contains(&rows));
}

/// The tiled kernel's offsets are 32-bit: where an operand has 2^31 elements or more, the
/// automatic choice runs the row kernel and a forced tiled kernel is refused, naming what to use.
#[test]
fn operands_beyond_32_bit_offsets_take_the_row_kernel_or_are_refused_when_tiled_is_forced() {
    // Batch 65536, 128 tokens of 256: 2^31 elements in the activations.
    let big = |c: &OnnxCompiler| c.lower(&[vec![1 << 16, 128, 256], vec![1 << 16, 1, 1, 128]], &[], BackendKind::Cuda);
    let unbounded = |kernel| {
        let c = compiler(kernel);
        OnnxCompiler::new(
            c.onnx_model().clone(),
            OnnxOptions::default().with_attention(kernel).with_max_program_bytes(u64::MAX),
        )
    };
    let auto = big(&unbounded(AttentionKernel::Auto)).unwrap();
    let rows = crate::fuse::attention::kernel::gpu_kernel(FORM).0;
    assert!(
        auto.steps.iter().any(|s| matches!(s, PlanStep::Launch(l) if l.kernel == rows)),
        "the row kernel serves 2^31 elements"
    );
    match big(&unbounded(AttentionKernel::Tiled)) {
        Err(crate::OnnxError::UnsupportedOnBackend { reason, .. }) => {
            assert!(reason.contains("32 bits") && reason.contains("row attention kernel"), "{reason}")
        }
        Err(other) => panic!("expected UnsupportedOnBackend, got {other}"),
        Ok(_) => panic!("a forced tiled kernel was planned for 2^31 elements"),
    }
}

/// At fp16 and bf16 every bucket runs the tensor-core kernel of its half type, reading the half
/// results of the Q, K and V projections, with one warp per 16
/// query rows, up to four, or four warps sharing 16 rows where that is too little work; naming the
/// pattern's Softmax (or its op type) in the keep list keeps that attention in f32.
#[test]
fn half_precisions_run_the_tensor_core_kernel_unless_the_keep_list_names_the_pattern() {
    use crate::Precision;
    use crate::fuse::attention::kernel::{MmaBlock, gpu_mma_kernel};
    use saggar_shape::DType;
    let half = |precision: Precision, keep: &[&str]| {
        let model = compiler(AttentionKernel::Auto).onnx_model().clone();
        OnnxCompiler::new(model, OnnxOptions::default().with_precision(precision).with_keep_fp32(keep.iter().copied()))
    };
    let fp16 = half(Precision::Fp16, &[]);
    // Q, K and V are the projections' half results.
    let form = |half: DType| Form { inputs: [half; 3], ..FORM };
    let mma16 = |block| gpu_mma_kernel(form(DType::F16), (64, 64), DType::F16, block).0;
    // Four heads of 128 rows: batch 1 has 32 tiles of 16 rows and batch 16 256 tiles of 32 (512
    // warps), too little to fill the GPU, so four warps share each tile of 16 rows's keys; batch 64
    // has 512 tiles of 64 rows, 2,048 warps with rows of their own.
    assert_eq!(attention_launch(&fp16, 1), (mma16(MmaBlock::SPLIT), 128));
    assert_eq!(attention_launch(&fp16, 16), (mma16(MmaBlock::SPLIT), 128));
    assert_eq!(attention_launch(&fp16, 64), (mma16(MmaBlock::rows(4)), 128));
    let bf16 = half(Precision::Bf16, &[]);
    let mma_bf16 = gpu_mma_kernel(form(DType::BF16), (64, 64), DType::BF16, MmaBlock::rows(4)).0;
    assert_eq!(attention_launch(&bf16, 64).0, mma_bf16);
    let source = bf16.gpu_source(&[vec![1, 128, 256], vec![1, 1, 1, 128]]).unwrap();
    assert!(source.contains("onnx_mma_bf16(") && !source.contains("onnx_attention_tiled_"));
    for keep in ["Softmax", "MatMul"] {
        let kept = half(Precision::Fp16, &[keep]);
        assert!(attention_launch(&kept, 64).0.starts_with("onnx_attention_tiled_"), "{keep} keeps f32");
    }
}

/// A result whose only reader is the precision pass's Cast to half (the checked-in BERT's output
/// projections at fp16 and bf16) is stored in half by the attention kernel: the Cast launches
/// nothing of its own.
#[test]
fn the_half_cast_of_the_result_is_stored_by_the_attention_kernel() {
    use crate::Precision;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join("bert");
    let model = OnnxModel::load(root.join("model.onnx")).unwrap();
    let dims = [vec![2, 8], vec![2, 8]];
    let plan = |options: OnnxOptions| {
        let c = OnnxCompiler::new(model.clone(), options);
        (c.plan_summary(&dims, BackendKind::Cuda).unwrap(), c.gpu_source(&dims).unwrap())
    };
    let (f32_plan, f32_source) = plan(OnnxOptions::default());
    assert!(f32_plan.attention_groups > 0);
    assert!(!f32_source.contains("= onnx_f32_to_f16(l > 0.0f"), "f32 plans store f32");
    for (precision, store) in [(Precision::Fp16, "onnx_f32_to_f16"), (Precision::Bf16, "onnx_f32_to_bf16")] {
        let (summary, source) = plan(OnnxOptions::default().with_precision(precision));
        assert_eq!(summary.attention_groups, f32_plan.attention_groups, "{precision}");
        assert!(
            source.contains(&format!("return {store}(l > 0.0f ? a / l"))
                || source.contains(&format!("return {store}(a / l)")),
            "{precision}: the attention kernel stores half"
        );
    }
}
