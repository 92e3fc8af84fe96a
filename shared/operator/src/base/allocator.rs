//! The allocator every operator binary uses, and its settings.
//!
//! mimalloc gives freed pages back to the system, where glibc's allocator
//! kept most of a large render's or list's memory (and musl's is several
//! times slower under tokio). Two of its defaults do not suit a process
//! that works in bursts and then rests: it gives pages back only after a
//! one-second delay, and only when it is next called, so an operator at rest
//! keeps its peak; and it commits its arenas eagerly. mimalloc reads its
//! options from the environment when the process starts, and Rust offers no
//! safe way to set them from within, so the operator re-executes itself
//! once with them set (a setting already in the environment is kept).

use std::os::unix::process::CommandExt;

pub use mimalloc::MiMalloc as Allocator;

/// The options: give freed pages back at once; commit arena memory only
/// when used.
pub const SETTINGS: [(&str, &str); 2] = [
    ("MIMALLOC_PURGE_DELAY", "0"),
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
];

/// Re-executes this process with the settings unless they are all in its
/// environment already; returns only when they are (or the exec failed,
/// which only costs memory).
pub fn configure() {
    if SETTINGS.iter().all(|(k, _)| std::env::var_os(k).is_some()) {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut cmd = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        cmd.arg0(arg0);
    }
    cmd.args(args);
    for (k, v) in SETTINGS {
        if std::env::var_os(k).is_none() {
            cmd.env(k, v);
        }
    }
    let error = cmd.exec();
    tracing::warn!(%error, "could not re-execute with the allocator's settings; running without them");
}
