//! Device buffers a compiler uploads once per device and shares among every program it loads there.
//!
//! A [`ProgramCompiler`](crate::ProgramCompiler) is called once per bucket, but a model's weights are
//! the same for every bucket: uploading them per bucket multiplies device memory by the bucket count.
//! [`PerDevice`] keeps one upload per device. A device is named by its backend and ordinal, and an
//! ordinal can name a different device object later (a device closed and opened again, whose memory
//! was released), so each upload starts with a 16-byte marker no other upload uses, and a later load
//! reuses the buffer only if that device reads the same marker back; otherwise it uploads again.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use saggar_device::{Backend, BackendKind, Device, DeviceBuffer, DevicePtr, Stream};

/// Bytes of the residency marker at the start of every [`ResidentBuffer`]: a compiler places its
/// bytes at an offset of at least this much, or leaves this much room at their start (offset 0),
/// where the marker overwrites them.
pub const MARKER_LEN: usize = 16;

/// One buffer per device, uploaded on first use and shared after.
///
/// # Thread safety
/// `Send + Sync`: loads on several threads share one upload (the first uploads under a lock).
#[derive(Debug, Default)]
pub struct PerDevice {
    buffers: DeviceMap<()>,
}

/// Values kept per device (its backend and ordinal) and key, type-erased so one compiler serves
/// every backend.
#[derive(Debug)]
pub(crate) struct DeviceMap<K> {
    entries: Mutex<Vec<Entry<K>>>,
}

/// A value of one device under one key.
#[derive(Debug)]
struct Entry<K> {
    backend: BackendKind,
    ordinal: usize,
    key: K,
    value: Arc<dyn Any + Send + Sync>,
}

impl<K> Default for DeviceMap<K> {
    fn default() -> Self {
        DeviceMap { entries: Mutex::new(Vec::new()) }
    }
}

impl<K: PartialEq> DeviceMap<K> {
    /// `device`'s value under `key`: the one stored for the device's backend and ordinal if it is a
    /// `T` that `reuse` accepts, else `make()`, stored in its place. The map stays locked while
    /// `make` runs, so concurrent loads on one device make one value.
    pub(crate) fn get_or_make<B: Backend, T: Send + Sync + 'static, E>(
        &self,
        device: &B::Device,
        key: K,
        reuse: impl FnOnce(&T) -> bool,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        let ordinal = device.info().ordinal;
        let mut entries = self.entries.lock();
        if let Some(pos) = entries.iter().position(|e| e.backend == B::KIND && e.ordinal == ordinal && e.key == key) {
            if let Ok(value) = entries[pos].value.clone().downcast::<T>()
                && reuse(&value)
            {
                return Ok(value);
            }
            entries.swap_remove(pos);
        }
        let value = Arc::new(make()?);
        entries.push(Entry { backend: B::KIND, ordinal, key, value: value.clone() });
        Ok(value)
    }
}

/// A buffer uploaded by [`PerDevice::get_or_upload`]: the residency marker in its first
/// [`MARKER_LEN`] bytes and the caller's bytes at the caller's offset.
#[derive(Debug)]
pub struct ResidentBuffer<B: Backend> {
    buffer: B::DeviceBuffer,
    offset: usize,
    marker: [u8; MARKER_LEN],
}

impl<B: Backend> ResidentBuffer<B> {
    /// The device buffer (marker included).
    pub fn buffer(&self) -> &B::DeviceBuffer {
        &self.buffer
    }

    /// The address of the caller's bytes (the buffer's start plus the offset they were uploaded at).
    pub fn data_ptr(&self) -> DevicePtr {
        DevicePtr(self.buffer.ptr().0 + self.offset as u64)
    }

    fn upload(device: &B::Device, offset: usize, bytes: &[u8]) -> saggar_device::Result<ResidentBuffer<B>> {
        let end = offset.checked_add(bytes.len()).ok_or_else(|| saggar_device::Error::InvalidSize {
            op: "resident upload",
            bytes: offset as u128 + bytes.len() as u128,
            reason: "larger than the address space",
        })?;
        let buffer = device.alloc(end.max(MARKER_LEN))?;
        let stream = device.create_stream()?;
        let marker = fresh_marker();
        if !bytes.is_empty() {
            stream.upload(bytes, buffer.slice(offset, bytes.len())?)?;
        }
        stream.upload(&marker, buffer.slice(0, MARKER_LEN)?)?;
        stream.synchronize()?;
        Ok(ResidentBuffer { buffer, offset, marker })
    }

    /// Whether `device` is the device this buffer lives on (it reads the marker back).
    fn is_resident_on(&self, device: &B::Device) -> bool {
        let mut seen = [0u8; MARKER_LEN];
        let read =
            device.create_stream().and_then(|stream| stream.download(self.buffer.slice(0, MARKER_LEN)?, &mut seen));
        read.is_ok() && seen == self.marker
    }
}

impl PerDevice {
    /// No buffer on any device yet.
    pub fn new() -> PerDevice {
        PerDevice::default()
    }

    /// `device`'s buffer, uploading `bytes()` at `offset` first if this device does not hold it yet.
    /// `bytes` is called only for an upload. The marker takes the buffer's first [`MARKER_LEN`]
    /// bytes, so `offset` is at least that, or `bytes` leaves that much room at its start. One
    /// `PerDevice` serves one kind of buffer: every call passes the same offset.
    pub fn get_or_upload<'a, B: Backend>(
        &self,
        device: &B::Device,
        offset: usize,
        bytes: impl FnOnce() -> &'a [u8],
    ) -> saggar_device::Result<Arc<ResidentBuffer<B>>> {
        self.buffers.get_or_make::<B, _, _>(
            device,
            (),
            |buffer: &ResidentBuffer<B>| buffer.is_resident_on(device),
            || ResidentBuffer::<B>::upload(device, offset, bytes()),
        )
    }
}

/// 16 bytes no other upload in this process (or, practically, any other) uses.
fn fresh_marker() -> [u8; MARKER_LEN] {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = blake3::Hasher::new();
    hasher.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    hasher.update(&now.as_nanos().to_le_bytes());
    let mut marker = [0u8; MARKER_LEN];
    marker.copy_from_slice(&hasher.finalize().as_bytes()[..MARKER_LEN]);
    marker
}

#[cfg(test)]
mod tests {
    use saggar_device::host::HostBackend;

    use super::*;

    #[test]
    fn one_upload_per_device_shared_by_later_loads() {
        let shared = PerDevice::new();
        let bytes = vec![7u8; 64];
        let mut uploads = 0;
        let device = HostBackend::open(0).unwrap();
        let first = shared
            .get_or_upload::<HostBackend>(&device, 0, || {
                uploads += 1;
                &bytes
            })
            .unwrap();
        let again = shared.get_or_upload::<HostBackend>(&device, 0, || unreachable!("already resident")).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let mut back = vec![0u8; 64];
        let stream = device.create_stream().unwrap();
        stream.download(first.buffer().as_slice(), &mut back).unwrap();
        assert_eq!(&back[MARKER_LEN..], &bytes[MARKER_LEN..], "the bytes after the marker are the caller's");
        assert_eq!(first.data_ptr(), first.buffer().ptr(), "uploaded at offset 0");
        assert_eq!(uploads, 1);
    }
}
