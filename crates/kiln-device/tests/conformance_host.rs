//! The conformance suite on the host backend (runs in CI).

kiln_device::conformance_tests!(kiln_device::host::HostBackend);
