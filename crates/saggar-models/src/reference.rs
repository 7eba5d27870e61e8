//! The eager CPU reference: deterministic inputs, a straightforward forward pass, and a comparison of
//! device outputs against it.
//!
//! The reference is written for clarity, not speed: plain loops, f32 embedding sums in index order
//! (as every saggar kernel sums them), and f64 accumulation in the GEMMs. Tests and `saggar perf --verify`
//! compare saggar's outputs with it using [`compare_outputs`].

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::prng::SplitMix64;
use crate::weights::Weights;

/// Inputs for `batch` rows in binding order, as little-endian bytes: dense inputs uniform in `[-1, 1)`
/// (f32), sparse indices uniform in `[0, table_rows)` (i32). Each input draws from its own SplitMix64
/// stream seeded with `seed ^ fnv1a64(name)`, row by row, so the first `b` rows are the same for every
/// batch of at least `b` rows.
pub fn generate_inputs(config: &ModelConfig, batch: usize, seed: u64) -> Vec<Vec<u8>> {
    let rows = match config {
        ModelConfig::Recsys(c) => c.table_rows as u32,
        ModelConfig::Mlp(_) => 0,
    };
    config
        .input_specs()
        .iter()
        .map(|spec| {
            let width = spec.dims()[1].as_fixed().unwrap_or(0) as usize;
            let mut rng = SplitMix64::for_name(seed, spec.name());
            let mut out = Vec::with_capacity(batch * width * 4);
            for _ in 0..batch * width {
                if spec.dtype() == saggar_shape::DType::I32 {
                    out.extend_from_slice(&(rng.next_below(rows) as i32).to_le_bytes());
                } else {
                    out.extend_from_slice(&rng.next_signed_unit().to_le_bytes());
                }
            }
            out
        })
        .collect()
}

/// Runs the model eagerly on the CPU for `batch` rows. `inputs` are in binding order, little-endian,
/// each holding at least `batch` rows (only the first `batch` are read). Returns the outputs in binding
/// order, `batch` rows each. A sparse index outside `[0, table_rows)` contributes nothing to its bag,
/// as in every saggar kernel.
pub fn reference_forward<I: AsRef<[u8]>>(
    config: &ModelConfig,
    weights: &Weights,
    inputs: &[I],
    batch: usize,
) -> Result<Vec<Vec<f32>>, ModelError> {
    config.validate()?;
    weights.check(config)?;
    let specs = config.input_specs();
    if inputs.len() != specs.len() {
        return Err(ModelError::InputData {
            reason: format!("model `{}` has {} inputs, {} given", config.name(), specs.len(), inputs.len()),
        });
    }
    if batch == 0 {
        return Err(ModelError::InputData { reason: "batch of zero rows".into() });
    }
    for ((spec, input), row) in specs.iter().zip(inputs).zip(config.input_row_bytes()) {
        let needed = row * batch;
        if input.as_ref().len() < needed {
            return Err(ModelError::InputData {
                reason: format!(
                    "input `{}` holds {} bytes, {batch} rows need {needed}",
                    spec.name(),
                    input.as_ref().len()
                ),
            });
        }
    }

    let mut activations = match config {
        ModelConfig::Recsys(c) => {
            let width = c.feature_width();
            let mut features = vec![0.0f32; batch * width];
            for (i, input) in inputs[..c.dense_inputs].iter().enumerate() {
                let values = le_f32s(input.as_ref());
                for b in 0..batch {
                    let dst = b * width + i * c.dense_width;
                    features[dst..dst + c.dense_width]
                        .copy_from_slice(&values[b * c.dense_width..(b + 1) * c.dense_width]);
                }
            }
            for j in 0..c.sparse_inputs {
                let indices = le_i32s(inputs[c.dense_inputs + j].as_ref());
                let table = weights.embedding(j);
                for b in 0..batch {
                    let dst = b * width + c.dense_inputs * c.dense_width + j * c.embedding_dim;
                    for t in 0..c.bag_size {
                        let index = indices[b * c.bag_size + t];
                        if index < 0 || index as usize >= c.table_rows {
                            continue;
                        }
                        let row = &table[index as usize * c.embedding_dim..(index as usize + 1) * c.embedding_dim];
                        for (f, v) in features[dst..dst + c.embedding_dim].iter_mut().zip(row) {
                            *f += v;
                        }
                    }
                }
            }
            features
        }
        ModelConfig::Mlp(c) => le_f32s(&inputs[0].as_ref()[..batch * c.input * 4]),
    };

    let layers = config.layers();
    let mut last_hidden = None;
    for (l, layer) in layers.iter().enumerate() {
        let (w, bias) = (weights.layer_weight(l), weights.layer_bias(l));
        let mut out = vec![0.0f32; batch * layer.outputs];
        for b in 0..batch {
            let x = &activations[b * layer.inputs..(b + 1) * layer.inputs];
            for o in 0..layer.outputs {
                let mut acc = f64::from(bias[o]);
                for (t, xv) in x.iter().enumerate() {
                    acc += f64::from(*xv) * f64::from(w[t * layer.outputs + o]);
                }
                let v = acc as f32;
                out[b * layer.outputs + o] = if layer.relu { relu(v) } else { v };
            }
        }
        if l + 2 == layers.len() {
            last_hidden = Some(out.clone());
        }
        activations = out;
    }
    let mut outputs = vec![activations];
    if let ModelConfig::Recsys(c) = config
        && c.two_outputs
    {
        outputs.push(last_hidden.expect("two_outputs is validated to have a hidden layer"));
    }
    Ok(outputs)
}

/// ReLU as every saggar kernel computes it: `x > 0 ? x : 0` (NaN becomes 0).
pub(crate) fn relu(x: f32) -> f32 {
    if x > 0.0 { x } else { 0.0 }
}

/// How device outputs compare with the reference.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct OutputComparison {
    /// Values compared.
    pub checked: usize,
    /// Values outside the tolerance (NaN counts as outside).
    pub mismatches: usize,
    /// The largest `|actual - expected|`.
    pub max_abs_error: f64,
    /// The largest `|actual - expected| / max(1, |expected|)`.
    pub max_rel_error: f64,
}

impl OutputComparison {
    /// Whether every value was within the tolerance.
    pub fn all_match(&self) -> bool {
        self.mismatches == 0
    }
}

/// Compares `actual` (little-endian f32 bytes per output, at least as many values as `expected`; any
/// padding rows beyond are ignored) with `expected`. A value matches when
/// `|actual - expected| <= tolerance * max(1, |expected|)`. A different number of outputs, or an
/// output with too few bytes, is an error.
pub fn compare_outputs<A: AsRef<[u8]>>(
    expected: &[Vec<f32>],
    actual: &[A],
    tolerance: f64,
) -> Result<OutputComparison, ModelError> {
    if expected.len() != actual.len() {
        return Err(ModelError::InputData {
            reason: format!("{} outputs expected, {} given", expected.len(), actual.len()),
        });
    }
    let mut cmp = OutputComparison::default();
    for (index, (want, got)) in expected.iter().zip(actual).enumerate() {
        let got = got.as_ref();
        if got.len() < want.len() * 4 {
            return Err(ModelError::InputData {
                reason: format!("output {index} holds {} bytes, {} needed", got.len(), want.len() * 4),
            });
        }
        for (w, g) in want.iter().zip(got.chunks_exact(4)) {
            let g = f32::from_le_bytes([g[0], g[1], g[2], g[3]]);
            let abs = (f64::from(g) - f64::from(*w)).abs();
            let rel = abs / f64::from(w.abs()).max(1.0);
            cmp.checked += 1;
            if rel.is_nan() || rel > tolerance {
                cmp.mismatches += 1;
            }
            if abs.is_nan() {
                cmp.max_abs_error = f64::INFINITY;
                cmp.max_rel_error = f64::INFINITY;
            } else {
                cmp.max_abs_error = cmp.max_abs_error.max(abs);
                cmp.max_rel_error = cmp.max_rel_error.max(rel);
            }
        }
    }
    Ok(cmp)
}

/// Decodes little-endian f32s.
pub fn le_f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn le_i32s(bytes: &[u8]) -> Vec<i32> {
    bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{MlpConfig, RecsysConfig};

    fn tiny_recsys() -> ModelConfig {
        ModelConfig::Recsys(RecsysConfig {
            name: "tiny".into(),
            dense_inputs: 1,
            dense_width: 2,
            sparse_inputs: 1,
            bag_size: 2,
            table_rows: 3,
            embedding_dim: 2,
            hidden: vec![],
            two_outputs: false,
            weights: Default::default(),
        })
    }

    #[test]
    fn hand_computed_recsys() {
        let config = tiny_recsys();
        let mut weights = Weights::generate(&config, 0).unwrap();
        // Replace the generated values with ones that are easy to follow.
        let emb: Vec<f32> = vec![1.0, 2.0, 10.0, 20.0, 100.0, 200.0];
        let w: Vec<f32> = vec![1.0, 1.0, 1.0, 0.5];
        let b: Vec<f32> = vec![0.25];
        weights = replace(weights, &[emb, w, b]);
        let dense: Vec<u8> = [3.0f32, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        // Index 7 is out of range and contributes nothing; -1 too.
        let sparse: Vec<u8> = [2i32, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = reference_forward(&config, &weights, &[dense.clone(), sparse], 1).unwrap();
        // features = [3, 4, 100, 200]; score = 3 + 4 + 100 + 0.5 * 200 + 0.25.
        assert_eq!(out, vec![vec![207.25]]);
        let sparse: Vec<u8> = [-1i32, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = reference_forward(&config, &weights, &[dense, sparse], 1).unwrap();
        assert_eq!(out, vec![vec![3.0 + 4.0 + 1.0 + 1.0 + 0.25]]);
    }

    fn replace(weights: Weights, values: &[Vec<f32>]) -> Weights {
        let mut w = weights;
        for (t, v) in w.tensors_mut().iter_mut().zip(values) {
            assert_eq!(t.data.len(), v.len());
            t.data.clone_from(v);
        }
        w
    }

    #[test]
    fn relu_applies_to_hidden_layers_only() {
        let config = ModelConfig::Mlp(MlpConfig {
            name: "m".into(),
            input: 1,
            hidden: vec![1],
            output: 1,
            weights: Default::default(),
        });
        let weights = replace(Weights::generate(&config, 0).unwrap(), &[vec![-1.0], vec![0.0], vec![1.0], vec![-3.0]]);
        let x: Vec<u8> = [2.0f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = reference_forward(&config, &weights, &[x], 2).unwrap();
        // Row 0: relu(-2) = 0 -> -3. Row 1: relu(2) = 2 -> -1.
        assert_eq!(out, vec![vec![-3.0, -1.0]]);
    }

    #[test]
    fn generated_inputs_are_prefix_stable_and_valid() {
        let config = tiny_recsys();
        let a = generate_inputs(&config, 3, 9);
        let b = generate_inputs(&config, 5, 9);
        assert_eq!(a.len(), 2);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(&y[..x.len()], &x[..]);
        }
        assert!(le_i32s(&b[1]).iter().all(|i| (0..3).contains(i)));
        assert_ne!(generate_inputs(&config, 3, 10), a);
    }

    #[test]
    fn short_inputs_are_errors() {
        let config = tiny_recsys();
        let weights = Weights::generate(&config, 0).unwrap();
        let inputs = generate_inputs(&config, 2, 0);
        assert!(matches!(reference_forward(&config, &weights, &inputs, 3), Err(ModelError::InputData { .. })));
        assert!(matches!(reference_forward(&config, &weights, &inputs[..1], 2), Err(ModelError::InputData { .. })));
        assert!(matches!(reference_forward(&config, &weights, &inputs, 0), Err(ModelError::InputData { .. })));
    }

    #[test]
    fn comparison_counts_mismatches() {
        let expected = vec![vec![1.0f32, 1000.0, 0.0]];
        let actual: Vec<u8> = [1.00005f32, 1000.05, f32::NAN].iter().flat_map(|v| v.to_le_bytes()).collect();
        let cmp = compare_outputs(&expected, &[actual], 1e-4).unwrap();
        assert_eq!(cmp.checked, 3);
        assert_eq!(cmp.mismatches, 1, "only the NaN is out of tolerance: {cmp:?}");
        assert!(compare_outputs(&expected, &[[0u8; 4]], 1e-4).is_err());
    }
}
