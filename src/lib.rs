//! kiln: a GPU inference execution runtime, as a family of reusable crates.
//!
//! This facade re-exports every kiln crate under one name, so an application can depend on `kiln` alone
//! while a library that needs one piece (say, only the compile cache) depends on that crate directly.
//!
//! | module | crate | job |
//! |---|---|---|
//! | [`device`] | `kiln-device` | devices, streams, events, memory, modules, stream capture, executable graphs |
//! | [`shape`] | `kiln-shape` | tensor specs, shape hashing, batch buckets, pad and slice plans |
//! | [`cache`] | `kiln-cache` | compile once, load everywhere: locked, atomic, checked on-disk cache |
//! | [`arena`] | `kiln-arena` | pinned staging and one-copy inputs, leased per request |
//! | [`dispatch`] | `kiln-dispatch` | sessions, run paths, graph capture and replay, pointer drift, groups |
//! | [`models`] | `kiln-models` | the reference compiler and model family (recsys, MLP) |
//!
//! See `docs/ARCHITECTURE.md` for the bird's-eye view.

pub use kiln_arena as arena;
pub use kiln_cache as cache;
pub use kiln_device as device;
pub use kiln_dispatch as dispatch;
pub use kiln_models as models;
pub use kiln_shape as shape;
