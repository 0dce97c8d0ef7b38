//! # offload-bench
//!
//! The one helper every offload benchmark that compares uses: [`paired`] measures offload
//! and the raw API it wraps *alternately, sample by sample*, inside one criterion
//! benchmark, and reports the ratio and the difference of paired samples.
//!
//! Why: a criterion run that measures one side for seconds and then the other compares two
//! different moments of a shared machine. On the project's VMs that printed
//! offload / raw ash = 0.525 for a Vulkan dispatch whose paired ratio is 1.00: the load
//! changed between the groups. Paired samples see the same load, so their ratio cancels it;
//! the side that runs first alternates, so neither side always pays a cold cache.
//!
//! ```no_run
//! use criterion::{Criterion, black_box};
//! let mut c = Criterion::default();
//! let data = vec![1u8; 64];
//! let report = offload_bench::paired(
//!     &mut c,
//!     "copy64",
//!     ("vec", "slice"),
//!     50,
//!     || { black_box(data.to_vec()); },
//!     || { black_box(&data[..]); },
//! );
//! println!("ratio {:.2}", report.ratio.median);
//! ```
#![warn(missing_docs)]

pub mod babelstream;

use std::cell::RefCell;
use std::fmt;
use std::time::{Duration, Instant};

use criterion::Criterion;

/// Median and quartiles of one quantity over the paired samples.
///
/// ```
/// let s = offload_bench::Spread::of(&mut [3.0, 1.0, 2.0, 4.0, 5.0]);
/// assert_eq!((s.q1, s.median, s.q3), (2.0, 3.0, 4.0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// First quartile.
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// Third quartile.
    pub q3: f64,
}

impl Spread {
    /// The quartiles of `values` (sorted in place; empty gives NaNs).
    ///
    /// ```
    /// assert!(offload_bench::Spread::of(&mut []).median.is_nan());
    /// ```
    pub fn of(values: &mut [f64]) -> Spread {
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if values.is_empty() {
                return f64::NAN;
            }
            values[((values.len() - 1) as f64 * q).round() as usize]
        };
        Spread {
            q1: at(0.25),
            median: at(0.5),
            q3: at(0.75),
        }
    }
}

/// What one paired comparison measured: per-iteration times of each side, their ratio and
/// their difference, each over the paired samples.
#[derive(Clone, Debug)]
pub struct Paired {
    /// The benchmark's name.
    pub id: String,
    /// The two sides' labels: (ours, theirs).
    pub labels: (String, String),
    /// Nanoseconds per iteration of our side.
    pub ours_ns: Spread,
    /// Nanoseconds per iteration of their side.
    pub theirs_ns: Spread,
    /// Ours / theirs, per pair of samples.
    pub ratio: Spread,
    /// Ours − theirs, nanoseconds per iteration, per pair of samples.
    pub difference_ns: Spread,
    /// Pairs of samples.
    pub samples: usize,
}

fn time(text: f64) -> String {
    if text.abs() >= 1e6 {
        format!("{:.3} ms", text / 1e6)
    } else if text.abs() >= 1e3 {
        format!("{:.2} µs", text / 1e3)
    } else {
        format!("{text:.1} ns")
    }
}

impl fmt::Display for Paired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "paired {}: {} {} | {} {} | ratio {:.3} (IQR {:.3}–{:.3}) | difference {} (IQR {} – {}) | {} pairs",
            self.id,
            self.labels.0,
            time(self.ours_ns.median),
            self.labels.1,
            time(self.theirs_ns.median),
            self.ratio.median,
            self.ratio.q1,
            self.ratio.q3,
            time(self.difference_ns.median),
            time(self.difference_ns.q1),
            time(self.difference_ns.q3),
            self.samples,
        )
    }
}

fn run<F: FnMut()>(iters: u64, f: &mut F) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed()
}

/// Benchmarks `ours` against `theirs` in pairs: criterion group `id` with one benchmark
/// named `labels.0`, each of whose `samples` samples times the same number of iterations
/// of `ours` and of `theirs` back to back (alternating which goes first). Criterion's own
/// statistics are those of `ours`; the paired figures come back as a [`Paired`], which is
/// also printed. Each closure does one iteration; keep results alive with `black_box`.
///
/// ```no_run
/// use criterion::{Criterion, black_box};
/// let mut c = Criterion::default();
/// let p = offload_bench::paired(&mut c, "noop", ("a", "b"), 20, || black_box(()), || black_box(()));
/// assert_eq!(p.samples, 20);
/// ```
pub fn paired<O: FnMut(), T: FnMut()>(
    c: &mut Criterion,
    id: &str,
    labels: (&str, &str),
    samples: usize,
    mut ours: O,
    mut theirs: T,
) -> Paired {
    let records: RefCell<Vec<(u64, Duration, Duration)>> = RefCell::new(Vec::new());
    let mut ours_first = false;
    let mut group = c.benchmark_group(id);
    group.sample_size(samples.max(10));
    group.bench_function(format!("{} (paired with {})", labels.0, labels.1), |b| {
        b.iter_custom(|iters| {
            ours_first = !ours_first;
            let (o, t) = if ours_first {
                let o = run(iters, &mut ours);
                (o, run(iters, &mut theirs))
            } else {
                let t = run(iters, &mut theirs);
                (run(iters, &mut ours), t)
            };
            records.borrow_mut().push((iters, o, t));
            o
        })
    });
    group.finish();
    // Criterion takes its samples after its warm-up: the last ones are the samples.
    let records = records.into_inner();
    let kept = &records[records.len().saturating_sub(samples.max(10))..];
    if kept.is_empty() {
        println!("paired {id}: not measured in this run (filtered out)");
    }
    let per = |d: Duration, iters: u64| d.as_secs_f64() * 1e9 / iters.max(1) as f64;
    let mut ours_ns: Vec<f64> = kept.iter().map(|&(n, o, _)| per(o, n)).collect();
    let mut theirs_ns: Vec<f64> = kept.iter().map(|&(n, _, t)| per(t, n)).collect();
    let mut ratio: Vec<f64> = kept
        .iter()
        .map(|&(_, o, t)| o.as_secs_f64() / t.as_secs_f64().max(f64::MIN_POSITIVE))
        .collect();
    let mut difference: Vec<f64> = kept
        .iter()
        .map(|&(n, o, t)| per(o, n) - per(t, n))
        .collect();
    let report = Paired {
        id: id.to_string(),
        labels: (labels.0.to_string(), labels.1.to_string()),
        ours_ns: Spread::of(&mut ours_ns),
        theirs_ns: Spread::of(&mut theirs_ns),
        ratio: Spread::of(&mut ratio),
        difference_ns: Spread::of(&mut difference),
        samples: kept.len(),
    };
    if report.samples > 0 {
        println!("{report}");
    }
    report
}
