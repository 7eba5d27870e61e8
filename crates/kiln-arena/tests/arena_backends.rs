//! The backend-generic arena checks on the host backend (CI).

mod common;

arena_backend_tests!(kiln_device::host::HostBackend);
