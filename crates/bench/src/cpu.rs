//! CPU accounting for the benchmark report (Linux `/proc`; elsewhere nothing is reported):
//! how much CPU this process used during the measurement, and how busy the whole machine
//! was — a benchmark on a shared 2-core machine competes with whatever else runs there.

use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc` times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// A reading of the CPU counters.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    at: Instant,
    /// This process: user + system ticks.
    process: Option<u64>,
    /// A helper process (the temporary etcd): user + system ticks.
    helper: Option<u64>,
    /// The machine: (busy, total) ticks over every CPU.
    machine: Option<(u64, u64)>,
}

/// What happened between two samples.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// Wall time.
    pub wall: Duration,
    /// CPU seconds this process used.
    pub process_cpu: Option<f64>,
    /// CPU seconds the helper process (the temporary etcd) used.
    pub helper_cpu: Option<f64>,
    /// Cores' worth of CPU the whole machine was busy with, on average.
    pub machine_busy_cores: Option<f64>,
    /// Cores the machine has (from `/proc/stat`).
    pub cores: Option<usize>,
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

impl Sample {
    /// Reads the counters now (and those of process `helper`, e.g. a temporary etcd).
    pub fn now(helper: Option<u32>) -> Sample {
        Sample {
            at: Instant::now(),
            process: process_ticks(None),
            helper: helper.and_then(|p| process_ticks(Some(p))),
            machine: machine_ticks(),
        }
    }

    /// The usage from `self` until `later`.
    pub fn until(&self, later: &Sample) -> Usage {
        let wall = later.at.saturating_duration_since(self.at);
        let process_cpu = match (self.process, later.process) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / USER_HZ),
            _ => None,
        };
        let helper_cpu = match (self.helper, later.helper) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / USER_HZ),
            _ => None,
        };
        let machine_busy_cores = match (self.machine, later.machine) {
            (Some((b0, _)), Some((b1, _))) if !wall.is_zero() => {
                Some(b1.saturating_sub(b0) as f64 / USER_HZ / wall.as_secs_f64())
            }
            _ => None,
        };
        Usage {
            wall,
            process_cpu,
            helper_cpu,
            machine_busy_cores,
            cores: cores(),
        }
    }
}

impl Usage {
    /// One line for the report (`helper` names the helper process), or `None` where
    /// `/proc` is not there.
    pub fn describe(&self, helper: &str) -> Option<String> {
        let cpu = self.process_cpu?;
        let wall = self.wall.as_secs_f64().max(1e-9);
        let mut line = format!(
            "CPU: this process used {cpu:.1} CPU-seconds in {wall:.1} s ({:.2} cores)",
            cpu / wall
        );
        let helper_cpu = self.helper_cpu.unwrap_or(0.0);
        if let Some(h) = self.helper_cpu {
            line.push_str(&format!(", {helper} {h:.1} ({:.2} cores)", h / wall));
        }
        if let (Some(busy), Some(cores)) = (self.machine_busy_cores, self.cores) {
            let others = (busy - (cpu + helper_cpu) / wall).max(0.0);
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
        let a = Sample::now(None);
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let u = a.until(&Sample::now(Some(std::process::id())));
        if let Some(cpu) = u.process_cpu {
            assert!(cpu >= 0.0);
            assert!(u.describe("me").is_some_and(|d| d.contains("CPU-seconds")));
        }
    }
}
