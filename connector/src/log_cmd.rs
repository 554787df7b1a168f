//! `cdc log …`: inspect and operate the embedded log from the command line (topics,
//! describe, tail, produce, groups, reset-group, delete-group), like Kafka's console tools and `kcat`.
//!
//! Every command takes `--data-dir DIR` (the log directory) or `--config FILE` (its
//! `[log] dir`). Reading commands (`topics`, `describe`, `tail`, `groups`) open the log
//! read-only: no writer lock, nothing repaired, each partition read up to the durable end
//! in the ledger, so they work while `cdc run` writes the log; `tail --follow` follows that
//! writer through inotify on the log directory (no polling). Writing commands (`produce`,
//! `reset-group`, `delete-group`) take the writer lock and fail with a clear message while
//! another process holds it — except on a sink's group (an external group in the log's
//! `groups.d`), which `reset-group` and `delete-group` change through a read-only open,
//! while `cdc run` runs, and refuse while the sink itself runs (the group's lock).
//!
//! Output of `tail`: one JSON object per line,
//! `{"partition":..,"offset":..,"timestamp":..,"key":..,"value":..,"headers":{..}}`;
//! key, value and header values print as JSON if the bytes are valid JSON, else as a
//! string if valid UTF-8, else as `{"base64":"..."}`; null stays null. Without
//! `--partition`, partitions are printed one after the other (each in offset order), not
//! merged by timestamp; with `--follow`, new records of any partition print as they
//! become durable.
//!
//! With `--config` of a Kafka log (`[log] type = "kafka"`), `topics`, `describe`
//! (partitions, log start and high watermark), `tail` (committed records, the same
//! lines; with `--follow` the partitions are read together, each in offset order), `groups` (the configured sinks' groups) and `reset-group` (Kafka
//! refuses it while the group has members) work on the cluster instead; `produce` and
//! `delete-group` say to use Kafka's own tools.
//!
//! `verify` and `repair` (damaged segments) are in `log_repair`.
//!
//! Exit codes: 0 success, 1 the operation failed (unknown topic, out-of-range offset, log
//! in use, I/O), 2 bad command line or configuration.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cdc_log::{HeaderRef, Log, LogError, LogOptions, NewRecord, RecordView, StartAt, TopicConfig};
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

/// Where the log is: `--data-dir` or `--config`.
#[derive(Debug, Clone, Args)]
pub struct LogTarget {
    /// The log directory.
    #[arg(long, global = true, value_name = "DIR", conflicts_with = "config")]
    pub data_dir: Option<PathBuf>,
    /// A connector configuration file; its `[log] dir` is used.
    #[arg(long, short, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// List topics, one per line: NAME<TAB>PARTITIONS.
    Topics,
    /// Partitions (log start, high watermark, log end, size, segments), consumer groups
    /// with their lag, and the topic config.
    Describe { topic: String },
    /// Print records as JSON lines.
    Tail {
        topic: String,
        /// Only this partition (default: all, one after the other).
        #[arg(long, short)]
        partition: Option<u32>,
        /// Start at this offset (an offset below the log start is an error).
        #[arg(long, conflicts_with_all = ["from_beginning", "since"])]
        offset: Option<u64>,
        /// Start at the log start offset (the default).
        #[arg(long, conflicts_with = "since")]
        from_beginning: bool,
        /// Start at the first record with timestamp >= TIME: RFC 3339
        /// (2026-11-30T10:00:00Z), epoch milliseconds, or relative (10m, 2h, 1d ago).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Keep waiting for new records (Ctrl-C to stop).
        #[arg(long, short)]
        follow: bool,
        /// Stop after N records.
        #[arg(long, value_name = "N")]
        max: Option<u64>,
    },
    /// Append JSON lines from stdin: each line is a record's value, or
    /// {"key":..,"value":..,"headers":{..},"timestamp":..}. A missing topic is created
    /// (with `--config`: with the `[log]` settings, and maintenance — segment.ms roll,
    /// retention, compaction — runs once at the end).
    Produce {
        topic: String,
        /// Partitions of the topic if it has to be created (default: with `--config` its
        /// `[log] partitions`, else 1).
        #[arg(long)]
        partitions: Option<u32>,
        /// Take the key from this field of the value (a JSON object).
        #[arg(long, value_name = "F")]
        key_field: Option<String>,
        /// Flush (make durable) every N records, and at the end.
        #[arg(long, value_name = "N", default_value_t = 1000)]
        flush_every: usize,
    },
    /// Consumer groups: topic, partition, committed offset, high watermark, lag, and
    /// whether retention keeps what the group has not read (PROTECT: true/false for sink
    /// groups, - for groups of the writer's own store).
    Groups,
    /// Move a group's committed offsets (stop its consumers first). A sink's group works
    /// while `cdc run` writes the log; it is refused while the sink runs.
    ResetGroup {
        group: String,
        topic: String,
        /// Only this partition (default: all).
        #[arg(long, short)]
        partition: Option<u32>,
        #[arg(long, value_name = "N", group = "to")]
        to_offset: Option<u64>,
        #[arg(long, value_name = "TIME", group = "to")]
        to_time: Option<String>,
        #[arg(long, group = "to")]
        to_earliest: bool,
        #[arg(long, group = "to")]
        to_latest: bool,
    },
    /// Forget a consumer group (stop its consumer first; refused while a sink runs it).
    DeleteGroup { group: String },
    /// Read every batch of every topic (and of the registry and schema-history logs
    /// beside them), checking CRCs: prints each topic's record count or the damaged file,
    /// byte and offset. Read-only: works while `cdc run` writes. Exit 1 on damage.
    Verify,
    /// Cut damaged segments at their first bad batch (stop `cdc run` first); when records
    /// of the data log were cut, the next `cdc run` takes a new snapshot that brings the
    /// tables back to their current rows. Prints what was cut.
    Repair,
}

/// A failure of a `cdc log` command, with its exit code.
struct Failure(u8, String);

impl From<LogError> for Failure {
    fn from(e: LogError) -> Self {
        let msg = match &e {
            LogError::OffsetOutOfRange { .. } => format!("OFFSET_OUT_OF_RANGE: {e}"),
            LogError::UnknownTopic(t) => format!("UNKNOWN_TOPIC: topic {t:?} does not exist"),
            _ => e.to_string(),
        };
        Failure(1, msg)
    }
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

/// Runs one `cdc log` command.
pub fn run(target: LogTarget, cmd: LogCommand) -> ExitCode {
    match run_inner(target, cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(code)
        }
    }
}

/// The log directory and, with `--config`, the `[log]` section (topic defaults).
fn log_dir(target: &LogTarget) -> Result<(PathBuf, Option<crate::config::LogConfig>), Failure> {
    match (&target.data_dir, &target.config) {
        (Some(d), _) => Ok((d.clone(), None)),
        (None, Some(c)) => crate::config::Config::load(c)
            .map(|c| (c.log.dir.clone(), Some(c.log)))
            .map_err(|e| usage(e.to_string())),
        (None, None) => Err(usage(
            "say where the log is: --data-dir DIR or --config FILE (uses [log] dir)",
        )),
    }
}

/// Opens the log for writing; with a `[log]` section, with its cleaner bound (the
/// maintenance `produce` runs at its end), but no background threads.
fn open_writer(
    dir: &std::path::Path,
    config: Option<&crate::config::LogConfig>,
) -> Result<Log, Failure> {
    let options = LogOptions {
        cleaner_dedupe_bytes: config.map_or(LogOptions::default().cleaner_dedupe_bytes, |c| {
            c.log_options().cleaner_dedupe_bytes
        }),
        ..LogOptions::default()
    };
    Log::open(dir, options).map_err(|e| match e {
        LogError::Locked { pid, .. } => Failure(
            1,
            format!(
                "the log at {} is in use by another process{}: stop it, or use a read-only command (topics, describe, tail, groups)",
                dir.display(),
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            ),
        ),
        e => e.into(),
    })
}

fn run_inner(target: LogTarget, cmd: LogCommand) -> Result<(), Failure> {
    if let (None, Some(c)) = (&target.data_dir, &target.config) {
        let config = crate::config::Config::load(c).map_err(|e| usage(e.to_string()))?;
        if config.log.kind == crate::config::LogKind::Kafka {
            return kafka(&config, cmd);
        }
    }
    let (dir, log_config) = log_dir(&target)?;
    match cmd {
        LogCommand::Topics => {
            let log = Log::open_read_only(&dir)?;
            for t in log.topics() {
                let topic = log.topic(&t)?;
                println!("{t}\t{}", topic.partitions());
            }
            Ok(())
        }
        LogCommand::Describe { topic } => {
            let log = Log::open_read_only(&dir)?;
            describe(&log, &topic)
        }
        LogCommand::Verify => {
            let damage = crate::log_repair::verify(&dir)?;
            if damage.is_empty() {
                return Ok(());
            }
            Err(Failure(
                1,
                format!(
                    "{} damaged part(s) of the log at {}; stop `cdc run` and run `cdc log repair` on it (the next run then snapshots the tables again), or restore the directory from a backup",
                    damage.len(),
                    dir.display()
                ),
            ))
        }
        LogCommand::Repair => {
            let repaired = crate::log_repair::repair(&dir).map_err(|e| match e {
                LogError::Locked { pid, .. } => Failure(
                    1,
                    format!(
                        "the log at {} is in use by another process{}: stop `cdc run` (and `cdc sink`) first",
                        dir.display(),
                        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
                    ),
                ),
                e => e.into(),
            })?;
            let mut any = false;
            for (what, r) in &repaired {
                for cut in &r.cuts {
                    any = true;
                    println!("{what} log: {cut}");
                }
            }
            if !any {
                println!("no damage found; nothing changed");
            } else if repaired
                .iter()
                .any(|(w, r)| *w == "data" && !r.cuts.is_empty())
            {
                println!("the records from each cut on are gone from the log; the stored position is now \"snapshot incomplete\": the next `cdc run` snapshots the tables again (op r) and writes deletes for the rows that are gone, so the log's tables come back equal to the database");
                println!("sinks: the offsets from each cut on will be written again by new records; rebuild each sink's view (clear it, then `cdc log reset-group <group> <topic> --to-earliest`) and check it with `cdc verify --sink`");
            }
            Ok(())
        }
        LogCommand::Groups => {
            let log = Log::open_read_only(&dir)?;
            println!("GROUP\tTOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tPROTECT");
            for g in log.groups() {
                let protect = g.protect.map_or("-".to_string(), |p| p.to_string());
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{protect}",
                    g.group, g.topic, g.partition, g.committed, g.high_watermark, g.lag
                );
            }
            Ok(())
        }
        LogCommand::Tail {
            topic,
            partition,
            offset,
            from_beginning: _,
            since,
            follow,
            max,
        } => {
            let start = match (offset, since) {
                (Some(o), _) => StartAt::Offset(o),
                (None, Some(t)) => {
                    StartAt::Timestamp(parse_time(&t, cdc_log::now_ms()).map_err(usage)?)
                }
                (None, None) => StartAt::Earliest,
            };
            let log = Log::open_read_only(&dir)?;
            tail(&log, &topic, partition, start, follow, max)
        }
        LogCommand::Produce {
            topic,
            partitions,
            key_field,
            flush_every,
        } => {
            let log = open_writer(&dir, log_config.as_ref())?;
            let config = match &log_config {
                Some(c) => {
                    let t = c
                        .topic_config()
                        .map_err(|(k, m)| usage(format!("{k}: {m}")))?;
                    TopicConfig {
                        partitions: partitions.unwrap_or(t.partitions),
                        ..t
                    }
                }
                None => TopicConfig::with_partitions(partitions.unwrap_or(1)),
            };
            produce(
                &log,
                &topic,
                config,
                key_field.as_deref(),
                flush_every.max(1),
            )?;
            if log_config.is_some() {
                // As the running connector's maintenance would: roll, retention, compaction.
                log.run_maintenance()?;
            }
            // A clean stop: nothing stale left for the next open to cut (see `Log::close`);
            // after it the log takes no more writes, maintenance included.
            log.close()?;
            Ok(())
        }
        LogCommand::ResetGroup {
            group,
            topic,
            partition,
            to_offset,
            to_time,
            to_earliest,
            to_latest,
        } => {
            let to = reset_target(to_offset, to_time, to_earliest, to_latest)?;
            // A sink's group lives in its own file (`groups.d`): it is reset through a
            // read-only open, so this works while `cdc run` holds the log.
            let ro = Log::open_read_only(&dir)?;
            if ro.external_group(&group).ok().flatten().is_some() {
                return reset_group(&ro, &group, &topic, partition, to);
            }
            drop(ro);
            let log = open_writer(&dir, log_config.as_ref())?;
            reset_group(&log, &group, &topic, partition, to)
        }
        LogCommand::DeleteGroup { group } => {
            let ro = Log::open_read_only(&dir)?;
            let external = ro.external_group(&group).ok().flatten().is_some();
            let in_writer = ro
                .groups()
                .iter()
                .any(|g| g.group == group && g.protect.is_none());
            let deleted = if in_writer {
                drop(ro);
                open_writer(&dir, log_config.as_ref())?.delete_group(&group)?
            } else if external {
                ro.delete_group(&group)?
            } else {
                false
            };
            if !deleted {
                return Err(Failure(
                    1,
                    format!("consumer group {group:?} does not exist"),
                ));
            }
            println!("deleted group {group}");
            Ok(())
        }
    }
}

/// `cdc log` on a configuration whose log is Kafka: `topics`, `describe` (partitions and
/// their watermarks) and `tail` (committed records, without `--follow`) read the cluster;
/// the rest are the embedded log's and Kafka's own tools do them.
fn kafka(config: &crate::config::Config, cmd: LogCommand) -> Result<(), Failure> {
    let settings = config.log.kafka_settings(&config.name);
    let failed = |e| kafka_failure(&settings.brokers, e);
    let reader = cdc_kafka::KafkaReader::connect(&settings).map_err(failed)?;
    match cmd {
        LogCommand::Topics => {
            for (t, n) in reader.topics().map_err(failed)? {
                println!("{t}\t{n}");
            }
            Ok(())
        }
        LogCommand::Describe { topic } => {
            let Some(parts) = reader.describe(&topic).map_err(failed)? else {
                return Err(Failure(1, format!("unknown topic {topic:?} in Kafka")));
            };
            println!("Topic: {topic}\tPartitions: {}", parts.len());
            println!("PARTITION\tLOG-START\tHIGH-WATERMARK");
            for p in parts {
                println!("{}\t{}\t{}", p.partition, p.low, p.high);
            }
            Ok(())
        }
        LogCommand::Tail {
            topic,
            partition,
            offset,
            from_beginning: _,
            since,
            follow,
            max,
        } => {
            let from = match (offset, since) {
                (Some(o), _) => cdc_kafka::ReadFrom::Offset(o),
                (None, Some(t)) => cdc_kafka::ReadFrom::Timestamp(
                    parse_time(&t, cdc_log::now_ms()).map_err(usage)?,
                ),
                (None, None) => cdc_kafka::ReadFrom::Earliest,
            };
            let Some(parts) = reader.describe(&topic).map_err(failed)? else {
                return Err(Failure(1, format!("unknown topic {topic:?} in Kafka")));
            };
            let parts = partitions_to_read(&topic, parts.len() as u32, partition)?;
            let stdout = std::io::stdout();
            let mut err = None;
            let mut print = |r: &cdc_kafka::ReadRecord<'_>| {
                    let line = line_json(
                        r.partition,
                        r.offset,
                        json!(r.timestamp),
                        r.key,
                        r.value,
                        r.headers.iter().copied(),
                    );
                    // Line by line: a follower sees each record as it comes.
                    let mut out = stdout.lock();
                    match writeln!(out, "{line}").and_then(|()| out.flush()) {
                        Ok(()) => true,
                        Err(e) => {
                            err = Some(e);
                            false
                        }
                    }
                };
            let max = max.unwrap_or(u64::MAX);
            if follow {
                reader.follow(&topic, &parts, from, max, &mut print)
            } else {
                reader.read(&topic, &parts, from, max, &mut print)
            }
            .map_err(failed)?;
            match err {
                Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(Failure(1, format!("writing to stdout: {e}")))
                }
                _ => Ok(()),
            }
        }
        LogCommand::Groups => {
            // The groups this configuration's sinks use, over the topics each reads.
            let topics = reader.topics().map_err(failed)?;
            println!("GROUP\tTOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tPROTECT");
            for spec in &config.sinks {
                let group = spec.group();
                let offsets = cdc_kafka::GroupOffsets::connect(&settings, &group).map_err(failed)?;
                for (topic, n) in topics.iter().filter(|(t, _)| spec.reads_topic(t)) {
                    for p in offsets.describe(topic, *n).map_err(failed)? {
                        let committed = p.committed.map_or("-".to_string(), |c| c.to_string());
                        println!(
                            "{group}\t{topic}\t{}\t{committed}\t{}\t{}\t-",
                            p.partition,
                            p.high,
                            p.lag()
                        );
                    }
                }
            }
            Ok(())
        }
        LogCommand::ResetGroup {
            group,
            topic,
            partition,
            to_offset,
            to_time,
            to_earliest,
            to_latest,
        } => {
            let to = match reset_target(to_offset, to_time, to_earliest, to_latest)? {
                StartAt::Offset(o) => cdc_kafka::ResetTo::Offset(o as i64),
                StartAt::Timestamp(t) => cdc_kafka::ResetTo::Timestamp(t),
                StartAt::Earliest => cdc_kafka::ResetTo::Earliest,
                StartAt::Latest => cdc_kafka::ResetTo::Latest,
            };
            let Some(parts) = reader.describe(&topic).map_err(failed)? else {
                return Err(Failure(1, format!("unknown topic {topic:?} in Kafka")));
            };
            let parts = partitions_to_read(&topic, parts.len() as u32, partition)?;
            let offsets = cdc_kafka::GroupOffsets::connect(&settings, &group).map_err(failed)?;
            for (p, old, new) in offsets.reset(&topic, &parts, to).map_err(failed)? {
                let old = old.map_or("-".to_string(), |o| o.to_string());
                println!("{group}\t{topic}\t{p}\t{old} -> {new}");
            }
            Ok(())
        }
        _ => Err(usage(
            "on a Kafka log `cdc log` has topics, describe, tail, groups and reset-group; produce and delete-group are Kafka's own tools' (kcat, kafka-consumer-groups), and verify and repair are the embedded log's (Kafka checks and replicates its own segments)",
        )),
    }
}

/// A Kafka error of `cdc log`: one that a retry could fix says where it tried.
fn kafka_failure(brokers: &str, e: cdc_kafka::KafkaLogError) -> Failure {
    match e {
        cdc_kafka::KafkaLogError::Transient { what, source } => Failure(
            1,
            format!(
                "Kafka {what} failed: {source}; check [log] brokers ({brokers}) and that the cluster is reachable"
            ),
        ),
        e => Failure(1, e.to_string()),
    }
}

fn describe(log: &Log, topic: &str) -> Result<(), Failure> {
    let d = log.describe(topic)?;
    println!("Topic: {}\tPartitions: {}", d.name, d.partitions.len());
    println!("PARTITION\tLOG-START\tHIGH-WATERMARK\tLOG-END\tSIZE-BYTES\tSEGMENTS");
    for p in &d.partitions {
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}",
            p.partition,
            p.log_start_offset,
            p.high_watermark,
            p.log_end_offset,
            p.size_bytes,
            p.segments
        );
    }
    println!("Consumer groups:");
    if d.groups.is_empty() {
        println!("  (none)");
    } else {
        println!("GROUP\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG");
        for g in &d.groups {
            println!(
                "{}\t{}\t{}\t{}\t{}",
                g.group, g.partition, g.committed, g.high_watermark, g.lag
            );
        }
    }
    println!("Config:");
    for line in d.config.encode().lines() {
        if line.starts_with('#') || line.starts_with("checksum=") || line.is_empty() {
            continue;
        }
        println!("  {line}");
    }
    Ok(())
}

fn tail(
    log: &Log,
    topic: &str,
    partition: Option<u32>,
    start: StartAt,
    follow: bool,
    max: Option<u64>,
) -> Result<(), Failure> {
    let parts = partitions_to_read(topic, log.topic(topic)?.partitions(), partition)?;
    let mut readers = Vec::new();
    for p in parts {
        readers.push(log.reader(topic, p, start)?);
    }
    let mut printed = 0u64;
    let limit = max.unwrap_or(u64::MAX);
    let stdout = std::io::stdout();
    loop {
        let mut any = false;
        for r in &mut readers {
            loop {
                if printed >= limit {
                    return Ok(());
                }
                let p = r.partition();
                let mut out = stdout.lock();
                let mut err = None;
                let n = r.poll_with(1 << 20, |rec| {
                    if printed >= limit || err.is_some() {
                        return;
                    }
                    let line = record_json(p, &rec);
                    if let Err(e) = writeln!(out, "{line}") {
                        err = Some(e);
                    }
                    printed += 1;
                })?;
                if let Some(e) = err.or_else(|| out.flush().err()) {
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        return Ok(());
                    }
                    return Err(Failure(1, format!("writing to stdout: {e}")));
                }
                if n == 0 {
                    break;
                }
                any = true;
            }
        }
        if any {
            continue;
        }
        if !follow {
            return Ok(());
        }
        // Wait for the writer (another process) to change the log, then catch up. The
        // timeout only bounds how long a missed event could delay us; it is not a poll.
        log.wait_for_change(Duration::from_secs(5))?;
        log.refresh()?;
    }
}

/// One `tail` line.
pub fn record_json(partition: u32, rec: &RecordView<'_>) -> Value {
    line_json(
        partition,
        rec.offset,
        json!(rec.timestamp),
        rec.key,
        rec.value,
        rec.headers(),
    )
}

/// A `tail` line of a record of either log.
fn line_json<'a>(
    partition: u32,
    offset: u64,
    timestamp: Value,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
) -> Value {
    let headers: Map<String, Value> = headers
        .into_iter()
        .map(|(k, v)| (k.to_string(), decode_bytes(v)))
        .collect();
    json!({
        "partition": partition,
        "offset": offset,
        "timestamp": timestamp,
        "key": decode_bytes(key),
        "value": decode_bytes(value),
        "headers": headers,
    })
}

/// The partitions `tail` reads: `partition` (checked against the topic's `n`), or all.
fn partitions_to_read(topic: &str, n: u32, partition: Option<u32>) -> Result<Vec<u32>, Failure> {
    match partition {
        Some(p) if p >= n => Err(Failure(
            1,
            format!("topic {topic:?} has {n} partitions; partition {p} does not exist"),
        )),
        Some(p) => Ok(vec![p]),
        None => Ok((0..n).collect()),
    }
}

/// JSON if the bytes are JSON, else a UTF-8 string, else `{"base64": "..."}`.
pub fn decode_bytes(b: Option<&[u8]>) -> Value {
    let Some(b) = b else { return Value::Null };
    if let Ok(v) = serde_json::from_slice::<Value>(b) {
        return v;
    }
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_string()),
        Err(_) => json!({ "base64": base64_encode(b) }),
    }
}

/// The inverse of [`decode_bytes`] for `produce`: a string is stored as its UTF-8 bytes,
/// `{"base64": ".."}` as the decoded bytes, null as null, anything else as its JSON text.
fn encode_value(v: &Value) -> Result<Option<Vec<u8>>, String> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.as_bytes().to_vec())),
        Value::Object(m) if m.len() == 1 && m.get("base64").is_some_and(Value::is_string) => {
            let s = m.get("base64").and_then(Value::as_str).unwrap_or_default();
            base64_decode(s).map(Some)
        }
        other => Ok(Some(other.to_string().into_bytes())),
    }
}

struct Owned {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: i64,
}

fn parse_line(line: &str, key_field: Option<&str>) -> Result<Owned, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let envelope = match &v {
        Value::Object(m) => {
            m.contains_key("value")
                && m.keys()
                    .all(|k| matches!(k.as_str(), "key" | "value" | "headers" | "timestamp"))
        }
        _ => false,
    };
    let now = cdc_log::now_ms();
    if envelope {
        let m = v.as_object().cloned().unwrap_or_default();
        let value = m.get("value").cloned().unwrap_or(Value::Null);
        let key = match (m.get("key"), key_field) {
            (Some(k), _) => encode_value(k)?,
            (None, Some(f)) => value.get(f).map(encode_value).transpose()?.flatten(),
            (None, None) => None,
        };
        let mut headers = Vec::new();
        match m.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(h)) => {
                for (k, v) in h {
                    headers.push((k.clone(), encode_value(v)?));
                }
            }
            Some(_) => return Err("\"headers\" must be an object".into()),
        }
        let timestamp = match m.get("timestamp") {
            None | Some(Value::Null) => now,
            Some(t) => t
                .as_i64()
                .ok_or("\"timestamp\" must be epoch milliseconds")?,
        };
        Ok(Owned {
            key,
            value: encode_value(&value)?,
            headers,
            timestamp,
        })
    } else {
        let key = match key_field {
            Some(f) => match v.get(f) {
                Some(k) => encode_value(k)?,
                None => return Err(format!("the value has no field {f:?} for the key")),
            },
            None => None,
        };
        Ok(Owned {
            key,
            value: encode_value(&v)?,
            headers: Vec::new(),
            timestamp: now,
        })
    }
}

fn produce(
    log: &Log,
    topic: &str,
    config: TopicConfig,
    key_field: Option<&str>,
    flush_every: usize,
) -> Result<(), Failure> {
    let t = log.topic_or_create(topic, config)?;
    let stdin = std::io::stdin();
    let mut pending: Vec<Owned> = Vec::new();
    let mut total = 0u64;
    let append = |pending: &mut Vec<Owned>| -> Result<(), Failure> {
        if pending.is_empty() {
            return Ok(());
        }
        let headers: Vec<Vec<HeaderRef<'_>>> = pending
            .iter()
            .map(|o| {
                o.headers
                    .iter()
                    .map(|(k, v)| HeaderRef {
                        key: k,
                        value: v.as_deref(),
                    })
                    .collect()
            })
            .collect();
        let recs: Vec<NewRecord<'_>> = pending
            .iter()
            .zip(&headers)
            .map(|(o, h)| NewRecord {
                key: o.key.as_deref(),
                value: o.value.as_deref(),
                headers: h,
                timestamp: o.timestamp,
            })
            .collect();
        t.append_keyed(&recs)?;
        log.flush(None)?;
        pending.clear();
        Ok(())
    };
    for (i, line) in stdin.lock().lines().enumerate() {
        let line = line.map_err(|e| Failure(1, format!("reading stdin: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec = parse_line(&line, key_field)
            .map_err(|e| Failure(1, format!("stdin line {}: {e}", i + 1)))?;
        pending.push(rec);
        total += 1;
        if pending.len() >= flush_every {
            append(&mut pending)?;
        }
    }
    append(&mut pending)?;
    println!("appended {total} records to {topic}");
    Ok(())
}

/// `reset-group`'s target: exactly one of its `--to-*` options.
fn reset_target(
    to_offset: Option<u64>,
    to_time: Option<String>,
    to_earliest: bool,
    to_latest: bool,
) -> Result<StartAt, Failure> {
    Ok(match (to_offset, to_time, to_earliest, to_latest) {
        (Some(o), None, false, false) => StartAt::Offset(o),
        (None, Some(t), false, false) => {
            StartAt::Timestamp(parse_time(&t, cdc_log::now_ms()).map_err(usage)?)
        }
        (None, None, true, false) => StartAt::Earliest,
        (None, None, false, true) => StartAt::Latest,
        _ => {
            return Err(usage(
                "say where to: exactly one of --to-offset N, --to-time TIME, --to-earliest, --to-latest",
            ))
        }
    })
}

fn reset_group(
    log: &Log,
    group: &str,
    topic: &str,
    partition: Option<u32>,
    to: StartAt,
) -> Result<(), Failure> {
    let parts = partitions_to_read(topic, log.topic(topic)?.partitions(), partition)?;
    let describe = log.describe(topic)?;
    let mut offsets = Vec::new();
    for p in parts {
        let d = &describe.partitions[p as usize];
        let mut o = log.resolve_offset(topic, p, to)?;
        // Kafka's reset tool clamps an out-of-range target to the valid range.
        if o < d.log_start_offset || o > d.high_watermark {
            let c = o.clamp(d.log_start_offset, d.high_watermark);
            eprintln!(
                "note: {topic}-{p}: offset {o} is outside [{}, {}]; using {c}",
                d.log_start_offset, d.high_watermark
            );
            o = c;
        }
        offsets.push((p, o));
    }
    let old: Vec<Option<u64>> = offsets
        .iter()
        .map(|&(p, _)| log.committed(group, topic, p))
        .collect();
    if log.external_group(group).ok().flatten().is_some() {
        log.reset_external(group, topic, &offsets)?;
    } else {
        log.commit_many(group, topic, &offsets)?;
    }
    for ((p, new), old) in offsets.iter().zip(old) {
        let old = old.map_or("-".to_string(), |o| o.to_string());
        println!("{group}\t{topic}\t{p}\t{old} -> {new}");
    }
    Ok(())
}

/// Parses `--since` / `--to-time`: RFC 3339 (`2026-11-30T10:00:00Z`, `+02:00` offsets,
/// fractional seconds), epoch milliseconds, or a relative age (`30s`, `10m`, `2h`, `1d`,
/// optionally followed by ` ago`) counted back from `now_ms`.
pub fn parse_time(s: &str, now_ms: i64) -> Result<i64, String> {
    let t = s.trim();
    let bad = || {
        format!("{s:?} is not a time: use RFC 3339 (2026-11-30T10:00:00Z), epoch milliseconds, or a relative age (10m, 2h, 1d)")
    };
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<i64>().map_err(|_| bad());
    }
    let rel = t.strip_suffix("ago").unwrap_or(t).trim();
    let unit_at = rel.find(|c: char| !c.is_ascii_digit()).unwrap_or(rel.len());
    if unit_at > 0 && unit_at < rel.len() {
        let n: i64 = rel[..unit_at].parse().map_err(|_| bad())?;
        let mult = match rel[unit_at..].trim() {
            "ms" => Some(1),
            "s" => Some(1000),
            "m" => Some(60_000),
            "h" => Some(3_600_000),
            "d" => Some(86_400_000),
            "w" => Some(7 * 86_400_000),
            _ => None,
        };
        if let Some(mult) = mult {
            return Ok(now_ms.saturating_sub(n.saturating_mul(mult)));
        }
    }
    parse_rfc3339(t).ok_or_else(bad)
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let p = s.get(r)?;
        if !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        p.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &s[start..i.min(start + 3)];
        ms = frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32);
    }
    let offset_min = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        c @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let v = oh * 60 + om;
            if *c == b'-' {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (yy, mm) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_min * 60;
    Some(secs * 1000 + ms)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (c.get(1).copied().unwrap_or(0) as u32) << 8
            | c.get(2).copied().unwrap_or(0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(B64[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let v = B64
            .iter()
            .position(|&x| x == c)
            .ok_or_else(|| format!("invalid base64 character {:?}", c as char))?;
        acc = acc << 6 | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("2026-11-30T10:00:00Z", 0), Ok(1_796_032_800_000));
        assert_eq!(
            parse_time("2026-11-30T12:00:00.250+02:00", 0),
            Ok(1_796_032_800_250)
        );
        assert_eq!(parse_time("1700000000000", 0), Ok(1_700_000_000_000));
        assert_eq!(parse_time("10m", 1_000_000), Ok(400_000));
        assert_eq!(parse_time("1d ago", 86_400_000), Ok(0));
        assert!(parse_time("yesterday", 0).is_err());
        assert!(parse_time("2026-13-30T10:00:00Z", 0).is_err());
    }

    #[test]
    fn base64_round_trip() {
        for n in 0..20u8 {
            let b: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
            assert_eq!(base64_decode(&base64_encode(&b)).unwrap(), b);
        }
        assert_eq!(base64_encode(b"\xff\x00"), "/wA=");
    }

    #[test]
    fn decoding_of_bytes() {
        assert_eq!(decode_bytes(Some(b"{\"a\":1}")), json!({"a": 1}));
        assert_eq!(decode_bytes(Some(b"hello")), json!("hello"));
        assert_eq!(decode_bytes(Some(b"\xff\x00")), json!({"base64": "/wA="}));
        assert_eq!(decode_bytes(None), Value::Null);
    }
}
