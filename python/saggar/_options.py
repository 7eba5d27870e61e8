"""``SessionOptions`` and ``RunOptions``: ONNX Runtime's option classes, with saggar's settings.

The session reads these by attribute, so an ``onnxruntime.SessionOptions`` works too (its saggar
settings are then the defaults).
"""

from enum import IntEnum


class GraphOptimizationLevel(IntEnum):
    """ONNX Runtime's optimization levels. saggar always folds constants and fuses; accepted and
    ignored."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(IntEnum):
    """ONNX Runtime's execution modes. Accepted and ignored."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(IntEnum):
    """ONNX Runtime's node orders. Accepted and ignored."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class SessionOptions:
    """How a session is made.

    ONNX Runtime's attributes that mean something to saggar:

    - ``intra_op_num_threads`` (0: every core): the threads session creation compiles and loads
      programs with;
    - ``log_severity_level`` (0 verbose to 4 fatal, 2 by default): saggar's warnings (a provider
      skipped or refusing the model) show at 2 and below.

    The other ONNX Runtime attributes (``inter_op_num_threads``, ``graph_optimization_level``,
    ``execution_mode``, ``execution_order``, ``enable_cpu_mem_arena``, ``enable_mem_pattern``,
    ``enable_mem_reuse``, ``enable_profiling``, ``profile_file_prefix``,
    ``optimized_model_filepath``, ``use_deterministic_compute``, ``log_verbosity_level``,
    ``logid``) and methods (``add_session_config_entry``, ``add_free_dimension_override_by_name``,
    ...) are accepted and ignored: saggar has no such knob, or always does the thing.

    saggar's own settings:

    - ``buckets``: ``"pow2"`` (default: 1, 2, 4, ... up to ``max_batch``), ``"stepped"`` (1, 2, 4,
      then multiples of 8) or a list of batch sizes. Every bucket is compiled when the session is
      made; larger batches are split.
    - ``max_batch``: the largest bucket of ``"pow2"`` and ``"stepped"`` (default 64, at most 65536).
    - ``pad_axes``: ``{symbol: [sizes]}``, one symbolic axis besides the batch (a sequence) served
      from buckets: requests are padded with 0 along it to the next size and every output is sliced
      back. Without it, a model with such an axis compiles once per distinct shape.
    - ``precision``: ``"fp32"`` (default, strict; ``"f32"`` also), ``"tf32"`` (tensor cores round
      GEMM inputs), ``"fp16"`` or ``"bf16"`` (weight products on half tensor cores, f32
      accumulation, every other op in f32), ``"int8"`` (a QDQ model's weight products on int8
      tensor cores; they are int8 at every setting, so this only refuses an f32 model, which needs
      calibration: ``saggar perf --calibration-inputs``).
    - ``graphs``: capture and replay device graphs (default ``True``).
    - ``capture``: ``"lazy"`` (default: on a bucket's first request) or ``"eager"`` (at creation).
    - ``cache_dir``: a compile cache directory shared by processes and sessions (default: none).
    - ``device_id``: the device ordinal (default 0; a provider's ``device_id`` option wins).
    - ``devices``: a list of device ordinals: one session per device, requests routed to the least
      loaded (needs ``cache_dir``; host tensors only; ignored by the CPU provider).
    - ``max_request_rows``, ``max_request_bytes``: the most one request may ask for (default 2^20
      rows and 16 GiB, inputs and outputs together); a larger request raises ``InvalidArgument``
      before anything is copied or allocated for it.
    """

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.use_deterministic_compute = False
        self.buckets = "pow2"
        self.max_batch = 64
        self.pad_axes = None
        self.precision = "fp32"
        self.graphs = True
        self.capture = "lazy"
        self.cache_dir = None
        self.device_id = 0
        self.devices = None
        self.max_request_rows = 1 << 20
        self.max_request_bytes = 16 << 30
        self._config_entries = {}

    def add_session_config_entry(self, key, value):
        """Kept, and ignored by saggar."""
        self._config_entries[key] = value

    def get_session_config_entry(self, key):
        return self._config_entries[key]

    def add_free_dimension_override_by_name(self, dim_name, dim_value):
        """Ignored: saggar serves every extent of a symbolic dimension."""

    def add_free_dimension_override_by_denotation(self, dim_denotation, dim_value):
        """Ignored, as ``add_free_dimension_override_by_name``."""

    def register_custom_ops_library(self, library_path):
        raise NotImplementedError("saggar runs the standard ONNX op set; custom op libraries are not loaded")

    def add_initializer(self, name, value):
        raise NotImplementedError("saggar takes initializers from the model file")


class RunOptions:
    """ONNX Runtime's per-run options. Accepted and ignored (a run cannot be cancelled)."""

    def __init__(self):
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_tag = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config_entries = {}

    def add_run_config_entry(self, key, value):
        self._config_entries[key] = value

    def get_run_config_entry(self, key):
        return self._config_entries[key]
