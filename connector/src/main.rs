fn main() -> std::process::ExitCode {
    limit_malloc_arenas();
    cdc_connector::cli::main()
}

/// glibc gives each thread that allocates its own malloc arena (up to 8 per core) and keeps
/// the memory an arena once held. With rows decoded on the runtime's threads and encoded
/// and freed on the encoding stage's threads, that doubled the snapshot's RSS for no speed
/// (BENCHMARKS.md, "Parallel encoding"). A few arenas serve our few busy threads; an
/// explicit `MALLOC_ARENA_MAX` in the environment wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only changes allocator tuning; called before any other thread
        // exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}
