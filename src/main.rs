//! Entry point: everything lives in the library (`cli`), so tests and tools can reuse it. The
//! library forbids `unsafe`; the one call to the C allocator is here.

fn main() -> std::process::ExitCode {
    one_allocator_arena();
    boot_image_controller::cli::main()
}

/// Keeps glibc's allocator to one arena, unless `MALLOC_ARENA_MAX` says otherwise.
///
/// glibc gives each thread that allocates its own arena (up to 8 per core), and each keeps the
/// memory freed into it. The runtime's workers take turns decoding lists and watch events, so
/// every arena grows to the largest burst it saw: at 1,000 MachineSets the peak resident size was
/// 60 MiB with the default and 41 MiB with one arena (docs/performance.md, "Memory"). The controller
/// allocates from a couple of threads at most, so one arena costs it no measurable contention.
fn one_allocator_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable of the allocator; it is called before any other thread
        // exists, and a refusal (return 0) leaves glibc's default in place.
        if unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) } == 0 {
            eprintln!("warning: glibc refused M_ARENA_MAX=1; memory use may be higher");
        }
    }
}
