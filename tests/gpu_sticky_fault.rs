//! A real sticky fault on CUDA (GPU bundle, two GPUs or more): a kernel on GPU 1 writes through a wild
//! pointer. CUDA documents an illegal address as leaving the process's CUDA state unusable, and on an
//! H100 host GPU 0's calls fail too: the test holds the runtime to typed errors then, with no panic,
//! hang or wrong answer. Every request is answered correctly or fails with a lost-device error, GPU 1
//! is taken out of the group, and once both are lost requests fail with `NoDeviceLeft`. In its own
//! binary, because nothing in the process can use CUDA after it.
#![cfg(feature = "cuda")]

mod common;

use saggar_device::conformance::{builtin_module, open_two_or_skip};
use saggar_device::cuda::CudaBackend;
use saggar_device::{Device, DevicePtr, KernelArg, LaunchConfig, Module, Stream, builtin};

/// Writes 4 MiB at an address no allocation holds; the synchronize reports the fault.
fn wild_write(device: &<CudaBackend as saggar_device::Backend>::Device) {
    let _pin = device.pin().unwrap();
    let module = builtin_module::<CudaBackend>(device);
    let fill = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let words = 1u64 << 20;
    // SAFETY: deliberately broken, to make the GPU fault; nothing uses CUDA in this process afterwards
    // except to see it fail.
    let launched = unsafe {
        stream.launch(
            &fill,
            &LaunchConfig::for_elements(words, 256),
            &[KernelArg::Ptr(DevicePtr(0x0000_7fff_0000_0000)), KernelArg::U64(words), KernelArg::U32(7)],
        )
    };
    let fault = launched.and_then(|()| stream.synchronize()).expect_err("the wild write faults");
    assert!(fault.is_device_lost(), "a sticky fault, not {fault}");
}

#[test]
fn a_wild_write_on_one_gpu_leaves_typed_errors_only() {
    let Some((d0, d1)) = open_two_or_skip::<CudaBackend>("a_wild_write_on_one_gpu_leaves_typed_errors_only") else {
        return;
    };
    let run = common::group_with_a_lost_device::<CudaBackend>(d0, d1, wild_write);
    assert!(run.taken_out[1], "GPU 1 is taken out: {run:?}");
    if run.taken_out[0] {
        assert!(run.lost.last().unwrap().contains("all 2 devices"), "then NoDeviceLeft: {run:?}");
    }
}
