//! `cdc verify --config FILE --table T (--log | --sink NAME)`: whether a view equals the
//! source table — the table rebuilt from the log, or a sink's target — and which keys
//! differ, with both sides.
//!
//! How: one pass over the source table in key order, in chunks of `--chunk-rows` rows
//! inside one consistent read ([`source`]), each row turned into its record's key and
//! after-image (the connector's encoder settings; for a sink, its column selection and
//! renames too), compared by hash with the view's row of that key ([`log_view`]: a map of
//! hashes rebuilt from the log; [`sink_view`]: the target, asked per chunk). Then the
//! view's rows the source lacks: what is left of the log's map, or, when the sink's count
//! says there are more rows than matched, a scan of the target.
//!
//! A busy table must not give false alarms: a key can differ only because the view has
//! not applied a change yet. So each differing key is re-checked ([`recheck`]): a new
//! consistent read of the source's rows of those keys, at a position `P` (Postgres:
//! `pg_current_wal_lsn()`), then a wait (at most `--wait-secs` in all) until the log's
//! durable checkpoint reaches `P` and, for a sink, until its consumer group committed the
//! high watermarks of that moment; then the view's rows of those keys again. Up to three
//! rounds while keys still differ; what differs after that is reported.
//!
//! Memory (`--memory-mb`, plus a fixed overhead): one chunk of rows, at most
//! `--chunk-rows` and sized to a quarter of the budget (at most 8 MiB) by the size of the
//! rows before it; the log view's ~40 bytes per key while that fits the budget — past it
//! the log's changes and the source's rows spill to bucket files and are compared bucket
//! by bucket ([`spill`]) — or, for a sink, 8 bytes per key of ids seen while they fit —
//! past it sorted runs on disk, merged with the target's scan ([`seen`]); and at most
//! `--max-report` differences kept in full.
//!
//! Exit codes: 0 equal, 1 different (or the verification failed), 2 usage or
//! configuration errors (including a table that is not captured, has no key, or does not
//! exist).

pub mod compare;
pub mod log_source;
pub mod log_view;
pub mod recheck;
pub mod seen;
pub mod sink_view;
pub mod source;
pub mod spill;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_schemas::registry::SchemaRegistry;
use cdc_schemas::TableId;
use cdc_sinks::view::ColumnMap;

use crate::config::Config;
use compare::{hash_row, Difference, Differences};
use log_view::{LogView, SpillPlan};
use seen::SeenIds;
use sink_view::SinkView;
use source::SourceSide;
use spill::Budget;

/// The command line of `cdc verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The configuration file (TOML): the connector's.
    #[arg(long, short, env = "CDC_CONFIG")]
    pub config: PathBuf,
    /// The table, `schema.table` (MySQL: `database.table`).
    #[arg(long)]
    pub table: String,
    /// Compare with the `[[sink]]` of this name's target.
    #[arg(long, conflicts_with = "log")]
    pub sink: Option<String>,
    /// Compare with the table rebuilt from the log (embedded, or Kafka's committed
    /// records).
    #[arg(long)]
    pub log: bool,
    /// Rows read from the source per chunk.
    #[arg(long, default_value_t = 10_000)]
    pub chunk_rows: usize,
    /// How long, in all, differing keys may wait for the view to catch up with the
    /// source before they are reported (0: report at once, without re-checking).
    #[arg(long, default_value_t = 30)]
    pub wait_secs: u64,
    /// Differences kept, re-checked and printed; more are only counted.
    #[arg(long, default_value_t = 1000)]
    pub max_report: usize,
    /// Memory for the comparison, in MiB: the table rebuilt from the log (--log) or the
    /// ids of the source's rows (--sink), and the chunks of rows read. Past it, they spill
    /// to files on disk (--log: the rebuild and the source's rows, compared bucket by
    /// bucket; --sink: the ids and the target's scan, merged in order).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub memory_mb: u32,
    /// Where the spill's temporary directory goes (default: beside the log directory,
    /// else the system's temporary directory). Removed at the end.
    #[arg(long)]
    pub spill_dir: Option<PathBuf>,
    /// Spill once the rebuilt map (--log) or the ids in memory (--sink) hold this many
    /// keys (tests: forces spilling on a small table).
    #[arg(long, hide = true)]
    pub spill_keys: Option<usize>,
}

/// Why a verification did not come to a verdict.
#[derive(Debug)]
pub enum VerifyError {
    /// The command line or the configuration (exit 2).
    Usage(String),
    /// Reading a side failed (exit 1).
    Failed(String),
}

impl VerifyError {
    /// A source's error: a definite one (no such table, no key, refused login) is the
    /// configuration's; a transient one is a failure.
    pub fn from_source(e: cdc_schemas::failure::Failure) -> VerifyError {
        if e.is_transient() {
            VerifyError::Failed(e.to_string())
        } else {
            VerifyError::Usage(e.to_string())
        }
    }
}

/// Runs `cdc verify`.
pub async fn run(args: VerifyArgs) -> ExitCode {
    match verify(&args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(VerifyError::Usage(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(2)
        }
        Err(VerifyError::Failed(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(1)
        }
    }
}

/// The view compared with.
pub enum View {
    Log(LogView),
    Sink(SinkView),
}

/// What the first pass found.
struct PassOne {
    source_rows: u64,
    view_rows: u64,
}

async fn verify(args: &VerifyArgs) -> Result<bool, VerifyError> {
    let config = Config::load(&args.config).map_err(|e| VerifyError::Usage(e.to_string()))?;
    if args.log == args.sink.is_some() {
        return Err(VerifyError::Usage(
            "say what to compare with: --log (the table rebuilt from the log) or --sink NAME"
                .into(),
        ));
    }
    if args.chunk_rows == 0 || args.max_report == 0 {
        return Err(VerifyError::Usage(
            "--chunk-rows and --max-report must be at least 1".into(),
        ));
    }
    let table = parse_table(&config, &args.table)?;
    let started = Instant::now();
    let mut source = SourceSide::open(&config, &table).await?;
    let log = std::sync::Arc::new(tokio::task::block_in_place(|| {
        log_source::VerifyLog::open(&config)
    })?);
    let mut view = match &args.sink {
        None => None,
        Some(name) => {
            let Some(spec) = config.sinks.iter().find(|s| s.name() == name) else {
                let names: Vec<&str> = config.sinks.iter().map(|s| s.name()).collect();
                return Err(VerifyError::Usage(format!(
                    "the configuration has no [[sink]] named {name:?} (it has: {})",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                )));
            };
            if !spec.table_filter().includes(&table) || !spec.reads_topic(source.topic()) {
                return Err(VerifyError::Usage(format!(
                    "sink {name:?} does not apply {table} (its tables / topics leave it out)"
                )));
            }
            let c = &spec.common;
            let columns = ColumnMap::new(&c.include_columns, &c.exclude_columns, &c.rename_columns)
                .map_err(|(k, m)| VerifyError::Usage(format!("{}.{k}: {m}", spec.path)))?;
            source.set_columns(columns);
            Some(View::Sink(
                SinkView::open(spec, &table, source.key_columns()).await?,
            ))
        }
    };
    let mut diffs = Differences::new(args.max_report);
    let plan = spill_plan(args, &config);
    // A sink's chunk holds the target's rows of its keys beside the source's: half each.
    source.set_chunk_memory(match view {
        Some(View::Sink(_)) => plan.budget.chunk_bytes() / 2,
        _ => plan.budget.chunk_bytes(),
    });
    let mark = source.begin().await?;
    tracing::info!(table = %table, position = %mark, chunk_rows = args.chunk_rows, "verify: first pass");
    let counts = match view.as_mut() {
        Some(View::Sink(s)) => {
            let mut seen = SeenIds::new(plan.budget, plan.dirs.clone());
            sink_pass(&mut source, s, args.chunk_rows, &mut seen, &mut diffs).await?
        }
        _ => {
            let mut lv =
                LogView::build(&log, source.topic(), &table, registry(&config), &plan).await?;
            let pass = log_pass(&mut source, &mut lv, args.chunk_rows, &mut diffs).await?;
            // The source's consistent read ends before the (spilled) comparison.
            source.end().await?;
            let counts = log_finish(&mut lv, pass, &mut diffs).await?;
            view = Some(View::Log(lv));
            counts
        }
    };
    if args.sink.is_some() {
        source.end().await?;
    }
    let mut view = view.expect("set above");
    tracing::info!(table = %table, source_rows = counts.source_rows, view_rows = counts.view_rows, differences = diffs.total(), "verify: first pass done");
    if !diffs.kept.is_empty() {
        let deadline = Instant::now() + Duration::from_secs(args.wait_secs);
        recheck::recheck(&mut source, &mut view, &log, &mut diffs, deadline).await?;
    }
    let what = match &args.sink {
        Some(n) => format!("sink {n}"),
        None => format!("the log (topic {})", source.topic()),
    };
    for d in &diffs.kept {
        print!("{}", d.render());
    }
    if diffs.more > 0 {
        println!(
            "... and {} more differences, not listed and not re-checked (raise --max-report)",
            diffs.more
        );
    }
    let secs = started.elapsed().as_secs_f64();
    if diffs.is_empty() {
        println!(
            "{table}: equal to {what}: {} rows, in {secs:.1} s",
            counts.source_rows
        );
        Ok(true)
    } else {
        println!(
            "{table}: differs from {what}: {} rows in the source, {} in the view; {} (checked in {secs:.1} s)",
            counts.source_rows,
            counts.view_rows,
            match diffs.total() {
                1 => "1 key differs".to_string(),
                n => format!("{n} keys differ"),
            }
        );
        Ok(false)
    }
}

/// `schema.table`; a name without a dot is in `public` (Postgres) — MySQL needs the
/// database. It must be a table the connector captures.
fn parse_table(config: &Config, name: &str) -> Result<TableId, VerifyError> {
    let table = match name.split_once('.') {
        Some((s, t)) if !s.is_empty() && !t.is_empty() => TableId::new(s, t),
        None if config.source.kind() == cdc_sources::SourceKind::Postgres => {
            TableId::new("public", name)
        }
        _ => {
            return Err(VerifyError::Usage(format!(
                "--table {name:?}: write schema.table (MySQL: database.table)"
            )))
        }
    };
    if !config.source.common.filter().includes(&table) {
        return Err(VerifyError::Usage(format!(
            "{table} is not captured by this configuration (source.tables / exclude_tables)"
        )));
    }
    Ok(table)
}

/// The registry Avro records' schemas are read from: the configured remote one, or the
/// embedded one through the admin address of the `cdc run` that writes the log (as `cdc
/// sink` does).
fn registry(config: &Config) -> Option<Arc<dyn SchemaRegistry>> {
    let options = config.registry.remote_options().unwrap_or_else(|| {
        cdc_registry::remote::RemoteOptions::new(format!("http://{}", config.admin.listen))
    });
    cdc_registry::remote::RemoteRegistry::new(options)
        .ok()
        .map(|r| Arc::new(r) as Arc<dyn SchemaRegistry>)
}

/// Where the comparison spills, and past what.
fn spill_plan(args: &VerifyArgs, config: &Config) -> SpillPlan {
    let mut budget = Budget::from_mb(args.memory_mb as usize);
    if let Some(n) = args.spill_keys {
        budget = budget.with_keys(n);
    }
    let dirs = match &args.spill_dir {
        Some(d) => vec![d.clone()],
        None => {
            // Beside the log (a disk sized for data; the system's temporary directory may
            // be memory), else the system's.
            let parent = match config.log.dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            vec![parent, std::env::temp_dir()]
        }
    };
    SpillPlan { budget, dirs }
}

/// What the first pass against the log leaves to [`log_finish`].
struct LogPass {
    source_rows: u64,
    /// Rows of the rebuilt table (in memory: before the pass took keys out of it).
    view_rows: u64,
    /// Keys whose view row is to be read back for the report.
    unread: HashSet<u64>,
}

/// The first pass against the log: each source row's key taken out of the rebuilt table
/// and its row hash compared — or, spilled, the row written to its bucket.
async fn log_pass(
    source: &mut SourceSide,
    lv: &mut LogView,
    chunk_rows: usize,
    diffs: &mut Differences,
) -> Result<LogPass, VerifyError> {
    let view_rows = lv.rows();
    let mut source_rows = 0u64;
    let mut unread: HashSet<u64> = HashSet::new();
    loop {
        let chunk = source.next_chunk(chunk_rows).await?;
        if chunk.is_empty() {
            break;
        }
        for e in chunk {
            source_rows += 1;
            if let Some(s) = lv.spill_mut() {
                s.source_row(hash_row(&e.key), hash_row(&e.after), &e.key, &e.after)?;
                continue;
            }
            match lv.take(&e.key) {
                Some(h) if h == hash_row(&e.after) => {}
                Some(_) => {
                    if diffs.kept.len() < diffs.cap() {
                        unread.insert(hash_row(&e.key));
                    }
                    diffs.push(Difference::new(e.key, Some(e.after), None));
                }
                None => diffs.push(Difference::new(e.key, Some(e.after), None)),
            }
        }
    }
    Ok(LogPass {
        source_rows,
        view_rows,
        unread,
    })
}

/// After the source's read: (spilled) the comparison bucket by bucket, giving the same
/// differences in the same order as in memory — the source's first in source order;
/// then the rows the source lacks (those of smallest key hash first, as many as there is
/// room for), and the view's rows of the keys that differ, read back from the log.
async fn log_finish(
    lv: &mut LogView,
    pass: LogPass,
    diffs: &mut Differences,
) -> Result<PassOne, VerifyError> {
    let mut unread = pass.unread;
    let (view_rows, extra, extras) = match lv.take_spill() {
        None => {
            let (extra, n) = lv.extras(diffs.cap());
            (pass.view_rows, extra, n)
        }
        Some(mut s) => {
            let found = s.compare(diffs.cap())?;
            tracing::info!(
                buckets = found.buckets,
                view_rows = found.view_rows,
                "verify: compared the spilled buckets"
            );
            diffs.more += found.source.dropped();
            for (at, h, in_view) in found.source.into_sorted() {
                let (key, after) = s.row_at(at)?;
                if in_view {
                    unread.insert(h);
                }
                diffs.push(Difference::new(key, Some(after), None));
            }
            let n = found.extras.pushed();
            (found.view_rows, found.extras.into_sorted(), n)
        }
    };
    let room = diffs.cap().saturating_sub(diffs.kept.len());
    let listed: Vec<u64> = extra.into_iter().take(room).collect();
    diffs.more += extras - listed.len() as u64;
    let mut wanted = unread.clone();
    wanted.extend(listed.iter().copied());
    if !wanted.is_empty() {
        let rows = lv.rows_of(&wanted, None).await?;
        for d in diffs.kept.iter_mut() {
            let h = d.key.as_ref().map(hash_row).unwrap_or_default();
            if unread.contains(&h) {
                d.view = rows.get(&h).and_then(|(_, r)| r.clone());
            }
        }
        for h in &listed {
            if let Some((key, row)) = rows.get(h) {
                diffs.push(Difference::new(key.clone(), None, row.clone()));
            }
        }
    }
    Ok(PassOne {
        source_rows: pass.source_rows,
        view_rows,
    })
}

/// The first pass against a sink: each chunk's keys asked of the target; then, when the
/// target holds more rows than matched, a scan for the ones the source lacks.
async fn sink_pass(
    source: &mut SourceSide,
    sv: &mut SinkView,
    chunk_rows: usize,
    seen: &mut SeenIds,
    diffs: &mut Differences,
) -> Result<PassOne, VerifyError> {
    let mut source_rows = 0u64;
    let mut present = 0u64;
    loop {
        let chunk = source.next_chunk(chunk_rows).await?;
        if chunk.is_empty() {
            break;
        }
        let keys: Vec<_> = chunk.iter().map(|e| e.key.clone()).collect();
        let rows = sv.get(&keys).await?;
        for (mut e, v) in chunk.into_iter().zip(rows) {
            source_rows += 1;
            seen.insert(sv.id_hash(&e.key))?;
            e.after = sv.normalize(&e.key, e.after);
            match v {
                Some(v) => {
                    present += 1;
                    if hash_row(&v) != hash_row(&e.after) {
                        diffs.push(Difference::new(e.key, Some(e.after), Some(v)));
                    }
                }
                None => diffs.push(Difference::new(e.key, Some(e.after), None)),
            }
        }
    }
    seen.finish()?;
    let view_rows = sv.count().await?;
    if view_rows > present {
        sv.extras(seen, diffs).await?;
    }
    Ok(PassOne {
        source_rows,
        view_rows,
    })
}
