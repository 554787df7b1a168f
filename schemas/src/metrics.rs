//! Metrics every part of the connector registers and the admin server's `/metrics`
//! renders: counters, gauges and on-demand collectors, in Prometheus text format 0.0.4.
//!
//! It lives here, beside the data model, because sources, sinks and the pipeline all
//! register figures into one [`Metrics`] the connector hands them, and none of them may
//! depend on the connector. No I/O: rendering writes into a `String`.
//!
//! Invariants: a name (with its optional `{labels}`) names one metric for the life of the
//! registry: asking again returns the same counter or gauge; values are lock-free atomics,
//! so updating one costs no more than an atomic add.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A monotonically increasing counter (`_total`), exported by `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down, exported by `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct Gauge(Arc<AtomicU64>);

impl Gauge {
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds (seconds) of [`Histogram`] buckets: 1 ms to 1 min, the range of a
/// commit-to-durable latency from a quiet group commit to a connector catching up.
pub const LATENCY_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A latency histogram in seconds (`_bucket{le}`, `_sum`, `_count`) over
/// [`LATENCY_BUCKETS`]. Observations are in microseconds; lock-free.
#[derive(Clone, Debug)]
pub struct Histogram(Arc<HistogramCells>);

#[derive(Debug)]
struct HistogramCells {
    /// Per bucket, not cumulative; the last cell is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram(Arc::new(HistogramCells {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }))
    }
}

impl Histogram {
    pub fn observe_micros(&self, us: u64) {
        let secs = us as f64 / 1e6;
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.0.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.0.sum_micros.fetch_add(us, Ordering::Relaxed);
        self.0.count.fetch_add(1, Ordering::Relaxed);
    }
    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }
    /// The smallest bucket bound below which at least `q` (0..=1) of the observations
    /// fall (`None` with no observation; `f64::INFINITY` past the last bound).
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let want = (q * n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.0.buckets.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= want {
                return Some(LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }
    fn render(&self, out: &mut String, name: &str) {
        let (base, labels) = match name.split_once('{') {
            Some((b, l)) => (b, l.trim_end_matches('}')),
            None => (name, ""),
        };
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, c) in self.0.buckets.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = LATENCY_BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "{base}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(
            out,
            "{base}_sum{braces} {}\n{base}_count{braces} {}",
            self.0.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
            self.0.count.load(Ordering::Relaxed)
        );
    }
}

enum Metric {
    Counter(Counter),
    Gauge(Gauge),
    /// A gauge kept in a smaller unit (e.g. milliseconds), exported divided by the scale
    /// (in seconds, as Prometheus wants).
    Scaled(Gauge, u64),
    Histogram(Histogram),
}

type Collector = Box<dyn Fn(&mut String) + Send + Sync>;

/// The metrics `/metrics` exports besides the built-in ones. Cheap to clone; register
/// once at start-up, update from anywhere.
#[derive(Clone, Default)]
pub struct Metrics {
    // name (with optional `{labels}`) → (help, metric)
    metrics: Arc<Mutex<BTreeMap<String, (String, Metric)>>>,
    collectors: Arc<Mutex<Vec<Collector>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// A counter named `name` (e.g. `cdc_records_total` or
    /// `cdc_records_total{table="public.t"}`); the same name returns the same counter.
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        let e = m
            .entry(name.to_string())
            .or_insert_with(|| (help.to_string(), Metric::Counter(Counter::default())));
        match &e.1 {
            Metric::Counter(c) => c.clone(),
            _ => Counter::default(),
        }
    }

    /// A gauge named `name`; the same name returns the same gauge.
    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        let e = m
            .entry(name.to_string())
            .or_insert_with(|| (help.to_string(), Metric::Gauge(Gauge::default())));
        match &e.1 {
            Metric::Gauge(g) => g.clone(),
            _ => Gauge::default(),
        }
    }

    /// A gauge set in units of `1/scale` of what `name` exports: `gauge_scaled(
    /// "x_seconds", …, 1000)` is set in milliseconds and exported in seconds.
    pub fn gauge_scaled(&self, name: &str, help: &str, scale: u64) -> Gauge {
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        let e = m.entry(name.to_string()).or_insert_with(|| {
            (
                help.to_string(),
                Metric::Scaled(Gauge::default(), scale.max(1)),
            )
        });
        match &e.1 {
            Metric::Scaled(g, _) | Metric::Gauge(g) => g.clone(),
            _ => Gauge::default(),
        }
    }

    /// A latency histogram named `name` (seconds); the same name returns the same one.
    pub fn histogram(&self, name: &str, help: &str) -> Histogram {
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        let e = m
            .entry(name.to_string())
            .or_insert_with(|| (help.to_string(), Metric::Histogram(Histogram::default())));
        match &e.1 {
            Metric::Histogram(h) => h.clone(),
            _ => Histogram::default(),
        }
    }

    /// The value of counter or gauge `name` (with its labels), if registered.
    pub fn value(&self, name: &str) -> Option<u64> {
        let m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        match &m.get(name)?.1 {
            Metric::Counter(c) => Some(c.get()),
            Metric::Gauge(g) | Metric::Scaled(g, _) => Some(g.get()),
            Metric::Histogram(h) => Some(h.count()),
        }
    }

    /// Every counter and gauge whose name starts with `prefix`, with its value.
    pub fn values_with_prefix(&self, prefix: &str) -> Vec<(String, u64)> {
        let m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        m.range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter_map(|(k, (_, v))| match v {
                Metric::Counter(c) => Some((k.clone(), c.get())),
                Metric::Gauge(g) | Metric::Scaled(g, _) => Some((k.clone(), g.get())),
                Metric::Histogram(_) => None,
            })
            .collect()
    }

    /// A function that appends Prometheus text lines (with their `# HELP`/`# TYPE`) on
    /// every scrape, for values computed on demand.
    pub fn collector(&self, f: impl Fn(&mut String) + Send + Sync + 'static) {
        self.collectors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(f));
    }

    /// Appends every metric and collector in Prometheus text format 0.0.4.
    pub fn render(&self, out: &mut String) {
        let m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        let mut described = std::collections::HashSet::new();
        for (name, (help, metric)) in m.iter() {
            let base = name.split('{').next().unwrap_or(name);
            let (kind, v) = match metric {
                Metric::Counter(c) => ("counter", c.get()),
                Metric::Gauge(g) | Metric::Scaled(g, _) => ("gauge", g.get()),
                Metric::Histogram(_) => ("histogram", 0),
            };
            if described.insert(base.to_string()) {
                let _ = writeln!(out, "# HELP {base} {help}\n# TYPE {base} {kind}");
            }
            match metric {
                Metric::Histogram(h) => h.render(out, name),
                Metric::Scaled(g, scale) => {
                    let _ = writeln!(out, "{name} {}", g.get() as f64 / *scale as f64);
                }
                _ => {
                    let _ = writeln!(out, "{name} {v}");
                }
            }
        }
        drop(m);
        for c in self
            .collectors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            c(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_renders_cumulative_buckets_sum_and_count() {
        let m = Metrics::default();
        let h = m.histogram("cdc_x_seconds", "X.");
        h.observe_micros(500); // 0.5 ms
        h.observe_micros(7_000); // 7 ms
        h.observe_micros(120_000_000); // 2 min: +Inf
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("# TYPE cdc_x_seconds histogram"), "{out}");
        assert!(
            out.contains("cdc_x_seconds_bucket{le=\"0.001\"} 1"),
            "{out}"
        );
        assert!(out.contains("cdc_x_seconds_bucket{le=\"0.01\"} 2"), "{out}");
        assert!(out.contains("cdc_x_seconds_bucket{le=\"60\"} 2"), "{out}");
        assert!(out.contains("cdc_x_seconds_bucket{le=\"+Inf\"} 3"), "{out}");
        assert!(out.contains("cdc_x_seconds_count 3"), "{out}");
        assert!(out.contains("cdc_x_seconds_sum 120.0075"), "{out}");
        assert_eq!(h.quantile_bound(0.5), Some(0.01));
        assert_eq!(h.quantile_bound(1.0), Some(f64::INFINITY));
    }

    #[test]
    fn labelled_histogram_keeps_its_labels() {
        let m = Metrics::default();
        m.histogram("cdc_y_seconds{sink=\"a\"}", "Y.")
            .observe_micros(1);
        let mut out = String::new();
        m.render(&mut out);
        assert!(
            out.contains("cdc_y_seconds_bucket{sink=\"a\",le=\"0.001\"} 1"),
            "{out}"
        );
        assert!(out.contains("cdc_y_seconds_count{sink=\"a\"} 1"), "{out}");
    }
}
