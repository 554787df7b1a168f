//! Process and directory lifecycle shared by every server kind: the spawner thread, the
//! per-instance temporary directories, stopping, the at-exit cleanup and the sweep of
//! leftovers from dead test processes.
//!
//! Invariants:
//! - Every server (and every helper such as `initdb`) is forked by the one long-lived
//!   spawner thread, with `PR_SET_PDEATHSIG(SIGKILL)` and its own process group. The
//!   kernel sends the parent-death signal when the *thread* that forked the child exits,
//!   and libtest runs every test on a thread that ends with the test; the spawner thread
//!   ends only with the process, so a server dies exactly when its test process dies.
//! - Every directory this module creates is named `cdc-harness-<pid>.<starttime>-…`, where
//!   `<pid>.<starttime>` identifies the owning process unambiguously (pids get reused,
//!   pid + kernel start time do not). A directory whose owner is gone is garbage.
//! - Every live instance is in [`REGISTRY`] until it has been shut down; the at-exit hook
//!   shuts down whatever is still there (the shared servers, which live in statics that
//!   are never dropped).

use std::ffi::CString;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{lchown, symlink, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, Once, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// Prefix of every directory the harness creates under [`instance_root`].
const DIR_PREFIX: &str = "cdc-harness-";

/// How long a graceful stop may take before the process group gets SIGKILL.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Executable names (`/proc/<pid>/comm`) of the servers the harness starts. The sweep only
/// ever kills processes with one of these names.
const SERVER_COMMS: &[&str] = &[
    "postgres",
    "postmaster",
    "mariadbd",
    "mysqld",
    "redis-server",
    // /proc/<pid>/comm holds 15 bytes: typesense-server-<version>, noida-db-<version>.
    "typesense-serve",
    "noida-db-0.2.3",
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test must not make cleanup impossible for everyone else.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------
// Directories

/// Where instance directories are created: `$CDC_TEST_TMP`, else the system temp dir.
/// When the harness runs as root, the servers run as `postgres`/`mysql` and must be able
/// to traverse this path (`/tmp` is fine; `/root/...` is not).
pub fn instance_root() -> PathBuf {
    match std::env::var_os("CDC_TEST_TMP") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => std::env::temp_dir(),
    }
}

/// Kernel start time of a process (field 22 of `/proc/<pid>/stat`, in clock ticks since
/// boot). Together with the pid it names one process for the lifetime of the machine.
fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    // `rest` starts at field 3 (state); the start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Process state letter from `/proc/<pid>/stat`, or None when there is no such process.
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].chars().next()
}

/// True if `pid` names a process that is running (zombies and dead processes are not:
/// an orphaned zombie waits for a reaper that a container's init may never be).
pub fn pid_is_running(pid: u32) -> bool {
    !matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

fn owner_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let pid = std::process::id();
        format!("{pid}.{}", proc_start_time(pid).unwrap_or(0))
    })
}

static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

/// Creates a fresh directory `cdc-harness-<owner>-<kind><n>` under [`instance_root`],
/// owned by `owner` (uid, gid) when given, mode 0755 so the server user can reach files
/// the harness puts there.
pub(crate) fn create_owned_dir(kind: &str, owner: Option<(u32, u32)>) -> Result<PathBuf> {
    let root = instance_root();
    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let n = DIR_SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("{DIR_PREFIX}{}-{kind}{n}", owner_tag()));
    fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    if let Some((uid, gid)) = owner {
        lchown(&dir, Some(uid), Some(gid))
            .with_context(|| format!("chown {} to {uid}:{gid}", dir.display()))?;
    }
    Ok(dir)
}

/// Recursively copies `from` to `to` (which must not exist) keeping modes, and gives every
/// copied entry to `owner` when set. Used to clone an initialised data directory: much
/// faster than running `initdb` / `mariadb-install-db` again.
pub(crate) fn copy_tree(from: &Path, to: &Path, owner: Option<(u32, u32)>) -> Result<()> {
    let meta = fs::symlink_metadata(from)?;
    let ft = meta.file_type();
    if ft.is_dir() {
        fs::create_dir(to).with_context(|| format!("creating {}", to.display()))?;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()), owner)?;
        }
        fs::set_permissions(to, meta.permissions())?;
    } else if ft.is_symlink() {
        symlink(fs::read_link(from)?, to)?;
    } else if ft.is_file() {
        fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    } else {
        // Sockets, fifos: a template never needs them.
        return Ok(());
    }
    if let Some((uid, gid)) = owner {
        lchown(to, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Last `max` bytes of a log file, for error messages.
pub(crate) fn log_tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = fs::File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    format!(
        "--- last {} bytes of {} ---\n{}",
        buf.len(),
        path.display(),
        String::from_utf8_lossy(&buf)
    )
}

/// Looks up an OS user: (uid, gid).
pub(crate) fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let cname = CString::new(name).ok()?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; getpwnam_r is the thread-safe variant.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    Some((pwd.pw_uid, pwd.pw_gid))
}

/// The OS user a server must run as: None when the harness is not root (the server then
/// runs as the current user), the named user when it is (the servers refuse root, or
/// would `setuid` themselves, which would clear the parent-death signal).
pub(crate) fn server_user(name: &str, why: &str) -> Result<Option<(u32, u32)>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    lookup_user(name).map(Some).ok_or_else(|| {
        anyhow!(
            "the harness runs as root, so it runs {why} as the OS user `{name}`, which does \
             not exist (the Debian package creates it; or run the tests as a non-root user)"
        )
    })
}

/// Finds an executable: the first of `candidates` that exists, else `name` on `$PATH`.
pub(crate) fn find_binary(name: &str, candidates: &[&str]) -> Result<PathBuf> {
    for c in candidates {
        let p = Path::new(c);
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    bail!("`{name}` not found (looked at {candidates:?} and $PATH); is the package installed?")
}

// ---------------------------------------------------------------------------------------
// Ports

/// A currently free loopback port. The kernel picks it (bind to port 0); it is released
/// before the server binds it, so another process may take it in between: callers retry
/// the start on "address already in use".
pub(crate) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).context("binding 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// True when a server log says that its port was taken.
pub(crate) fn is_port_clash(log: &str) -> bool {
    log.contains("Address already in use")
        || log.contains("address already in use")
        // tansu's panic on a taken port.
        || log.contains("Address in use")
}

// ---------------------------------------------------------------------------------------
// The spawner thread

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("cdc-harness-spawner".into())
            .spawn(move || {
                // Lives until the process exits: the sender is in a static, so `recv`
                // never reports a disconnect.
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the harness spawner thread");
        tx
    })
}

/// Spawns `cmd` from the spawner thread, in a new process group, with
/// `PR_SET_PDEATHSIG(SIGKILL)`.
pub(crate) fn spawn(mut cmd: Command) -> Result<Child> {
    let parent = std::process::id();
    cmd.process_group(0);
    // SAFETY: the closure only makes async-signal-safe system calls (prctl, getppid).
    // std runs pre_exec closures after setuid/setgid, which matters: changing credentials
    // clears the parent-death signal, so it must be set afterwards.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect: then nobody would ever
            // signal us. Give up instead of leaking a server.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other("harness process died during spawn"));
            }
            Ok(())
        });
    }
    let program = cmd.get_program().to_string_lossy().into_owned();
    let (tx, rx) = mpsc::channel();
    spawner()
        .send((cmd, tx))
        .map_err(|_| anyhow!("harness spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| anyhow!("harness spawner thread is gone"))?
        .with_context(|| format!("spawning {program}"))
}

/// Runs a helper command (initdb, install-db) to completion with its output in `log`;
/// on failure the error carries the log's tail.
pub(crate) fn run_to_completion(cmd: Command, log: &Path, what: &str) -> Result<()> {
    let mut cmd = cmd;
    let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    let mut child = spawn(cmd)?;
    let status = child.wait()?;
    if !status.success() {
        bail!("{what} failed ({status})\n{}", log_tail(log, 4000));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Instances

/// One server instance: its directory and (while running) its process.
pub(crate) struct Instance {
    dir: PathBuf,
    child: Mutex<Option<Child>>,
    /// The signal that asks this server for a clean, quick shutdown.
    stop_signal: libc::c_int,
    shut_down: Once,
}

static REGISTRY: Mutex<Vec<Arc<Instance>>> = Mutex::new(Vec::new());
static TEMPLATES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

impl Instance {
    /// Creates the instance directory and registers the instance for at-exit cleanup.
    pub(crate) fn create(
        kind: &str,
        owner: Option<(u32, u32)>,
        stop_signal: libc::c_int,
    ) -> Result<Arc<Instance>> {
        prepare();
        let dir = create_owned_dir(kind, owner)?;
        let inst = Arc::new(Instance {
            dir,
            child: Mutex::new(None),
            stop_signal,
            shut_down: Once::new(),
        });
        lock(&REGISTRY).push(inst.clone());
        Ok(inst)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn set_child(&self, child: Child) {
        *lock(&self.child) = Some(child);
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        lock(&self.child).as_ref().map(|c| c.id())
    }

    /// "running (pid N)", "exited: …" or "stopped", for error messages.
    pub(crate) fn describe_state(&self) -> String {
        let mut g = lock(&self.child);
        match g.as_mut() {
            None => "stopped".into(),
            Some(c) => match c.try_wait() {
                Ok(Some(status)) => format!("pid {} {}", c.id(), describe_exit(status)),
                _ => format!("running, pid {}", c.id()),
            },
        }
    }

    /// Returns the exit status if the process has exited (and reaps it).
    pub(crate) fn try_exited(&self) -> Option<std::process::ExitStatus> {
        let mut g = lock(&self.child);
        let status = g.as_mut()?.try_wait().ok().flatten();
        if status.is_some() {
            *g = None;
        }
        status
    }

    /// Stops the process (`sig`, or the instance's clean-stop signal), waits up to
    /// `timeout`, then SIGKILLs its process group. Idempotent.
    pub(crate) fn stop_process(&self, sig: Option<libc::c_int>, timeout: Duration) -> Result<()> {
        let mut g = lock(&self.child);
        let Some(child) = g.as_mut() else {
            return Ok(());
        };
        let pid = child.id() as libc::pid_t;
        if child.try_wait()?.is_none() {
            // SAFETY: plain kill(2); the child is not reaped yet, so the pid is still ours.
            unsafe { libc::kill(pid, sig.unwrap_or(self.stop_signal)) };
            let deadline = Instant::now() + timeout;
            while child.try_wait()?.is_none() {
                if Instant::now() >= deadline {
                    // SAFETY: as above; -pid is the server's own process group.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                        libc::kill(pid, libc::SIGKILL);
                    }
                    child.wait()?;
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // Helper processes of a server in its group (none are expected): do not leave them.
        // SAFETY: the group id was this child's pid; kill on a vanished group is ESRCH.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        *g = None;
        Ok(())
    }

    /// Stops the server and deletes its directory; unregisters it. Runs once.
    pub(crate) fn shutdown(self: &Arc<Self>) -> Result<()> {
        let mut result = Ok(());
        self.shut_down.call_once(|| {
            let stopped = self.stop_process(None, STOP_TIMEOUT);
            release_pg_shm(&self.dir);
            let removed = remove_dir(&self.dir);
            lock(&REGISTRY).retain(|i| !Arc::ptr_eq(i, self));
            result = stopped.and(removed);
        });
        result
    }
}

fn remove_dir(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", dir.display())),
    }
}

/// Creates a template directory (removed at exit and by the sweep like instances are).
pub(crate) fn create_template_dir(kind: &str, owner: Option<(u32, u32)>) -> Result<PathBuf> {
    prepare();
    let dir = create_owned_dir(&format!("tpl-{kind}"), owner)?;
    lock(&TEMPLATES).push(dir.clone());
    Ok(dir)
}

/// A Postgres that was SIGKILLed leaves its small SysV shared memory segment behind (the
/// postmaster removes it only on a clean exit). Its id is on line 7 of postmaster.pid:
/// remove it if nobody is attached any more.
fn release_pg_shm(dir: &Path) {
    let Ok(text) = fs::read_to_string(dir.join("data/postmaster.pid")) else {
        return;
    };
    let Some(line) = text.lines().nth(6) else {
        return;
    };
    let Some(id) = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<libc::c_int>().ok())
    else {
        return;
    };
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: shmctl with a valid out-pointer; a stale id just fails.
    unsafe {
        if libc::shmctl(id, libc::IPC_STAT, &mut ds) == 0 && ds.shm_nattch == 0 {
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}

// ---------------------------------------------------------------------------------------
// Process-wide set-up: at-exit hook and sweep

/// Called before the first instance: registers the at-exit hook and sweeps leftovers.
fn prepare() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(cleanup_at_exit) };
    });
    // Cheap (one readdir of the temp root), so done on every start: leftovers of a test
    // process killed a moment ago disappear with the next server start.
    let _ = sweep_stale();
}

extern "C" fn cleanup_at_exit() {
    // Unwinding out of an extern "C" function aborts: contain any panic.
    let _ = std::panic::catch_unwind(|| {
        let instances: Vec<Arc<Instance>> = lock(&REGISTRY).clone();
        for inst in instances {
            let _ = inst.shutdown();
        }
        for dir in lock(&TEMPLATES).drain(..) {
            let _ = fs::remove_dir_all(dir);
        }
    });
}

/// Pids of running server processes (by executable name) whose working directory or
/// command line is inside `dir`. Postgres backends chdir into the data directory and
/// rewrite their command line, so the working directory is what finds them.
pub fn server_processes_in(dir: &Path) -> Vec<u32> {
    let dir_str = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if !SERVER_COMMS.contains(&comm.trim()) || !pid_is_running(pid) {
            continue;
        }
        let cwd = fs::read_link(format!("/proc/{pid}/cwd"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        // A deleted cwd reads as "<path> (deleted)"; starts_with still matches.
        if cwd.starts_with(&dir_str) || cmdline.contains(&dir_str) {
            found.push(pid);
        }
    }
    found
}

/// Removes harness directories under [`instance_root`] whose owning process is gone,
/// first SIGKILLing any server process still running in them. Returns the removed dirs.
///
/// The owner is identified by pid *and* kernel start time, so a reused pid does not keep
/// garbage alive, and only processes that are one of the harness's server binaries and
/// run inside the stale directory are killed.
pub fn sweep_stale() -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(instance_root()) else {
        return removed;
    };
    let mine = owner_tag();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(DIR_PREFIX) else {
            continue;
        };
        let Some((owner, _)) = rest.split_once('-') else {
            continue;
        };
        if owner == mine {
            continue;
        }
        let Some((pid, start)) = owner.split_once('.') else {
            continue;
        };
        let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
            continue;
        };
        if pid_is_running(pid) && proc_start_time(pid) == Some(start) {
            continue; // owner alive
        }
        let dir = e.path();
        let victims = server_processes_in(&dir);
        for &v in &victims {
            // SAFETY: plain kill(2) on processes verified above to be our servers.
            unsafe { libc::kill(v as libc::pid_t, libc::SIGKILL) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while victims.iter().any(|&v| pid_is_running(v)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        release_pg_shm(&dir);
        if fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}

/// Describes how a child ended, for error messages.
pub(crate) fn describe_exit(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (_, Some(s)) => format!("killed by signal {s}"),
        _ => status.to_string(),
    }
}

/// Blocks on `fut` in a private current-thread runtime on a scoped thread, so that sync
/// code (server start-up, usable from any test, async or not) can use async clients
/// without nesting runtimes.
pub(crate) fn block_on<F>(fut: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building a tokio runtime")
                .block_on(fut)
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Waits until `ready()` returns true, failing early with the server's log when the
/// process exits. `Ok(false)` means it exited with a port clash (caller retries).
pub(crate) fn wait_ready(
    inst: &Instance,
    what: &str,
    log: &Path,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return Ok(true);
        }
        if let Some(status) = inst.try_exited() {
            let tail = log_tail(log, 6000);
            if is_port_clash(&tail) {
                return Ok(false);
            }
            bail!("{what} {} during start-up\n{tail}", describe_exit(status));
        }
        if Instant::now() >= deadline {
            bail!(
                "{what} not ready after {timeout:?}\n{}",
                log_tail(log, 6000)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
