//! Bad input is a typed error on every backend: sizes, ranges, launches and device indices; and a
//! clean workload's destructors record no error.

use super::{builtin_module, download, fill};
use crate::api::{Backend, Device, DeviceBuffer, Module, Stream};
use crate::builtin;
use crate::error::Error;
use crate::types::{CaptureMode, KernelArg, LaunchConfig};

/// Zero-length and overflowing allocations, ranges past a buffer's end and mismatched copies.
pub fn bad_sizes_and_ranges<B: Backend>(device: &B::Device) {
    assert!(matches!(device.alloc(0).unwrap_err(), Error::InvalidSize { .. }));
    assert!(matches!(device.alloc_pinned(0).unwrap_err(), Error::InvalidSize { .. }));
    let err = device.alloc(usize::MAX).unwrap_err();
    assert!(matches!(err, Error::InvalidSize { .. } | Error::OutOfMemory { .. }), "usize::MAX allocation gave {err:?}");
    let too_big = device.info().total_memory.saturating_mul(2).min(usize::MAX as u64) as usize;
    let err = device.alloc(too_big).unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory { .. } | Error::InvalidSize { .. }),
        "allocation past the device gave {err:?}"
    );

    let stream = device.create_stream().unwrap();
    let a = device.alloc(100).unwrap();
    let b = device.alloc(50).unwrap();
    assert!(matches!(a.slice(90, 11).unwrap_err(), Error::OutOfBounds { .. }));
    assert!(matches!(a.slice(usize::MAX, 2).unwrap_err(), Error::OutOfBounds { .. }));
    assert!(matches!(stream.copy_d2d(a.as_slice(), b.as_slice()).unwrap_err(), Error::LengthMismatch { .. }));
    assert!(matches!(stream.upload(&[0; 10], b.as_slice()).unwrap_err(), Error::LengthMismatch { .. }));
    let pinned = device.alloc_pinned(64).unwrap();
    // SAFETY: the copy must be refused before anything is enqueued.
    let err = unsafe { stream.copy_h2d_async(&pinned, 32, b.slice(0, 40).unwrap()) }.unwrap_err();
    assert!(matches!(err, Error::OutOfBounds { .. }), "a pinned range past the end gave {err:?}");
    // SAFETY: as above.
    let err = unsafe { stream.copy_d2h_async(a.as_slice(), &pinned, 0) }.unwrap_err();
    assert!(matches!(err, Error::OutOfBounds { .. }), "a pinned destination too small gave {err:?}");
    stream.synchronize().unwrap();
}

/// Launches with the wrong number or kind of arguments, a bad configuration, or a missing kernel.
pub fn bad_launches<B: Backend>(device: &B::Device) {
    let module = builtin_module::<B>(device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    assert!(matches!(module.kernel("no_such_kernel").unwrap_err(), Error::NoSuchKernel { .. }));
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(1024).unwrap();
    let config = LaunchConfig::for_elements(256, 256);
    // SAFETY: every launch below must be refused before anything is enqueued.
    unsafe {
        let err = stream.launch(&fill_k, &config, &[KernelArg::Ptr(buf.ptr())]).unwrap_err();
        assert!(matches!(err, Error::ArgumentCount { expected: 3, got: 1, .. }), "{err:?}");
        let err =
            stream.launch(&fill_k, &config, &[KernelArg::U32(0), KernelArg::U64(256), KernelArg::U32(1)]).unwrap_err();
        assert!(matches!(err, Error::ArgumentKind { index: 0, .. }), "{err:?}");
        let mut bad = config;
        bad.block.x = 4096;
        let args = [KernelArg::Ptr(buf.ptr()), KernelArg::U64(256), KernelArg::U32(1)];
        let err = stream.launch(&fill_k, &bad, &args).unwrap_err();
        assert!(matches!(err, Error::InvalidLaunchConfig { .. }), "{err:?}");
        bad = config;
        bad.grid.x = 0;
        assert!(matches!(stream.launch(&fill_k, &bad, &args).unwrap_err(), Error::InvalidLaunchConfig { .. }));
        // The stream still serves a valid launch.
        stream.launch(&fill_k, &config, &args).unwrap();
    }
    stream.synchronize().unwrap();
    let word = download::<B>(&stream, buf.slice(0, 4).unwrap());
    assert_eq!(u32::from_le_bytes(word.try_into().unwrap()), 1);
}

/// A device index that does not exist is a typed error.
pub fn bad_device_index<B: Backend>(_device: &B::Device) {
    let count = B::enumerate().unwrap().len();
    let err = B::open(count).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { .. }), "opening device {count} gave {err:?}");
    assert!(matches!(B::open(usize::MAX).unwrap_err(), Error::NoSuchDevice { .. }));
}

/// After a normal workload is dropped, no destructor recorded an error.
pub fn no_deferred_errors_after_clean_drop<B: Backend>(device: &B::Device) {
    {
        let module = builtin_module::<B>(device);
        let fill_k = module.kernel(builtin::FILL_U32).unwrap();
        let stream = device.create_stream().unwrap();
        let buf = device.alloc(4096).unwrap();
        let _pinned = device.alloc_pinned(4096).unwrap();
        stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        // SAFETY: `buf` is live until after the synchronize.
        unsafe { fill::<B>(&stream, &fill_k, buf.as_slice(), 5) };
        let exec = device.instantiate(&stream.end_capture().unwrap()).unwrap();
        // SAFETY: as above.
        unsafe { stream.launch_graph(&exec) }.unwrap();
        stream.synchronize().unwrap();
    }
    device.synchronize().unwrap();
    let errors = device.take_deferred_errors();
    assert!(errors.is_empty(), "destructors recorded errors: {errors:?}");
}
