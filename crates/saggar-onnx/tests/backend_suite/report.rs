//! The suite's verdict and report: counts per suite (passed, expected failures, failed, not
//! applicable), not-applicable reasons, stale expectations; as text for the console and as markdown.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use crate::run::Mode;

/// What happened to one test.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Every data set matched (how it was run).
    Passed(Mode),
    /// Import, run or a comparison failed (the reason).
    Failed(String),
    /// Outside the declared op set (the reason).
    NotApplicable(String),
}

/// One test's result.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// Its suite folder.
    pub suite: &'static str,
    /// Its folder name.
    pub name: String,
    /// What happened.
    pub outcome: Outcome,
    /// Wall time.
    pub seconds: f64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    passed: usize,
    /// Of `passed`, those whose programs are keyed by input values ([`Mode::ValueInputs`]).
    keyed: usize,
    /// Of `passed`, those run as a chain of segments ([`Mode::Segments`]).
    segmented: usize,
    expected: usize,
    failed: usize,
    stale: usize,
    not_applicable: usize,
}

impl Counts {
    fn applicable(&self) -> usize {
        self.passed + self.expected + self.failed + self.stale
    }
}

/// The verdict over all results against the expectations file.
pub struct Report {
    backend: String,
    filter: Option<String>,
    elapsed: Duration,
    per_suite: BTreeMap<&'static str, Counts>,
    total: Counts,
    reasons: BTreeMap<String, usize>,
    /// Failures the expectations file does not name: `(test, reason)`.
    failed: Vec<(String, String)>,
    /// Expected failures: `(test, listed reason, observed reason)`.
    expected: Vec<(String, String, String)>,
    /// Listed tests that passed, are not applicable or do not exist: `(test, what happened)`.
    stale: Vec<(String, String)>,
    slowest: Vec<(String, f64)>,
}

/// Expected failures must stay under this share of the applicable tests.
const MAX_EXPECTED_SHARE: f64 = 0.05;

impl Report {
    /// Judges `results` against `expectations` (test name to reason).
    pub fn new(
        backend: &str,
        filter: Option<&str>,
        results: &[TestResult],
        expectations: &BTreeMap<String, String>,
        elapsed: Duration,
    ) -> Report {
        let mut r = Report {
            backend: backend.to_string(),
            filter: filter.map(str::to_string),
            elapsed,
            per_suite: BTreeMap::new(),
            total: Counts::default(),
            reasons: BTreeMap::new(),
            failed: Vec::new(),
            expected: Vec::new(),
            stale: Vec::new(),
            slowest: Vec::new(),
        };
        let mut seen = BTreeSet::new();
        for t in results {
            seen.insert(t.name.as_str());
            let counts = r.per_suite.entry(t.suite).or_default();
            let listed = expectations.get(&t.name);
            match (&t.outcome, listed) {
                (Outcome::Passed(mode), None) => {
                    counts.passed += 1;
                    counts.keyed += usize::from(*mode == Mode::ValueInputs);
                    counts.segmented += usize::from(*mode == Mode::Segments);
                }
                (Outcome::Passed(_), Some(_)) => {
                    counts.stale += 1;
                    r.stale.push((t.name.clone(), "passes now: remove it from the file".into()));
                }
                (Outcome::Failed(why), None) => {
                    counts.failed += 1;
                    r.failed.push((t.name.clone(), why.clone()));
                }
                (Outcome::Failed(why), Some(listed)) => {
                    counts.expected += 1;
                    r.expected.push((t.name.clone(), listed.clone(), why.clone()));
                }
                (Outcome::NotApplicable(why), listed) => {
                    counts.not_applicable += 1;
                    *r.reasons.entry(why.clone()).or_default() += 1;
                    if listed.is_some() {
                        r.stale.push((t.name.clone(), format!("not applicable ({why}): remove it from the file")));
                    }
                }
            }
            r.slowest.push((t.name.clone(), t.seconds));
        }
        if filter.is_none() {
            for name in expectations.keys().filter(|n| !seen.contains(n.as_str())) {
                r.stale.push((name.clone(), "no such test: remove it from the file".into()));
            }
        }
        for c in r.per_suite.values() {
            r.total.passed += c.passed;
            r.total.keyed += c.keyed;
            r.total.segmented += c.segmented;
            r.total.expected += c.expected;
            r.total.failed += c.failed;
            r.total.stale += c.stale;
            r.total.not_applicable += c.not_applicable;
        }
        r.slowest.sort_by(|a, b| b.1.total_cmp(&a.1));
        r.slowest.truncate(5);
        r
    }

    fn expected_share(&self) -> f64 {
        self.total.expected as f64 / self.total.applicable().max(1) as f64
    }

    /// No unexpected failure, no stale expectation, and (over the whole suite) expected failures
    /// under 5% of the applicable tests.
    pub fn ok(&self) -> bool {
        let share_ok = self.filter.is_some() || self.expected_share() < MAX_EXPECTED_SHARE;
        self.failed.is_empty() && self.stale.is_empty() && share_ok
    }

    fn verdict(&self) -> String {
        if self.ok() {
            return "PASS".into();
        }
        let mut why = Vec::new();
        if !self.failed.is_empty() {
            why.push(format!("{} unexpected failures", self.failed.len()));
        }
        if !self.stale.is_empty() {
            why.push(format!("{} stale expectations", self.stale.len()));
        }
        if self.filter.is_none() && self.expected_share() >= MAX_EXPECTED_SHARE {
            why.push(format!(
                "expected failures are {:.1}% of applicable tests (limit 5%)",
                100.0 * self.expected_share()
            ));
        }
        format!("FAIL ({})", why.join(", "))
    }

    fn counts_table(&self) -> String {
        let mut s = String::from(
            "| suite | applicable | passed | of which keyed by input values | of which run as segments | expected failures | failed | stale | not applicable |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        let rows = self.per_suite.iter().map(|(k, v)| (*k, *v)).chain([("total", self.total)]);
        for (suite, c) in rows {
            let _ = writeln!(
                s,
                "| {suite} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.applicable(),
                c.passed,
                c.keyed,
                c.segmented,
                c.expected,
                c.failed,
                c.stale,
                c.not_applicable
            );
        }
        s
    }

    /// The console report.
    pub fn text(&self) -> String {
        let t = &self.total;
        let mut s = format!(
            "ONNX backend tests on {}{}: {} passed ({} keyed by input values, {} run as segments), {} expected failures, {} failed, {} stale, {} not applicable ({:.1} s)\n",
            self.backend,
            self.filter.as_deref().map(|f| format!(" (filter `{f}`)")).unwrap_or_default(),
            t.passed,
            t.keyed,
            t.segmented,
            t.expected,
            t.failed,
            t.stale,
            t.not_applicable,
            self.elapsed.as_secs_f64()
        );
        for (suite, c) in &self.per_suite {
            let _ = writeln!(
                s,
                "  {suite}: {} passed, {} expected failures, {} failed, {} not applicable",
                c.passed, c.expected, c.failed, c.not_applicable
            );
        }
        for (name, why) in &self.failed {
            let _ = writeln!(s, "FAILED {name}: {why}");
        }
        for (name, why) in &self.stale {
            let _ = writeln!(s, "STALE {name}: {why}");
        }
        if std::env::var_os("SAGGAR_ONNX_VERBOSE").is_some() {
            for (name, listed, got) in &self.expected {
                let _ = writeln!(s, "expected failure {name} ({listed}): {got}");
            }
            for (name, secs) in &self.slowest {
                let _ = writeln!(s, "slow {name}: {secs:.2} s");
            }
        }
        let _ = writeln!(s, "{}", self.verdict());
        s
    }

    /// The markdown report kept in `docs/onnx-backend-tests.md`.
    pub fn markdown(&self) -> String {
        let mut s = String::from("# ONNX backend test suite\n\n");
        let _ = writeln!(
            s,
            "The ONNX project's backend tests (onnx 1.19.1: `node`, `pytorch-converted`, `pytorch-operator`, `simple`, and \
             the nine `light` model-zoo networks, whose weights are constants: they ship an output but no input, \
             and are fed zeros of their declared input shapes, on which their outputs do not depend) \
             run through saggar-onnx on the **{}** backend by `cargo xtask onnx-tests`. A test is applicable when every \
             node is in the declared op set at the model's opset (1 to 24) and every graph input, output and constant \
             has a declared element type (every numeric type but the 8-bit and sub-byte floats, and bool); each applicable test is imported and run through a \
             `Session`, every data set compared with the ONNX runner's tolerances (rtol 1e-3, atol 1e-7, NaN equals \
             NaN, same shapes and element types). Every input is fed at run time: a test whose output shapes \
             depend on the values of some inputs (a `shape`, `starts`, `axes` or `k` fed as a graph input, where \
             exporters emit constants) gets a program per shape and values of those inputs (the session's value \
             inputs, part of the program key); the table counts those separately. A test whose output extents depend \
             on values the model computes (NonZero, Compress, Unique, NonMaxSuppression, a computed Slice end) runs as \
             a chain of segments, each its own session, the computed counts read back between them and keying the \
             next segment's programs; the table counts those too. Expected failures are listed with their reasons in \
             `crates/saggar-onnx/tests/backend_expectations.txt`.\n",
            self.backend
        );
        let _ = writeln!(
            s,
            "Verdict: **{}**{}.\n",
            self.verdict(),
            self.filter.as_deref().map(|f| format!(" (tests matching `{f}` only)")).unwrap_or_default()
        );
        s.push_str(&self.counts_table());
        let _ = writeln!(
            s,
            "\nExpected failures: {} of {} applicable tests ({:.1}%; the limit is 5%).\n",
            self.total.expected,
            self.total.applicable(),
            100.0 * self.expected_share()
        );
        if !self.failed.is_empty() {
            s.push_str("## Unexpected failures\n\n");
            for (name, why) in &self.failed {
                let _ = writeln!(s, "- `{name}`: {}", why.replace('\n', " "));
            }
            s.push('\n');
        }
        if !self.stale.is_empty() {
            s.push_str("## Stale expectations\n\n");
            for (name, why) in &self.stale {
                let _ = writeln!(s, "- `{name}`: {why}");
            }
            s.push('\n');
        }
        s.push_str("## Expected failures\n\n");
        for (name, listed, _) in &self.expected {
            let _ = writeln!(s, "- `{name}`: {listed}");
        }
        s.push_str("\n## Not applicable, by reason\n\n| reason | tests |\n|---|---:|\n");
        let mut reasons: Vec<_> = self.reasons.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (reason, n) in reasons {
            let _ = writeln!(s, "| {reason} | {n} |");
        }
        s
    }
}
