//! The per-run shape check of a 190-input model whose only symbolic dimension is the batch
//! (the target is under 100 ns), with the standard path and the keys beside it for scale.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use saggar_shape::{DType, Dim, Shape, Signature, StableShapeKey, TensorShape, TensorSpec};

const INPUTS: usize = 190;
const BATCH: u64 = 24;

/// A recommendation-style model: 190 inputs of ranks 1 to 4, every tenth one an unbatched table.
fn model() -> (Signature, Vec<Shape>) {
    let mut specs = Vec::new();
    let mut shapes = Vec::new();
    for index in 0..INPUTS {
        let fixed: &[u64] = match index % 4 {
            0 => &[],
            1 => &[64],
            2 => &[8, 16],
            _ => &[3, 32, 32],
        };
        let name = format!("input_{index:03}");
        let dtype = if index % 3 == 0 { DType::I64 } else { DType::F32 };
        if index % 10 == 9 {
            specs.push(TensorSpec::new(name, dtype, [Dim::fixed(1000), Dim::fixed(64)]));
            shapes.push(Shape::from([1000, 64]));
        } else {
            specs.push(TensorSpec::new(
                name,
                dtype,
                std::iter::once(Dim::symbolic("batch")).chain(fixed.iter().map(|&d| Dim::fixed(d))),
            ));
            shapes.push(std::iter::once(BATCH).chain(fixed.iter().copied()).collect());
        }
    }
    (Signature::new(specs, Vec::new()).expect("valid model"), shapes)
}

fn shape_check(c: &mut Criterion) {
    let (signature, shapes) = model();
    assert!(signature.batch_layout().batch_is_only_dynamic_dim());
    assert_eq!(signature.check(&shapes).unwrap().batch(), Some(BATCH));
    let slices: Vec<&[u64]> = shapes.iter().map(|shape| shape.dims()).collect();
    let dtypes: Vec<DType> = signature.inputs().iter().map(TensorSpec::dtype).collect();
    let named: Vec<TensorShape<'_>> = signature
        .inputs()
        .iter()
        .zip(&shapes)
        .map(|(spec, shape)| TensorShape::new(spec.name(), spec.dtype(), shape))
        .collect();

    let mut request = signature.request_shapes();
    request.set_batch(&signature, BATCH).unwrap();
    assert_eq!(signature.check_request(&request).unwrap().batch(), Some(BATCH));

    let mut group = c.benchmark_group("shape_check_190_inputs");
    group.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_secs(1)).sample_size(30);
    group.bench_function("check_request (per-run check)", |b| {
        b.iter(|| signature.check_request(black_box(&request)).map(|bindings| bindings.batch()))
    });
    group.bench_function("set_batch + check_request", |b| {
        b.iter(|| {
            request.set_batch(&signature, black_box(BATCH))?;
            signature.check_request(&request).map(|bindings| bindings.batch())
        })
    });
    group.bench_function("set all 190 inputs + check_request", |b| {
        b.iter(|| {
            for (index, shape) in black_box(&shapes).iter().enumerate() {
                request.set(&signature, index, shape)?;
            }
            signature.check_request(&request).map(|bindings| bindings.batch())
        })
    });
    group.bench_function("check (inline Shape)", |b| {
        b.iter(|| signature.check(black_box(&shapes)).map(|bindings| bindings.batch()))
    });
    group.bench_function("check (&[u64] slices)", |b| {
        b.iter(|| signature.check(black_box(&slices)).map(|bindings| bindings.batch()))
    });
    group.bench_function("check_dtypes", |b| b.iter(|| signature.check_dtypes(black_box(&dtypes))));
    group.bench_function("bind by name (standard path)", |b| {
        b.iter(|| signature.bind(black_box(&named)).map(|bindings| bindings.batch()))
    });
    group.finish();

    let bindings = signature.check(&shapes).unwrap();
    let mut group = c.benchmark_group("shape_keys_190_inputs");
    group.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_secs(1)).sample_size(30);
    group.bench_function("Bindings hash (in-memory key)", |b| {
        b.iter(|| {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(black_box(&bindings))
        })
    });
    group.bench_function("Bindings::stable_key", |b| b.iter(|| black_box(&bindings).stable_key()));
    group.bench_function("StableShapeKey::of (sorts)", |b| b.iter(|| StableShapeKey::of(black_box(&named))));
    group.finish();
}

criterion_group!(benches, shape_check);
criterion_main!(benches);
