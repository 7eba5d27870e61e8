//! The parts of the `saggar perf` report that say where time goes: the startup breakdown (model
//! import, session creation with each program's compile or load, warmup runs with each bucket's
//! first run) and the per-stage split of the timed requests (host stages, device span, and the
//! device span split into H2D, compute and D2H by each bucket's copies timed on their own).

use std::time::Duration;

use serde::Serialize;

use super::bench::{Measured, Record, StageRecord};

/// One program made ready during session creation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProgramReady {
    /// Its bucket (`None` for a static model).
    pub bucket: Option<u64>,
    /// `compiled` or `loaded` (from the cache's memory or disk).
    pub source: &'static str,
    /// Seconds from the start of session creation until it was ready. Loads run in parallel and
    /// compiles one at a time, so the gaps between these are the compile times of compiled programs.
    pub ready_at_s: f64,
}

/// A bucket's first warmup run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FirstRun {
    /// The request's batch.
    pub batch: u64,
    /// Microseconds of that run: the graph capture (lazy capture) and the first replay.
    pub us: f64,
}

/// Startup, from the command's start to the first timed request.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Startup {
    /// Reading and importing the model (ONNX import, or the model config and its weights).
    pub import_s: f64,
    /// Session creation: every bucket's program compiled or loaded, weights uploaded (inside each
    /// program's load), run contexts created (and graphs captured with `--capture eager`).
    pub session_s: f64,
    /// Each program as it became ready.
    pub programs: Vec<ProgramReady>,
    /// Untimed warmup runs.
    pub warmup_runs: u64,
    /// Their wall time.
    pub warmup_s: f64,
    /// Graphs captured during the warmup.
    pub warmup_captures: u64,
    /// The first warmup run of each distinct batch.
    pub first_runs: Vec<FirstRun>,
    /// Graphs captured during the timed requests (0 when the warmup warmed every run context).
    pub timed_captures: u64,
}

/// One bucket's single upload and single download, timed on their own with device events.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct BucketCopies {
    /// The bucket.
    pub bucket: u64,
    /// Bytes uploaded.
    pub upload_bytes: usize,
    /// Bytes downloaded.
    pub download_bytes: usize,
    /// Median device time of the upload.
    pub h2d_us: f64,
    /// Median device time of the download.
    pub d2h_us: f64,
}

/// The device span split, in microseconds, averaged over the sampled requests.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct DeviceSplit {
    /// Host to device (the bucket's upload timed on its own).
    pub h2d_us: f64,
    /// The device span less both copies.
    pub compute_us: f64,
    /// Device to host (the bucket's download timed on its own).
    pub d2h_us: f64,
}

/// Per-stage times of the sampled requests.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Stages {
    /// Every K-th request was timed (`--stage-every`).
    pub every: u64,
    /// Requests timed.
    pub sampled: u64,
    /// Mean latency of those requests, microseconds (the stages sum to at most this).
    pub latency_mean_us: f64,
    /// Mean of each stage over those requests, microseconds.
    pub mean: Option<StageRecord>,
    /// The mean device span split into H2D, compute and D2H.
    pub device_split: Option<DeviceSplit>,
    /// Each bucket's copies timed on their own.
    pub copies: Vec<BucketCopies>,
    /// Why no stages were timed, if none were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl Stages {
    /// The summary of `records` that carry stages, with `copies` for the split.
    pub fn summarize(every: u64, records: &[Record], copies: Vec<BucketCopies>, unavailable: Option<String>) -> Stages {
        let sampled: Vec<(&Record, &StageRecord)> =
            records.iter().filter_map(|r| r.stages.as_ref().map(|s| (r, s))).collect();
        let n = sampled.len();
        let mean_of =
            |f: &dyn Fn(&StageRecord) -> f64| sampled.iter().map(|(_, s)| f(s)).sum::<f64>() / n.max(1) as f64;
        let mean = (n > 0).then(|| {
            let with_device: Vec<f64> = sampled.iter().filter_map(|(_, s)| s.device_us).collect();
            StageRecord {
                queue_wait_us: mean_of(&|s| s.queue_wait_us),
                check_us: mean_of(&|s| s.check_us),
                gather_us: mean_of(&|s| s.gather_us),
                enqueue_us: mean_of(&|s| s.enqueue_us),
                sync_us: mean_of(&|s| s.sync_us),
                scatter_us: mean_of(&|s| s.scatter_us),
                device_us: (!with_device.is_empty())
                    .then(|| with_device.iter().sum::<f64>() / with_device.len() as f64),
            }
        });
        let split: Vec<DeviceSplit> = sampled
            .iter()
            .filter_map(|(r, s)| {
                let device = s.device_us?;
                let c = copies.iter().find(|c| Some(c.bucket) == r.bucket)?;
                Some(DeviceSplit {
                    h2d_us: c.h2d_us,
                    d2h_us: c.d2h_us,
                    compute_us: (device - c.h2d_us - c.d2h_us).max(0.0),
                })
            })
            .collect();
        let device_split = (!split.is_empty()).then(|| {
            let k = split.len() as f64;
            DeviceSplit {
                h2d_us: split.iter().map(|s| s.h2d_us).sum::<f64>() / k,
                compute_us: split.iter().map(|s| s.compute_us).sum::<f64>() / k,
                d2h_us: split.iter().map(|s| s.d2h_us).sum::<f64>() / k,
            }
        });
        Stages {
            every,
            sampled: n as u64,
            latency_mean_us: sampled.iter().map(|(r, _)| r.latency_us).sum::<f64>() / n.max(1) as f64,
            mean,
            device_split,
            copies,
            unavailable,
        }
    }

    /// The table line: `queue 1.0, check 2.0, gather 3.0, enqueue 4.0, device 5.0 (h2d 1.0 compute
    /// 3.0 d2h 1.0), sync 4.5, scatter 1.0 us (mean of N requests)`.
    pub fn line(&self) -> String {
        let Some(m) = &self.mean else {
            return self.unavailable.clone().unwrap_or_else(|| "no request timed".to_string());
        };
        if m.device_us.is_none() {
            return format!(
                "queue {:.1}, check {:.1} us (means over {} requests, 1 in {}, of mean latency {:.1} us); they ran split, padded along an axis or as per-shape programs, whose stages are not separated",
                m.queue_wait_us, m.check_us, self.sampled, self.every, self.latency_mean_us
            );
        }
        let device = match (m.device_us, &self.device_split) {
            (Some(d), Some(s)) => {
                format!(", device {d:.1} (h2d {:.1} compute {:.1} d2h {:.1})", s.h2d_us, s.compute_us, s.d2h_us)
            }
            (Some(d), None) => format!(", device {d:.1}"),
            _ => String::new(),
        };
        format!(
            "queue {:.1}, check {:.1}, gather {:.1}, enqueue {:.1}{device}, sync {:.1}, scatter {:.1} us (means over {} requests, 1 in {}, of mean latency {:.1} us)",
            m.queue_wait_us,
            m.check_us,
            m.gather_us,
            m.enqueue_us,
            m.sync_us,
            m.scatter_us,
            self.sampled,
            self.every,
            self.latency_mean_us
        )
    }
}

impl Startup {
    /// The table line.
    pub fn line(&self) -> String {
        let compiled = self.programs.iter().filter(|p| p.source == "compiled").count();
        let firsts: Vec<String> = self.first_runs.iter().map(|f| format!("{}:{:.0}", f.batch, f.us)).collect();
        format!(
            "import {:.3} s, session {:.3} s ({} programs, {} compiled), warmup {} runs {:.3} s ({} captures; first run us by batch {}), {} captures in timed requests",
            self.import_s,
            self.session_s,
            self.programs.len(),
            compiled,
            self.warmup_runs,
            self.warmup_s,
            self.warmup_captures,
            if firsts.is_empty() { "-".to_string() } else { firsts.join(" ") },
            self.timed_captures
        )
    }
}

/// The first warmup runs of `measured`, by batch.
pub fn first_runs<K>(measured: &Measured<K>, distinct: &[u64]) -> Vec<FirstRun> {
    measured.first_run_us.iter().zip(distinct).filter_map(|(us, &batch)| us.map(|us| FirstRun { batch, us })).collect()
}

/// Seconds of a duration.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(latency_us: f64, bucket: Option<u64>, stages: Option<StageRecord>) -> Record {
        Record {
            request: 0,
            batch: 1,
            thread: 0,
            start_us: 0.0,
            latency_us,
            latency_ns: (latency_us * 1000.0) as u64,
            path: Some("fast"),
            bucket,
            stages,
        }
    }

    fn stages(device_us: Option<f64>) -> StageRecord {
        StageRecord {
            queue_wait_us: 1.0,
            check_us: 2.0,
            gather_us: 3.0,
            enqueue_us: 4.0,
            sync_us: 5.0,
            scatter_us: 6.0,
            device_us,
        }
    }

    #[test]
    fn the_split_uses_each_requests_bucket_and_never_goes_negative() {
        let records = [
            record(30.0, Some(1), Some(stages(Some(10.0)))),
            record(50.0, Some(8), Some(stages(Some(2.0)))),
            record(99.0, Some(1), None),
        ];
        let copies = vec![
            BucketCopies { bucket: 1, upload_bytes: 4, download_bytes: 4, h2d_us: 1.0, d2h_us: 2.0 },
            BucketCopies { bucket: 8, upload_bytes: 32, download_bytes: 32, h2d_us: 3.0, d2h_us: 4.0 },
        ];
        let s = Stages::summarize(2, &records, copies, None);
        assert_eq!(s.sampled, 2, "the untimed request is left out");
        assert_eq!(s.latency_mean_us, 40.0);
        let mean = s.mean.unwrap();
        assert_eq!((mean.gather_us, mean.device_us), (3.0, Some(6.0)));
        let split = s.device_split.unwrap();
        // Bucket 1: 10 - 1 - 2 = 7 of compute; bucket 8: 2 - 3 - 4 < 0, so 0.
        assert_eq!((split.h2d_us, split.compute_us, split.d2h_us), (2.0, 3.5, 3.0));
        assert!(s.line().contains("device 6.0 (h2d 2.0 compute 3.5 d2h 3.0)"), "{}", s.line());
    }

    #[test]
    fn requests_without_a_device_span_say_so() {
        let s = Stages::summarize(1, &[record(9.0, None, Some(stages(None)))], Vec::new(), None);
        assert!(s.line().contains("per-shape"), "{}", s.line());
        assert_eq!(s.device_split, None);
    }

    #[test]
    fn no_timed_request_says_why() {
        let s = Stages::summarize(0, &[record(5.0, None, None)], Vec::new(), Some("not timed".into()));
        assert_eq!((s.sampled, s.mean, s.device_split), (0, None, None));
        assert_eq!(s.line(), "not timed");
    }
}
