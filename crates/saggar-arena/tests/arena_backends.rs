//! The backend-generic arena checks on the host backend (CI).

mod common;

arena_backend_tests!(saggar_device::host::HostBackend);
