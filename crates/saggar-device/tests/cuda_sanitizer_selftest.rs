//! Proves the GPU bundle's compute-sanitizer pass can fail: with `SAGGAR_SANITIZER_SELFTEST=1` this
//! test launches a kernel that writes far past the end of its allocation. Run normally the write
//! lands in unused memory and the test passes; run under `compute-sanitizer --tool memcheck` the
//! sanitizer reports an invalid global write and the run fails. Without the variable the test is
//! skipped with that reason (it must never run in an ordinary test pass).
#![cfg(feature = "cuda")]

use saggar_device::conformance::{builtin_module, open_or_skip};
use saggar_device::cuda::CudaBackend;
use saggar_device::{Device, DeviceBuffer, KernelArg, LaunchConfig, Module, Stream, builtin};

#[test]
fn out_of_bounds_write_for_the_sanitizer_to_catch() {
    if std::env::var_os("SAGGAR_SANITIZER_SELFTEST").is_none() {
        eprintln!(
            "SKIPPED cuda::out_of_bounds_write_for_the_sanitizer_to_catch: enabled only by SAGGAR_SANITIZER_SELFTEST=1"
        );
        return;
    }
    let Some(device) = open_or_skip::<CudaBackend>("out_of_bounds_write_for_the_sanitizer_to_catch") else { return };
    let module = builtin_module::<CudaBackend>(&device);
    let fill = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let small = device.alloc(256).unwrap();
    let words = 4096u64;
    // SAFETY: deliberately broken: the kernel writes 16 KiB into a 256-byte allocation, so the
    // sanitizer has something to find. Nothing else lives in this process's device memory.
    unsafe {
        stream
            .launch(
                &fill,
                &LaunchConfig::for_elements(words, 256),
                &[KernelArg::Ptr(small.ptr()), KernelArg::U64(words), KernelArg::U32(7)],
            )
            .unwrap();
    }
    let _ = stream.synchronize();
}
