//! The conformance suite's BLAS tests: every backend's [`Blas`] against one reference GEMM written
//! here (a plain triple loop, independent of the host backend's), eagerly and through a captured
//! graph, and the same refusals of bad requests everywhere. Instantiated by
//! [`conformance_tests!`](crate::conformance_tests) with the rest of the suite. Each case prints a
//! `PASS` or `FAIL` line with its largest error, so a GPU run's log shows what was compared.

use crate::api::{Backend, Device, DeviceBuffer, Graph as _, Stream};
use crate::blas::{Blas, BlasConfig, Epilogue, MatmulDesc, MatmulOperands, MatmulPrecision, MatmulType};
use crate::error::Error;
use crate::types::{CaptureMode, DeviceSlice};

/// Workspace of the handles these tests make: small, so the host backend's memory is not strained,
/// and enough for every algorithm the vendors pick at these sizes.
const WORKSPACE: usize = 4 << 20;

/// `len` values in [-1, 1] from an xorshift stream seeded by `seed`: the operands of these tests,
/// and of benches that want the same deterministic data.
pub fn values(len: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// The reference: `desc` on host vectors (holding what the device matrices hold, half values
/// widened), in `f64`, element by element from the definition; each result is rounded to the output
/// type as a device stores it.
pub fn reference(desc: &MatmulDesc, a: &[f32], b: &[f32], c: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let (m, n, k) = (desc.m as usize, desc.n as usize, desc.k as usize);
    let mut out = c.to_vec();
    for batch in 0..desc.batch as usize {
        let (a0, b0, c0) =
            (batch * desc.stride_a as usize, batch * desc.stride_b as usize, batch * desc.stride_c as usize);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f64;
                for p in 0..k {
                    let a_ip = if desc.trans_a { a[a0 + p * m + i] } else { a[a0 + i * k + p] };
                    let b_pj = if desc.trans_b { b[b0 + j * k + p] } else { b[b0 + p * n + j] };
                    acc += f64::from(a_ip) * f64::from(b_pj);
                }
                let prior = f64::from(desc.beta()) * f64::from(c[c0 + i * n + j]);
                let biased = f64::from(desc.alpha()) * acc + prior + bias.map_or(0.0, |b| f64::from(b[j]));
                out[c0 + i * n + j] = desc.output.round(desc.epilogue.apply(biased as f32));
            }
        }
    }
    out
}

/// The cases every backend runs: plain, transposed, batched with a broadcast operand, bias with each
/// epilogue, scales, TF32 allowed, and one in the range whose candidates a GPU handle times; then
/// the same kinds of case for every pair of half element types ([`half_cases`]).
pub fn cases() -> Vec<(String, MatmulDesc)> {
    let base = MatmulDesc::gemm(33, 17, 65);
    let cases = vec![
        ("plain 33x17x65", base),
        ("trans_a", MatmulDesc { trans_a: true, ..base }),
        ("trans_b", MatmulDesc { trans_b: true, ..base }),
        ("trans_a trans_b", MatmulDesc { trans_a: true, trans_b: true, ..base }),
        ("batch 3, B broadcast", MatmulDesc { batch: 3, stride_b: 0, ..base }),
        ("batch 4, strided", MatmulDesc { batch: 4, ..MatmulDesc::gemm(8, 12, 16) }),
        ("bias", MatmulDesc { bias: true, ..base }),
        ("bias relu", MatmulDesc { bias: true, epilogue: Epilogue::Relu, ..base }),
        ("relu", MatmulDesc { epilogue: Epilogue::Relu, ..base }),
        ("bias gelu", MatmulDesc { bias: true, epilogue: Epilogue::GeluTanh, ..base }),
        ("alpha 0.5 beta 1", base.with_scales(0.5, 1.0)),
        ("tf32", MatmulDesc { precision: MatmulPrecision::Tf32, ..MatmulDesc::gemm(64, 64, 64) }),
        // Large enough (100 MFLOP) for a prepared GPU handle to time its candidates.
        (
            "timed candidates 128x512x768 bias gelu",
            MatmulDesc { bias: true, epilogue: Epilogue::GeluTanh, ..MatmulDesc::gemm(128, 512, 768) },
        ),
    ];
    let mut cases: Vec<(String, MatmulDesc)> = cases.into_iter().map(|(name, desc)| (name.into(), desc)).collect();
    cases.extend(half_cases());
    cases
}

/// Half-precision cases, for each (inputs, output) pair with half inputs: odd sizes (2-byte aligned
/// batches) with bias and each epilogue (GELU into f32 outputs only), both transposes, strided and broadcast batches, `beta`
/// reading a half `C`, aligned sizes the tensor-core kernels take, and one `f16` case in the range
/// whose candidates a GPU handle times.
pub fn half_cases() -> Vec<(String, MatmulDesc)> {
    use MatmulType::{BF16, F16, F32};
    let base = MatmulDesc::gemm(33, 17, 65);
    let shapes = [
        ("bias gelu", MatmulDesc { bias: true, epilogue: Epilogue::GeluTanh, ..base }),
        (
            "trans_a trans_b bias relu",
            MatmulDesc { trans_a: true, trans_b: true, bias: true, epilogue: Epilogue::Relu, ..base },
        ),
        ("batch 3 B broadcast trans_b", MatmulDesc { batch: 3, stride_b: 0, trans_b: true, ..base }),
        (
            "batch 4 strided alpha 0.5 beta 1",
            MatmulDesc { batch: 4, stride_c: 8 * 12 + 5, ..MatmulDesc::gemm(8, 12, 16).with_scales(0.5, 1.0) },
        ),
        ("aligned 64x64x64 bias trans_a", MatmulDesc { bias: true, trans_a: true, ..MatmulDesc::gemm(64, 64, 64) }),
    ];
    let mut cases = Vec::new();
    for (inputs, output) in [(F16, F32), (F16, F16), (BF16, F32), (BF16, BF16)] {
        for (shape, desc) in &shapes {
            let desc = match desc.epilogue {
                Epilogue::GeluTanh if output != F32 => MatmulDesc { epilogue: Epilogue::None, ..*desc },
                _ => *desc,
            };
            let shape = if desc.epilogue == Epilogue::None { shape.replace(" gelu", "") } else { shape.to_string() };
            cases.push((format!("{}->{} {shape}", inputs.name(), output.name()), desc.with_types(inputs, output)));
        }
    }
    // 50 MFLOP: in the timed range; a smaller sibling of the f32 case, as the host runs it too.
    let timed = MatmulDesc { bias: true, epilogue: Epilogue::GeluTanh, ..MatmulDesc::gemm(128, 256, 768) };
    cases.push(("f16->f32 timed candidates 128x256x768 bias gelu".into(), timed.with_types(F16, F32)));
    let timed = MatmulDesc { epilogue: Epilogue::Relu, ..timed };
    cases.push(("f16->f16 timed candidates 128x256x768 bias relu".into(), timed.with_types(F16, F16)));
    cases
}

/// Largest error allowed for an expected value `want`: the accumulation's, `f32` over `k` terms of
/// size about 1 (products of half inputs are exact in `f32`) or TF32's 10-bit mantissa, plus one unit
/// in the last place of a half output (the device and the reference may round to neighbours).
fn tolerance(desc: &MatmulDesc, want: f32) -> f32 {
    let accumulation = match (desc.inputs, desc.precision) {
        (MatmulType::F32, MatmulPrecision::Tf32) => 2e-3 * (desc.k as f32).sqrt() * 4.0,
        _ => 1e-5 * desc.k as f32,
    };
    let rounding = match desc.output {
        MatmulType::F32 => 0.0,
        MatmulType::F16 => 1e-3,
        MatmulType::BF16 => 8e-3,
        // Integer products are compared exactly by `blas_i8_matmul_is_exact`.
        MatmulType::I8 | MatmulType::I32 => 0.0,
    };
    accumulation + rounding * want.abs()
}

/// Device buffers for one case, filled, and the host copies of what they hold (half values widened).
struct Operands<B: Backend> {
    bufs: Vec<B::DeviceBuffer>,
    host: [Vec<f32>; 4],
    /// Element types of A, B, C and the bias.
    types: [MatmulType; 4],
}

impl<B: Backend> Operands<B> {
    fn new(device: &B::Device, stream: &B::Stream, desc: &MatmulDesc, seed: u32) -> Self {
        let types = [desc.inputs, desc.inputs, desc.output, desc.output];
        let span = |stride: u64, elements: u64| ((desc.batch - 1) * stride + elements) as usize;
        let lens = [
            span(desc.stride_a, desc.m * desc.k),
            span(desc.stride_b, desc.k * desc.n),
            span(desc.stride_c, desc.m * desc.n),
            desc.n as usize,
        ];
        let bufs: Vec<B::DeviceBuffer> =
            lens.iter().zip(types).map(|(len, ty)| device.alloc(len * ty.bytes()).expect("alloc")).collect();
        let mut ops = Operands { bufs, host: Default::default(), types };
        ops.fill(std::array::from_fn(|i| values(lens[i], seed + i as u32)));
        ops.upload(stream);
        ops
    }

    /// Takes `values` as the operands, rounded to their element types.
    fn fill(&mut self, values: [Vec<f32>; 4]) {
        self.host = std::array::from_fn(|i| values[i].iter().map(|&v| self.types[i].round(v)).collect());
    }

    fn upload(&self, stream: &B::Stream) {
        for ((buf, host), ty) in self.bufs.iter().zip(&self.host).zip(self.types) {
            stream.upload(&ty.encode(host), buf.as_slice()).expect("upload");
        }
    }

    fn operands(&self, desc: &MatmulDesc, workspace: DeviceSlice) -> MatmulOperands {
        MatmulOperands {
            a: self.bufs[0].as_slice(),
            b: self.bufs[1].as_slice(),
            c: self.bufs[2].as_slice(),
            bias: desc.bias.then(|| self.bufs[3].as_slice()),
            workspace,
        }
    }

    fn expected(&self, desc: &MatmulDesc) -> Vec<f32> {
        let bias = desc.bias.then_some(self.host[3].as_slice());
        reference(desc, &self.host[0], &self.host[1], &self.host[2], bias)
    }

    fn result(&self, stream: &B::Stream) -> Vec<f32> {
        let mut out = vec![0u8; self.bufs[2].len()];
        stream.download(self.bufs[2].as_slice(), &mut out).expect("download C");
        self.types[2].decode(&out)
    }
}

fn compare(backend: &str, case: &str, desc: &MatmulDesc, got: &[f32], want: &[f32]) {
    // The worst element by its share of what it may be off by.
    let (worst, allowed) = got
        .iter()
        .zip(want)
        .map(|(g, w)| ((g - w).abs(), tolerance(desc, *w)))
        .fold((0f32, tolerance(desc, 0.0)), |acc, e| if e.0 / e.1 > acc.0 / acc.1 { e } else { acc });
    let ok = got.len() == want.len() && worst <= allowed && got.iter().all(|v| v.is_finite());
    let verdict = if ok { "PASS" } else { "FAIL" };
    eprintln!("{verdict} blas {backend} {case}: worst abs error {worst:.3e} (its tolerance {allowed:.1e})");
    assert!(ok, "{backend} {case}: abs error {worst} over its tolerance {allowed}");
}

fn blas_or_skip<B: Backend>(device: &B::Device, test: &str) -> Option<B::Blas> {
    match device.create_blas(&BlasConfig { workspace_bytes: WORKSPACE, ..BlasConfig::from_env() }) {
        Ok(blas) => Some(blas),
        Err(e @ Error::LibraryUnavailable { .. }) => {
            eprintln!("SKIPPED {}::{test}: {e}", B::KIND);
            None
        }
        Err(e) => panic!("create_blas: {e}"),
    }
}

/// Every case, run eagerly, matches the reference: planned on first use (the heuristic's first
/// choice), and on another handle, timing 8 candidates, prepared first (on a GPU, the fastest of
/// the timed candidates).
pub fn blas_matmul_matches_reference<B: Backend>(device: &B::Device) {
    let Some(blas) = blas_or_skip::<B>(device, "blas_matmul_matches_reference") else { return };
    let timed = BlasConfig { workspace_bytes: WORKSPACE, tune_candidates: 8, ..BlasConfig::from_env() };
    let prepared = device.create_blas(&timed).expect("the library loaded for the first handle");
    let stream = device.create_stream().unwrap();
    let workspace = device.alloc(WORKSPACE).unwrap();
    for (seed, (case, desc)) in cases().into_iter().enumerate() {
        prepared.prepare(&desc).expect(&case);
        for (handle, how) in [(&blas, "on first use"), (&prepared, "prepared")] {
            let ops = Operands::<B>::new(device, &stream, &desc, seed as u32 * 7);
            // SAFETY: every buffer lives until the stream is synchronised below.
            unsafe { handle.matmul(&stream, &desc, &ops.operands(&desc, workspace.as_slice())) }.expect(&case);
            stream.synchronize().unwrap();
            compare(B::KIND.name(), &format!("{case}, {how}"), &desc, &ops.result(&stream), &ops.expected(&desc));
        }
    }
}

/// A matmul prepared before a capture is captured without allocating, and each replay computes on
/// what the captured buffers hold at that time; in `f32` and in `bf16`.
pub fn blas_matmul_captures_and_replays<B: Backend>(device: &B::Device) {
    let Some(blas) = blas_or_skip::<B>(device, "blas_matmul_captures_and_replays") else { return };
    let stream = device.create_stream().unwrap();
    let workspace = device.alloc(WORKSPACE).unwrap();
    let f32_desc =
        MatmulDesc { bias: true, epilogue: Epilogue::Relu, batch: 2, stride_b: 0, ..MatmulDesc::gemm(24, 40, 32) };
    for desc in [f32_desc, f32_desc.with_types(MatmulType::BF16, MatmulType::BF16)] {
        blas.prepare(&desc).unwrap();
        let mut ops = Operands::<B>::new(device, &stream, &desc, 11);
        stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        // SAFETY: every buffer lives until after the last replay is synchronised.
        unsafe { blas.matmul(&stream, &desc, &ops.operands(&desc, workspace.as_slice())) }.unwrap();
        let graph = stream.end_capture().expect("a prepared matmul captures cleanly");
        assert!(graph.node_count() >= 1, "the capture holds the matmul");
        let exec = device.instantiate(&graph).unwrap();
        for replay in 0..2u32 {
            ops.fill(std::array::from_fn(|i| values(ops.host[i].len(), 100 + replay * 10 + i as u32)));
            ops.upload(&stream);
            // SAFETY: the captured buffers are live.
            unsafe { stream.launch_graph(&exec) }.unwrap();
            stream.synchronize().unwrap();
            let case = format!("{} graph replay {replay}", desc.output.name());
            compare(B::KIND.name(), &case, &desc, &ops.result(&stream), &ops.expected(&desc));
        }
    }
}

/// Bad requests are refused before anything is enqueued, with the same error on every backend.
pub fn blas_bad_requests_are_refused<B: Backend>(device: &B::Device) {
    let Some(blas) = blas_or_skip::<B>(device, "blas_bad_requests_are_refused") else { return };
    let stream = device.create_stream().unwrap();
    let workspace = device.alloc(WORKSPACE).unwrap();
    let desc = MatmulDesc::gemm(8, 8, 8);
    let ops = Operands::<B>::new(device, &stream, &desc, 3);
    let good = ops.operands(&desc, workspace.as_slice());
    // Buffers sized for f16 elements, described as f32.
    let half = desc.with_types(MatmulType::F16, MatmulType::F16);
    let half_ops = Operands::<B>::new(device, &stream, &half, 4);
    let half_good = half_ops.operands(&half, workspace.as_slice());
    // SAFETY: the buffers are live until the stream is synchronised below.
    unsafe { blas.matmul(&stream, &half, &half_good) }.expect("the f16 operands fit the f16 description");
    let f32_on_f16 = MatmulOperands { c: ops.bufs[2].as_slice(), ..half_good };
    let bad = [
        ("short A", desc, MatmulOperands { a: ops.bufs[0].slice(0, 4).unwrap(), ..good }),
        ("f16-sized A and B described as f32", desc, f32_on_f16),
        ("f32 inputs with f16 output", desc.with_types(MatmulType::F32, MatmulType::F16), good),
        ("bf16 inputs with f16 output", desc.with_types(MatmulType::BF16, MatmulType::F16), half_good),
        ("missing bias", MatmulDesc { bias: true, ..desc }, good),
        ("short workspace", desc, MatmulOperands { workspace: workspace.slice(0, 16).unwrap(), ..good }),
        ("zero k", MatmulDesc { k: 0, ..desc }, good),
        ("C batches overlap", MatmulDesc { batch: 2, stride_a: 0, stride_b: 0, stride_c: 1, ..desc }, good),
    ];
    for (case, desc, operands) in bad {
        // SAFETY: the buffers are live; the call must be refused before enqueuing anything.
        let err = unsafe { blas.matmul(&stream, &desc, &operands) }.expect_err(case);
        assert!(matches!(err, Error::InvalidMatmul { .. }), "{case}: {err:?}");
    }
    assert!(matches!(blas.prepare(&MatmulDesc { m: 0, ..desc }), Err(Error::InvalidMatmul { .. })));
    let gelu = MatmulDesc { epilogue: Epilogue::GeluTanh, ..desc.with_types(MatmulType::BF16, MatmulType::BF16) };
    assert!(matches!(blas.prepare(&gelu), Err(Error::InvalidMatmul { .. })), "GELU into bf16 is refused");
    let mixed = blas.prepare(&desc.with_types(MatmulType::F32, MatmulType::BF16)).expect_err("f32 -> bf16");
    assert!(mixed.to_string().contains("f32 -> f32, f16 -> f32, f16 -> f16"), "names the pairs: {mixed}");
    stream.synchronize().expect("only the valid f16 matmul was enqueued, and it ran");
    eprintln!("PASS blas {} bad requests refused", B::KIND.name());
}

/// `len` values covering all of `i8` (-128 and 127 included): [`values`] scaled to the range.
fn i8_values(len: usize, seed: u32) -> Vec<i8> {
    values(len, seed).iter().map(|v| (v * 128.0).clamp(-128.0, 127.0) as i8).collect()
}

/// The `i8` reference: `desc` (`A` stored `[m, k]`, `B` stored `[n, k]`, `alpha` 1) on host vectors,
/// accumulated in `i32` with wrapping arithmetic, adding `C` when `beta` is 1.
pub fn reference_i8(desc: &MatmulDesc, a: &[i8], b: &[i8], c: &[i32]) -> Vec<i32> {
    let (m, n, k) = (desc.m as usize, desc.n as usize, desc.k as usize);
    let mut out = c.to_vec();
    for batch in 0..desc.batch as usize {
        let (a0, b0, c0) =
            (batch * desc.stride_a as usize, batch * desc.stride_b as usize, batch * desc.stride_c as usize);
        for i in 0..m {
            for j in 0..n {
                let dot = (0..k)
                    .fold(0i32, |acc, p| acc.wrapping_add(i32::from(a[a0 + i * k + p]) * i32::from(b[b0 + j * k + p])));
                let prior = if desc.beta() == 1.0 { c[c0 + i * n + j] } else { 0 };
                out[c0 + i * n + j] = dot.wrapping_add(prior);
            }
        }
    }
    out
}

/// The `i8` cases every backend runs, each exact: plain, odd `m`, broadcast and strided batches,
/// `beta` 1 accumulating into `C`, and one in the range whose candidates a GPU handle times.
pub fn i8_cases() -> Vec<(&'static str, MatmulDesc)> {
    let base = MatmulDesc::gemm_i8(33, 16, 64);
    vec![
        ("i8->i32 plain 33x16x64", base),
        ("i8->i32 m 1", MatmulDesc::gemm_i8(1, 8, 12)),
        ("i8->i32 batch 3, B broadcast", MatmulDesc { batch: 3, stride_b: 0, ..base }),
        ("i8->i32 batch 4, strided C", MatmulDesc { batch: 4, stride_c: 8 * 12 + 5, ..MatmulDesc::gemm_i8(8, 12, 16) }),
        ("i8->i32 beta 1", base.with_scales(1.0, 1.0)),
        ("i8->i32 timed candidates 128x256x768", MatmulDesc::gemm_i8(128, 256, 768)),
    ]
}

/// Every `i8` case is bit-exact against [`reference_i8`], eagerly (on a handle timing 8 candidates,
/// prepared first) and replayed from a capture; the forms the integer kernels do not take are
/// refused at `prepare` on every backend alike.
pub fn blas_i8_matmul_is_exact<B: Backend>(device: &B::Device) {
    let timed = BlasConfig { workspace_bytes: WORKSPACE, tune_candidates: 8, ..BlasConfig::from_env() };
    let blas = match device.create_blas(&timed) {
        Ok(blas) => blas,
        Err(e @ Error::LibraryUnavailable { .. }) => return eprintln!("SKIPPED {}::blas_i8: {e}", B::KIND),
        Err(e) => panic!("create_blas: {e}"),
    };
    let stream = device.create_stream().unwrap();
    let workspace = device.alloc(WORKSPACE).unwrap();
    for (seed, (case, desc)) in i8_cases().into_iter().enumerate() {
        blas.prepare(&desc).expect(case);
        let span = |stride: u64, elements: u64| ((desc.batch - 1) * stride + elements) as usize;
        let a = i8_values(span(desc.stride_a, desc.m * desc.k), seed as u32 * 3 + 1);
        let b = i8_values(span(desc.stride_b, desc.n * desc.k), seed as u32 * 3 + 2);
        let c: Vec<i32> =
            i8_values(span(desc.stride_c, desc.m * desc.n), 9).iter().map(|&v| i32::from(v) * 1000).collect();
        let bytes = |v: &[i8]| v.iter().map(|&x| x as u8).collect::<Vec<u8>>();
        let c_bytes: Vec<u8> = c.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bufs = [bytes(&a), bytes(&b), c_bytes.clone()].map(|data| {
            let buf = device.alloc(data.len()).expect("alloc");
            stream.upload(&data, buf.as_slice()).expect("upload");
            buf
        });
        let operands = MatmulOperands {
            a: bufs[0].as_slice(),
            b: bufs[1].as_slice(),
            c: bufs[2].as_slice(),
            bias: None,
            workspace: workspace.as_slice(),
        };
        let want = reference_i8(&desc, &a, &b, &c);
        let read = |how: &str| {
            let mut out = vec![0u8; c_bytes.len()];
            stream.download(bufs[2].as_slice(), &mut out).expect("download C");
            let got: Vec<i32> = out.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            let verdict = if wrong == 0 { "PASS" } else { "FAIL" };
            eprintln!("{verdict} blas {} {case}, {how}: {wrong} of {} elements differ", B::KIND.name(), want.len());
            assert_eq!(wrong, 0, "{} {case}, {how}: not exact", B::KIND.name());
        };
        // SAFETY: every buffer lives until the stream is synchronised below.
        unsafe { blas.matmul(&stream, &desc, &operands) }.expect(case);
        stream.synchronize().unwrap();
        read("eager");
        stream.upload(&c_bytes, bufs[2].as_slice()).unwrap();
        stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        // SAFETY: every buffer lives until after the replay is synchronised.
        unsafe { blas.matmul(&stream, &desc, &operands) }.expect(case);
        let exec = device.instantiate(&stream.end_capture().expect("a prepared i8 matmul captures")).unwrap();
        // SAFETY: the captured buffers are live.
        unsafe { stream.launch_graph(&exec) }.unwrap();
        stream.synchronize().unwrap();
        read("graph replay");
    }
    let base = MatmulDesc::gemm_i8(16, 16, 16);
    let refused = [
        MatmulDesc { trans_a: true, ..base },
        MatmulDesc { trans_b: false, ..base },
        MatmulDesc { k: 18, ..base },
        MatmulDesc { bias: true, ..base },
        base.with_scales(0.5, 0.0),
        base.with_types(MatmulType::I8, MatmulType::F32),
    ];
    for desc in refused {
        let err = blas.prepare(&desc).expect_err("the integer kernels do not take this form");
        assert!(matches!(err, Error::InvalidMatmul { .. }), "{desc:?}: {err:?}");
    }
    eprintln!("PASS blas {} i8 refusals", B::KIND.name());
}
