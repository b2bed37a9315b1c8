//! The integration tests of this crate, linked into one test binary (one binary per crate
//! instead of one per file keeps the build's disk use and link time down).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bench;
mod client;
mod up;

/// Asserts that `text` contains every one of `parts`, naming the first one missing.
#[track_caller]
fn assert_has(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "missing {part:?} in:\n{text}");
    }
}

/// A free block of 40 loopback ports for one `flotilla up`: `base + 100·k` for a k drawn from
/// the process id and the clock, below the ephemeral range. The client tests use base 20000,
/// the `up` tests 20050, so that their blocks never overlap.
fn pick_base(base: u16) -> u16 {
    use std::net::TcpListener;
    let free = |b: u16| (b..b + 40).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok());
    let seed = u64::from(std::process::id())
        ^ u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos(),
        );
    for i in 0..200u64 {
        let block = (seed.wrapping_mul(131).wrapping_add(i * 7919)) % 120;
        let candidate = base + block as u16 * 100;
        if free(candidate) {
            return candidate;
        }
    }
    panic!("no free block of 40 loopback ports");
}
