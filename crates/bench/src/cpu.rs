//! CPU and memory accounting for the benchmark report (Linux `/proc`; elsewhere nothing is
//! reported): the CPU this process (the control plane) used during the measurement, that of
//! each helper process (the simulated members, a temporary etcd), how busy the whole machine
//! was (a benchmark on a shared 2-core machine competes with whatever else runs there), and
//! resident memory.

use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc` times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// A process the report accounts for apart from this one.
#[derive(Clone, Debug)]
pub struct Helper {
    /// What it is, for the report ("members", "etcd").
    pub name: &'static str,
    /// Its process id.
    pub pid: u32,
}

/// A reading of the CPU counters.
#[derive(Clone, Debug)]
pub struct Sample {
    at: Instant,
    /// This process: user + system ticks.
    process: Option<u64>,
    /// Each helper: user + system ticks.
    helpers: Vec<(&'static str, Option<u64>)>,
    /// The machine: (busy, total) ticks over every CPU.
    machine: Option<(u64, u64)>,
}

/// What happened between two samples.
#[derive(Clone, Debug)]
pub struct Usage {
    /// Wall time.
    pub wall: Duration,
    /// CPU seconds this process used.
    pub process_cpu: Option<f64>,
    /// CPU seconds each helper process used.
    pub helpers: Vec<(&'static str, f64)>,
    /// Cores' worth of CPU the whole machine was busy with, on average.
    pub machine_busy_cores: Option<f64>,
    /// Cores the machine has (from `/proc/stat`).
    pub cores: Option<usize>,
}

/// The helpers among `(name, pid)` whose process is known.
pub fn helpers<const N: usize>(processes: [(&'static str, Option<u32>); N]) -> Vec<Helper> {
    processes
        .into_iter()
        .filter_map(|(name, pid)| pid.map(|pid| Helper { name, pid }))
        .collect()
}

fn process_ticks(pid: Option<u32>) -> Option<u64> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_owned(),
        |p| format!("/proc/{p}/stat"),
    );
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may contain spaces: count fields after its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

fn cores() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    Some(
        stat.lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count(),
    )
}

/// Resident memory of a process (this one for `None`), in bytes: (now, peak).
pub fn memory(pid: Option<u32>) -> Option<(u64, u64)> {
    let path = pid.map_or_else(
        || "/proc/self/status".to_owned(),
        |p| format!("/proc/{p}/status"),
    );
    let status = std::fs::read_to_string(path).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

impl Sample {
    /// Reads the counters now (this process's, each helper's, the machine's).
    pub fn now(helpers: &[Helper]) -> Sample {
        Sample {
            at: Instant::now(),
            process: process_ticks(None),
            helpers: helpers
                .iter()
                .map(|h| (h.name, process_ticks(Some(h.pid))))
                .collect(),
            machine: machine_ticks(),
        }
    }

    /// The usage from `self` until `later`.
    pub fn until(&self, later: &Sample) -> Usage {
        let wall = later.at.saturating_duration_since(self.at);
        let delta = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / USER_HZ),
            _ => None,
        };
        let helpers = self
            .helpers
            .iter()
            .zip(later.helpers.iter())
            .filter_map(|((name, a), (_, b))| delta(*a, *b).map(|d| (*name, d)))
            .collect();
        let machine_busy_cores = match (self.machine, later.machine) {
            (Some((b0, _)), Some((b1, _))) if !wall.is_zero() => {
                Some(b1.saturating_sub(b0) as f64 / USER_HZ / wall.as_secs_f64())
            }
            _ => None,
        };
        Usage {
            wall,
            process_cpu: delta(self.process, later.process),
            helpers,
            machine_busy_cores,
            cores: cores(),
        }
    }
}

impl Usage {
    /// CPU seconds of helper `name`.
    pub fn helper(&self, name: &str) -> Option<f64> {
        self.helpers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
    }

    /// One line for the report (`me` names this process), or `None` where `/proc` is not
    /// there.
    pub fn describe(&self, me: &str) -> Option<String> {
        let cpu = self.process_cpu?;
        let wall = self.wall.as_secs_f64().max(1e-9);
        let mut line = format!(
            "CPU in {wall:.1} s: {me} {cpu:.1} CPU-seconds ({:.2} cores)",
            cpu / wall
        );
        let mut helpers_cpu = 0.0;
        for (name, h) in &self.helpers {
            helpers_cpu += h;
            line.push_str(&format!(", {name} {h:.1} ({:.2} cores)", h / wall));
        }
        if let (Some(busy), Some(cores)) = (self.machine_busy_cores, self.cores) {
            let others = (busy - (cpu + helpers_cpu) / wall).max(0.0);
            line.push_str(&format!(
                "; the machine's {cores} cores were {busy:.2} busy, {others:.2} of them with \
                 other processes"
            ));
        }
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_move_forward() {
        let me = Helper {
            name: "me",
            pid: std::process::id(),
        };
        let a = Sample::now(std::slice::from_ref(&me));
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let u = a.until(&Sample::now(&[me]));
        if let Some(cpu) = u.process_cpu {
            assert!(cpu >= 0.0);
            assert!(u.helper("me").is_some());
            assert!(u.helper("other").is_none());
            assert!(
                u.describe("bench")
                    .is_some_and(|d| d.contains("CPU-seconds"))
            );
        }
    }

    #[test]
    fn memory_of_this_process_is_read() {
        if let Some((rss, peak)) = memory(None) {
            assert!(rss > 0);
            assert!(peak >= rss / 2);
        }
        assert!(memory(Some(u32::MAX)).is_none());
    }
}
