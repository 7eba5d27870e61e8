//! The conformance suite on the host backend (runs in CI).

saggar_device::conformance_tests!(saggar_device::host::HostBackend);
