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

enum Metric {
    Counter(Counter),
    Gauge(Gauge),
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
            Metric::Gauge(_) => Counter::default(),
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
            Metric::Counter(_) => Gauge::default(),
        }
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
                Metric::Gauge(g) => ("gauge", g.get()),
            };
            if described.insert(base.to_string()) {
                let _ = writeln!(out, "# HELP {base} {help}\n# TYPE {base} {kind}");
            }
            let _ = writeln!(out, "{name} {v}");
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
