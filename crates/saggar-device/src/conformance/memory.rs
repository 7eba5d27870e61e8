//! Memory: copies between host, pinned host and device memory give back the bytes put in, and
//! kernels reach pinned memory through its device mapping.

use super::{builtin_module, download, pattern};
use crate::api::{Backend, Device, DeviceBuffer, Graph, Module, PinnedBuffer, Stream};
use crate::builtin;
use crate::types::{CaptureMode, DevicePtr};

/// Upload, download, device-to-device copy, memset and sub-slices give back the bytes put in.
pub fn alloc_copy_round_trip<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    for &len in &[1usize, 255, 256, 4096, 1 << 20] {
        let a = device.alloc(len).unwrap();
        let b = device.alloc(len).unwrap();
        assert_eq!(a.len(), len);
        let data = pattern(len, len as u32);
        stream.upload(&data, a.as_slice()).unwrap();
        assert_eq!(download::<B>(&stream, a.as_slice()), data, "upload/download of {len} bytes");
        stream.copy_d2d(a.as_slice(), b.as_slice()).unwrap();
        assert_eq!(download::<B>(&stream, b.as_slice()), data, "copy_d2d of {len} bytes");
        if len >= 4 {
            let mid = b.slice(1, len / 2).unwrap();
            stream.memset(mid, 0x5A).unwrap();
            let mut expected = data.clone();
            expected[1..1 + len / 2].fill(0x5A);
            assert_eq!(download::<B>(&stream, b.as_slice()), expected, "memset of a sub-slice");
            let tail = a.slice(len - 2, 2).unwrap();
            assert_eq!(download::<B>(&stream, tail), data[len - 2..], "download of a sub-slice");
        }
    }
    stream.synchronize().unwrap();
}

/// Asynchronous copies through pinned memory, with offsets on both sides.
pub fn pinned_async_round_trip<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    let len = 64 * 1024;
    let mut src = device.alloc_pinned(len).unwrap();
    let dst = device.alloc_pinned(len).unwrap();
    // Offsets aligned inside a pinned buffer (an arena's 256-byte slots) must be aligned in memory.
    for buffer in [&src, &dst, &device.alloc_pinned(100).unwrap()] {
        let address = buffer.as_slice().as_ptr() as usize;
        assert_eq!(address % 4096, 0, "pinned memory at {address:#x} does not start on a page boundary");
    }
    let data = pattern(len, 7);
    src.as_mut_slice().copy_from_slice(&data);
    let buf = device.alloc(len).unwrap();
    // SAFETY: `src`, `dst` and `buf` live until after the synchronize below, and the host does not touch
    // the pinned buffers until then.
    unsafe {
        stream.copy_h2d_async(&src, 0, buf.slice(0, len / 2).unwrap()).unwrap();
        stream.copy_h2d_async(&src, len / 2, buf.slice(len / 2, len / 2).unwrap()).unwrap();
        stream.copy_d2h_async(buf.slice(1000, 5000).unwrap(), &dst, 17).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(&dst.as_slice()[17..5017], &data[1000..6000]);
}

/// Pinned memory is mapped into its device: a kernel reads it and writes it at
/// [`crate::PinnedBuffer::device_ptr`], eagerly and from a captured graph, at 16-byte aligned offsets
/// (the four-word path) and odd ones (bytes), and a dropped buffer's mapping is gone.
pub fn kernels_reach_mapped_pinned_memory<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    let module = builtin_module::<B>(device);
    let copy = module.kernel(builtin::COPY_BYTES).unwrap();
    let len = 48 * 1024 + 13;
    let mut src = device.alloc_pinned(len).unwrap();
    let mut dst = device.alloc_pinned(len).unwrap();
    let (Some(src_ptr), Some(dst_ptr)) = (src.device_ptr(), dst.device_ptr()) else {
        panic!("pinned memory of {:?} is not mapped into the device", device.info().backend);
    };
    assert_eq!(src.device_slice().map(|s| (s.ptr(), s.len())), Some((src_ptr, len)));
    let on_device = device.alloc(len).unwrap();
    let at = |ptr: DevicePtr, offset: u64| DevicePtr(ptr.0 + offset);
    for (round, captured) in [false, true].into_iter().enumerate() {
        let data = pattern(len, 11 + round as u32);
        src.as_mut_slice().copy_from_slice(&data);
        dst.as_mut_slice().fill(0);
        let enqueue = || {
            // SAFETY: every range lies inside `src`, `dst` or `on_device`, which outlive the
            // synchronize below; the host does not touch the pinned buffers until then.
            unsafe {
                builtin::enqueue_copy_bytes::<B>(&stream, &copy, src_ptr, on_device.ptr(), len as u64).unwrap();
                builtin::enqueue_copy_bytes::<B>(&stream, &copy, on_device.ptr(), dst_ptr, 4096).unwrap();
                builtin::enqueue_copy_bytes::<B>(&stream, &copy, at(on_device.ptr(), 4096), at(dst_ptr, 4096), 1000)
                    .unwrap();
                builtin::enqueue_copy_bytes::<B>(
                    &stream,
                    &copy,
                    at(on_device.ptr(), 5096),
                    at(dst_ptr, 5096),
                    (len - 5096) as u64,
                )
                .unwrap();
                builtin::enqueue_copy_bytes::<B>(&stream, &copy, at(src_ptr, 3), at(dst_ptr, 7), 100).unwrap();
            }
        };
        if captured {
            stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
            enqueue();
            let graph = stream.end_capture().unwrap();
            assert_eq!(graph.node_count(), 5);
            let exec = device.instantiate(&graph).unwrap();
            // SAFETY: the captured ranges are live until after the synchronize below.
            unsafe { stream.launch_graph(&exec) }.unwrap();
        } else {
            enqueue();
        }
        stream.synchronize().unwrap();
        let mut expected = data.clone();
        expected.copy_within(3..103, 7);
        assert!(dst.as_slice() == &expected[..], "round {round}: a kernel's copy through mapped pinned memory differs");
        assert_eq!(download::<B>(&stream, on_device.as_slice()), data, "round {round}: the device copy differs");
    }
    drop(src);
    if device.info().backend == crate::BackendKind::Host {
        // The host backend checks every access: the dropped buffer's mapping must be gone.
        // SAFETY: the host backend resolves the address and faults instead of touching memory.
        let launched = unsafe { builtin::enqueue_copy_bytes::<B>(&stream, &copy, src_ptr, on_device.ptr(), 64) };
        let waited = launched.and_then(|()| stream.synchronize());
        assert!(waited.is_err(), "a kernel read a dropped pinned buffer's mapping");
    }
}
