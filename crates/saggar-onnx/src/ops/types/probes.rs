//! The probe nodes of the ops whose default probe (each required input `[2, 2, 2]` of ones, no
//! attributes) does not build: `attributes | inputs`, read by `probe.rs`.
//!
//! Attributes: `k=5`, `k=0.5`, `k=[1,2]`, `k='text'`, `k=@T` (the ONNX code of the type constraint
//! `T` takes in this probe), `k=%T` (a one-element tensor of that type), and `outputs=N` (the node's
//! output count). Inputs, one token per formal in order (the rest default; tokens past the last
//! formal repeat a variadic one): `_` absent, `.` the default, `2x3` dims of ones, `2x3=v,..` dims
//! with values, `=v,..` a vector, `s=v` a scalar.

/// Probe lines by op type.
pub(super) const PROBES: &[(&str, &str)] = &[
    ("AffineGrid", "| 1x2x3 =1,1,2,2"),
    ("Attention", "| 1x1x2x2 1x1x2x2 1x1x2x2 2x2"),
    ("AveragePool", "kernel_shape=[1] |"),
    ("BatchNormalization", "| . =1,1 =1,1 =1,1 =1,1"),
    ("BitShift", "direction='LEFT' |"),
    ("BlackmanWindow", "output_datatype=@T2 | s=4"),
    ("Cast", "to=@T2 |"),
    ("CenterCropPad", "| . =2,2,2"),
    ("Col2Im", "| 1x1x4 =2,2 =1,1"),
    ("Compress", "| . =1,0"),
    ("Concat", "axis=0 | . ."),
    ("Constant", "value=%T |"),
    ("ConstantOfShape", "value=%T2 | =2,2"),
    ("CumSum", "| . s=0"),
    ("DFT", "| 1x2x1 s=2"),
    ("DeformConv", "| 1x1x2x2 1x1x1x1 1x2x2x2"),
    ("DepthToSpace", "blocksize=2 | 1x4x1x1"),
    ("DequantizeLinear", "output_dtype=@T3 | . s s=0"),
    ("Det", "| 2x2"),
    ("Dropout", "| . s=0.5 s=0"),
    ("Einsum", "equation='ij,jk->ik' | 2x2 2x2"),
    ("Expand", "| . =2,2,2"),
    ("EyeLike", "dtype=@T2 | 2x2"),
    ("GRU", "hidden_size=1 | 1x1x1 1x3x1 1x3x1 _ =1"),
    ("Gemm", "| 2x2 2x2"),
    ("GridSample", "| 1x1x2x2 1x1x1x2"),
    ("GroupNormalization", "num_groups=1 | . =1,1 =1,1"),
    ("HammingWindow", "output_datatype=@T2 | s=4"),
    ("HannWindow", "output_datatype=@T2 | s=4"),
    ("InstanceNormalization", "| . =1,1 =1,1"),
    ("LRN", "size=1 |"),
    ("LSTM", "hidden_size=1 | 1x1x1 1x4x1 1x4x1 _ =1"),
    ("LayerNormalization", "| . =1,1 =1,1"),
    ("LpPool", "kernel_shape=[1] |"),
    ("MaxPool", "kernel_shape=[1] |"),
    ("MaxRoiPool", "pooled_shape=[1,1] | 1x1x2x2 1x5=0,0,0,1,1"),
    ("MaxUnpool", "kernel_shape=[1] | . ."),
    ("MeanVarianceNormalization", "| 1x1x2x2"),
    ("MelWeightMatrix", "output_datatype=@T3 | s=2 s=8 s=8000 s=0 s=4000"),
    ("Mod", "fmod=1 |"),
    ("NegativeLogLikelihoodLoss", "| 2x2 =1,1"),
    ("NonMaxSuppression", "| 1x1x4=0,0,1,1 1x1x1"),
    ("OneHot", "| . s=2 =0,1"),
    ("Pad", "| . =0,0 _ =0"),
    ("QLinearConv", "| . s s=0 . s s=0 s s=0 =1,1"),
    ("QLinearMatMul", "| . s s=0 . s s=0 s s=0"),
    ("QuantizeLinear", "| . s s=0"),
    ("RMSNormalization", "| . =1,1"),
    ("RNN", "hidden_size=1 | 1x1x1 1x1x1 1x1x1 _ =1"),
    ("Range", "| s=0 s=2 s=1"),
    ("Reshape", "| . =2,4"),
    ("Resize", "| . =0,0,0,1,1,1 =1,1,1"),
    ("ReverseSequence", "| . =1,1"),
    ("RoiAlign", "| 1x1x2x2 1x4=0,0,1,1 =0"),
    ("RotaryEmbedding", "| 1x1x2x2 2x1 2x1 1x2=0,1"),
    ("STFT", "| 1x4x1 s=2 _ s=2"),
    ("Slice", "| . =0 =1"),
    ("SoftmaxCrossEntropyLoss", "| 2x2 =1,1"),
    ("SpaceToDepth", "blocksize=2 | 1x1x2x2"),
    ("Split", "num_outputs=2 outputs=2 |"),
    ("TensorScatter", "| 1x1x2x2 1x1x1x2 =0"),
    ("Tile", "| . =1,1,1"),
    ("TopK", "| . =1"),
    ("Unsqueeze", "| . =0"),
    ("Upsample", "| . =1,1,1"),
];

/// Ops whose claims no probe node checks, with the reason.
pub(super) const UNPROBED: &[(&str, &str)] = &[
    ("If", "values pass through the branches, which are inlined when a program is compiled"),
    ("Loop", "values pass through the body, which is inlined when a program is compiled"),
    ("Scan", "values pass through the body, which is inlined when a program is compiled"),
];
