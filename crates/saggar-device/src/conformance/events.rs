//! Events and streams: an event recorded on one stream orders work on another, and timed and
//! untimed events answer elapsed-time queries as they should.

use super::{builtin_module, download, fill};
use crate::api::{Backend, Device, DeviceBuffer, Event, Module, Stream};
use crate::builtin;
use crate::error::Error;

/// Four rounds of eight fills on a producer stream, then `events` recorded there, a consumer stream
/// waiting on the first and copying the filled buffer: the consumer must see the last fill.
fn producer_orders_consumer<B: Backend>(device: &B::Device, events: &[&B::Event]) {
    let module = builtin_module::<B>(device);
    let fill_k = module.kernel(builtin::FILL_U32).unwrap();
    let producer = device.create_stream().unwrap();
    let consumer = device.create_stream().unwrap();
    let n = 1 << 20;
    let a = device.alloc(n * 4).unwrap();
    let b = device.alloc(n * 4).unwrap();
    for round in 0..4u32 {
        // SAFETY: `a` and `b` outlive the synchronize at the end of each round.
        unsafe {
            for i in 0..8 {
                fill::<B>(&producer, &fill_k, a.as_slice(), round * 100 + i);
            }
        }
        for event in events {
            producer.record(event).unwrap();
        }
        consumer.wait(events[0]).unwrap();
        consumer.copy_d2d(a.as_slice(), b.as_slice()).unwrap();
        consumer.synchronize().unwrap();
        let words = download::<B>(&consumer, b.slice(0, 16).unwrap());
        let first = u32::from_le_bytes(words[..4].try_into().unwrap());
        assert_eq!(first, round * 100 + 7, "the consumer ran before the producer's last fill");
    }
    producer.synchronize().unwrap();
}

/// An event recorded on one stream orders work on another.
pub fn events_order_work_across_streams<B: Backend>(device: &B::Device) {
    let event = device.create_event().unwrap();
    producer_orders_consumer::<B>(device, &[&event]);
}

/// Events give an elapsed time once both are complete, and an error before they are recorded.
pub fn event_timing<B: Backend>(device: &B::Device) {
    let stream = device.create_stream().unwrap();
    let start = device.create_event().unwrap();
    let end = device.create_event().unwrap();
    assert!(end.elapsed_since(&start).is_err(), "elapsed time of events never recorded");
    let buf = device.alloc(1 << 20).unwrap();
    stream.record(&start).unwrap();
    stream.memset(buf.as_slice(), 1).unwrap();
    stream.record(&end).unwrap();
    end.synchronize().unwrap();
    assert!(end.is_complete().unwrap());
    let elapsed = end.elapsed_since(&start).unwrap();
    assert!(elapsed.as_secs() < 10, "implausible elapsed time {elapsed:?}");
}

/// An untimed event orders work across streams and can be waited on like a timed one, and every
/// elapsed-time query involving it is an error (not a garbage duration), also once it is complete.
pub fn untimed_event_orders_work_and_refuses_timing<B: Backend>(device: &B::Device) {
    let fence = device.create_untimed_event().unwrap();
    let timed = device.create_event().unwrap();
    producer_orders_consumer::<B>(device, &[&fence, &timed]);
    fence.synchronize().unwrap();
    assert!(fence.is_complete().unwrap());
    for (end, start) in [(&fence, &timed), (&timed, &fence), (&fence, &fence)] {
        assert!(
            matches!(end.elapsed_since(start), Err(Error::Event { .. })),
            "elapsed time involving an untimed event must be refused"
        );
    }
}
