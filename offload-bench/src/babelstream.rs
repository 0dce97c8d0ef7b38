//! BabelStream's definitions, shared by the benchmarks that run it on each device (the host
//! beside OpenMP, Vulkan beside raw `ash`, CUDA beside raw driver calls): the start values,
//! the kernels in the order an iteration runs them with the elements each moves, one round
//! of timed iterations, the MB/s figure and the check against the scalar recurrence.
//!
//! ```
//! use offload_bench::babelstream::{self, Precision};
//! // One iteration: c = a; b = s·c; c = a + b; a = b + s·c.
//! let [a, b, c] = babelstream::golden(1, Precision::F64);
//! let near = |x: f64, y: f64| (x - y).abs() < 1e-15;
//! assert!(near(b, 0.04) && near(c, 0.14) && near(a, 0.04 + 0.4 * 0.14));
//! ```

use std::time::{Duration, Instant};

/// The arrays' start values and the scalar.
pub const START_A: f64 = 0.1;
/// See [`START_A`].
pub const START_B: f64 = 0.2;
/// See [`START_A`].
pub const START_C: f64 = 0.0;
/// See [`START_A`].
pub const SCALAR: f64 = 0.4;

/// The kernels in the order an iteration runs them, with the elements each moves per
/// element of the arrays (copy, mul and dot read one array and write one or reduce; add
/// and triad read two and write one).
pub const KERNELS: [(&str, u64); 5] = [
    ("copy", 2),
    ("mul", 2),
    ("add", 3),
    ("triad", 3),
    ("dot", 2),
];

/// A run's sizes: elements per array, iterations per round, rounds.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Elements per array.
    pub n: u32,
    /// Iterations per round (the first of each is not counted).
    pub iters: usize,
    /// Rounds (the sides alternate round by round).
    pub rounds: usize,
}

impl Sizes {
    /// `OFFLOAD_BABELSTREAM_N`, `OFFLOAD_BABELSTREAM_ITERS` and `OFFLOAD_BABELSTREAM_ROUNDS`,
    /// else the defaults; panics with the variable's name on a value that cannot be one.
    ///
    /// ```
    /// let s = offload_bench::babelstream::Sizes::from_env(1 << 10, 4, 2);
    /// assert!(s.n >= 1 && s.iters >= 2 && s.rounds >= 1);
    /// ```
    pub fn from_env(n: usize, iters: usize, rounds: usize) -> Sizes {
        let var = |name: &str, default: usize| match std::env::var(name) {
            Ok(v) => v
                .parse()
                .unwrap_or_else(|_| panic!("{name}: a whole number, not {v:?}")),
            Err(_) => default,
        };
        let n = var("OFFLOAD_BABELSTREAM_N", n);
        let sizes = Sizes {
            n: u32::try_from(n).expect("OFFLOAD_BABELSTREAM_N: at most 2^32 - 1"),
            iters: var("OFFLOAD_BABELSTREAM_ITERS", iters),
            rounds: var("OFFLOAD_BABELSTREAM_ROUNDS", rounds),
        };
        assert!(sizes.n > 0, "OFFLOAD_BABELSTREAM_N: at least 1");
        assert!(
            sizes.iters >= 2,
            "OFFLOAD_BABELSTREAM_ITERS: at least 2 (the first is not counted)"
        );
        assert!(sizes.rounds >= 1, "OFFLOAD_BABELSTREAM_ROUNDS: at least 1");
        sizes
    }
}

/// The element type's arithmetic, for the golden values and the check's tolerances.
#[derive(Clone, Copy, Debug)]
pub struct Precision {
    /// Rounds an `f64` to the element type (each step of the recurrence is rounded, so the
    /// golden values follow the kernels' own arithmetic).
    pub round: fn(f64) -> f64,
    /// The element type's machine epsilon: an array passes with a mean relative error of
    /// at most 100 of them.
    pub epsilon: f64,
    /// The most relative error the dot may have.
    pub dot_tolerance: f64,
}

impl Precision {
    /// `f32` arrays.
    pub const F32: Precision = Precision {
        round: |x| x as f32 as f64,
        epsilon: f32::EPSILON as f64,
        dot_tolerance: 1e-4,
    };
    /// `f64` arrays.
    pub const F64: Precision = Precision {
        round: |x| x,
        epsilon: f64::EPSILON,
        dot_tolerance: 1e-8,
    };
}

/// The values of a, b and c after `iters` iterations from the start values.
pub fn golden(iters: usize, p: Precision) -> [f64; 3] {
    let r = p.round;
    let (mut a, mut b, mut c) = (r(START_A), r(START_B), r(START_C));
    let s = r(SCALAR);
    for _ in 0..iters {
        c = a;
        b = r(s * c);
        c = r(a + b);
        a = r(b + r(s * c));
    }
    [a, b, c]
}

/// One side of a BabelStream run: a device and its arrays.
pub trait Side {
    /// The arrays' element type.
    type Elem: Copy + Into<f64>;
    /// Its name in the output.
    fn name(&self) -> &'static str;
    /// Sets the arrays to their start values and waits (not timed).
    fn init(&mut self);
    /// Runs kernel `k` of [`KERNELS`] and waits for it; for the dot, adds up its partial
    /// sums and returns the dot.
    fn run(&mut self, k: usize) -> Option<f64>;
    /// The arrays a, b, c (not timed).
    fn arrays(&mut self) -> [Vec<Self::Elem>; 3];
}

/// `iters` iterations of the five kernels on `side`: each kernel's times, and the last dot.
pub fn run_round<S: Side + ?Sized>(side: &mut S, iters: usize) -> ([Vec<Duration>; 5], f64) {
    let mut times: [Vec<Duration>; 5] = Default::default();
    let mut dot = 0.0;
    for _ in 0..iters {
        for (k, t) in times.iter_mut().enumerate() {
            let start = Instant::now();
            let sum = side.run(k);
            t.push(start.elapsed());
            if let Some(sum) = sum {
                dot = sum;
            }
        }
    }
    (times, dot)
}

/// Each kernel's MB/s (10^6 bytes per second) from its fastest time after the first
/// iteration, for arrays of `array_bytes` bytes.
pub fn rates(times: &[Vec<Duration>; 5], array_bytes: u64) -> [f64; 5] {
    std::array::from_fn(|k| {
        let best = times[k]
            .iter()
            .skip(1)
            .min()
            .copied()
            .unwrap_or(Duration::MAX);
        mb_per_s(KERNELS[k].1 * array_bytes, best)
    })
}

/// MB/s of moving `bytes` in `t` (NaN for `Duration::MAX`, a kernel that did not run).
pub fn mb_per_s(bytes: u64, t: Duration) -> f64 {
    if t == Duration::MAX {
        return f64::NAN;
    }
    bytes as f64 / 1e6 / t.as_secs_f64().max(1e-12)
}

/// BabelStream's check of `side`'s arrays and last `dot` after `iters` iterations over `n`
/// elements: `Err` says what failed.
pub fn check<S: Side + ?Sized>(
    side: &mut S,
    iters: usize,
    n: u64,
    dot: f64,
    p: Precision,
) -> Result<(), String> {
    let arrays = side.arrays();
    check_arrays(
        side.name(),
        [&arrays[0], &arrays[1], &arrays[2]],
        iters,
        n,
        dot,
        p,
    )
}

/// [`check`] of arrays held elsewhere: each array's mean relative error against its golden
/// value, at most 100 ε, and the dot's against gold a · gold b · `n`.
///
/// ```
/// use offload_bench::babelstream::{self, Precision};
/// let [a, b, c] = babelstream::golden(3, Precision::F64);
/// let n = 4;
/// let ok = [vec![a; n], vec![b; n], vec![c; n]];
/// let dot = a * b * n as f64;
/// assert!(babelstream::check_arrays("t", [&ok[0], &ok[1], &ok[2]], 3, n as u64, dot, Precision::F64).is_ok());
/// let off = vec![a * 1.001; n];
/// let e = babelstream::check_arrays("t", [&off, &ok[1], &ok[2]], 3, n as u64, dot, Precision::F64);
/// assert!(e.unwrap_err().starts_with("t: a: "));
/// ```
pub fn check_arrays<E: Copy + Into<f64>>(
    name: &str,
    arrays: [&[E]; 3],
    iters: usize,
    n: u64,
    dot: f64,
    p: Precision,
) -> Result<(), String> {
    let gold = golden(iters, p);
    let mut failures = Vec::new();
    for ((array_name, g), array) in ["a", "b", "c"].into_iter().zip(gold).zip(arrays) {
        let err = array.iter().map(|&v| (v.into() - g).abs()).sum::<f64>() / array.len() as f64;
        let relative = err / g.abs();
        if relative.is_nan() || relative > 100.0 * p.epsilon {
            failures.push(format!(
                "{array_name}: mean relative error {relative:.3e} (gold {g})"
            ));
        }
    }
    let gold_dot = gold[0] * gold[1] * n as f64;
    let relative = (dot - gold_dot).abs() / gold_dot.abs();
    if relative.is_nan() || relative > p.dot_tolerance {
        failures.push(format!(
            "dot: {dot:e} against gold {gold_dot:e}, relative error {relative:.3e}"
        ));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}", failures.join("; ")))
    }
}

/// The median of `values` (sorted in place; NaN when empty).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let m = values.len() / 2;
    match values.len() {
        0 => f64::NAN,
        len if len % 2 == 1 => values[m],
        _ => (values[m - 1] + values[m]) / 2.0,
    }
}

/// The smallest and largest of `values`.
pub fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}
