//! The timers `flotilla up` compresses for a demo, how they map onto each service's own
//! flags, and the values the services end up with (read back from the services' own
//! parsers, so that `--production-timers` reports Karmada's defaults without restating them).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use anyhow::anyhow;

use crate::{Service, parse_service_args};

/// A duration as a service flag value (`1500ms`; humantime parses it back exactly).
pub fn flag_duration(d: Duration) -> String {
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}ns", d.as_nanos())
    }
}

/// Demo timers: what `flotilla up` passes unless `--production-timers` is given (each
/// overridable by its flag).
#[derive(Clone, Copy, Debug)]
pub struct DemoDefaults;

impl DemoDefaults {
    /// cluster-health `--cluster-status-update-frequency` (Karmada 10s).
    pub const STATUS_UPDATE_FREQUENCY: Duration = Duration::from_millis(500);
    /// cluster-health `--cluster-failure-threshold` (Karmada 30s).
    pub const FAILURE_THRESHOLD: Duration = Duration::from_secs(2);
    /// cluster-health `--cluster-success-threshold` (Karmada 30s).
    pub const SUCCESS_THRESHOLD: Duration = Duration::from_secs(2);
    /// cluster-health `--failover-eviction-timeout` (Karmada 5m).
    pub const FAILOVER_EVICTION_TIMEOUT: Duration = Duration::from_secs(3);
    /// cluster-health `--probe-timeout` (Flotilla 5s).
    pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
    /// api `--default-{not-ready,unreachable}-toleration-seconds` (Karmada 300).
    pub const TOLERATION_SECONDS: i64 = 2;
    /// graceful-eviction `--graceful-eviction-timeout` (Karmada 10m).
    pub const GRACEFUL_EVICTION_TIMEOUT: Duration = Duration::from_secs(60);
    /// member-sim `--pod-startup-delay` (member-sim 2s).
    pub const POD_STARTUP_DELAY: Duration = Duration::from_secs(1);
    /// work-executor `--status-sync-period` (Karmada 10s).
    pub const STATUS_SYNC_PERIOD: Duration = Duration::from_millis(500);
    /// work-executor `--member-timeout` (Flotilla 5s): a status pass waits for its slowest
    /// member, so an unreachable one holds every other member's status back this long.
    pub const MEMBER_TIMEOUT: Duration = Duration::from_secs(1);
}

/// The timer flags of `flotilla up` as given (`None`: the demo default, or the service's own
/// default with `--production-timers`).
#[derive(Clone, Debug, Default)]
pub struct TimerFlags {
    /// `--status-update-frequency`.
    pub status_update_frequency: Option<Duration>,
    /// `--failure-threshold`.
    pub failure_threshold: Option<Duration>,
    /// `--success-threshold`.
    pub success_threshold: Option<Duration>,
    /// `--failover-eviction-timeout`.
    pub failover_eviction_timeout: Option<Duration>,
    /// `--probe-timeout`.
    pub probe_timeout: Option<Duration>,
    /// `--default-toleration-seconds`.
    pub default_toleration_seconds: Option<i64>,
    /// `--graceful-eviction-timeout`.
    pub graceful_eviction_timeout: Option<Duration>,
    /// `--status-sync-period`.
    pub status_sync_period: Option<Duration>,
    /// `--member-timeout`.
    pub member_timeout: Option<Duration>,
    /// `--pod-startup-delay` (member-sims; not a service flag).
    pub pod_startup_delay: Option<Duration>,
    /// `--production-timers`: no demo defaults.
    pub production: bool,
}

impl TimerFlags {
    fn pick<T: Copy>(&self, given: Option<T>, demo: T) -> Option<T> {
        given.or((!self.production).then_some(demo))
    }

    /// The member-sims' pod start-up delay (member-sim's own default: 2s).
    pub fn pod_startup_delay(&self) -> Duration {
        self.pick(self.pod_startup_delay, DemoDefaults::POD_STARTUP_DELAY)
            .unwrap_or(Duration::from_secs(2))
    }

    /// The flags each service gets for these timers.
    pub fn service_flags(&self) -> BTreeMap<Service, Vec<String>> {
        let mut flags: BTreeMap<Service, Vec<String>> = BTreeMap::new();
        let mut add = |service: Service, flag: &str, value: Option<String>| {
            if let Some(v) = value {
                flags
                    .entry(service)
                    .or_default()
                    .push(format!("--{flag}={v}"));
            }
        };
        let d = |v: Option<Duration>| v.map(flag_duration);
        add(
            Service::CLUSTER_HEALTH,
            "cluster-status-update-frequency",
            d(self.pick(
                self.status_update_frequency,
                DemoDefaults::STATUS_UPDATE_FREQUENCY,
            )),
        );
        add(
            Service::CLUSTER_HEALTH,
            "cluster-failure-threshold",
            d(self.pick(self.failure_threshold, DemoDefaults::FAILURE_THRESHOLD)),
        );
        add(
            Service::CLUSTER_HEALTH,
            "cluster-success-threshold",
            d(self.pick(self.success_threshold, DemoDefaults::SUCCESS_THRESHOLD)),
        );
        add(
            Service::CLUSTER_HEALTH,
            "failover-eviction-timeout",
            d(self.pick(
                self.failover_eviction_timeout,
                DemoDefaults::FAILOVER_EVICTION_TIMEOUT,
            )),
        );
        add(
            Service::CLUSTER_HEALTH,
            "probe-timeout",
            d(self.pick(self.probe_timeout, DemoDefaults::PROBE_TIMEOUT)),
        );
        let toleration = self
            .pick(
                self.default_toleration_seconds,
                DemoDefaults::TOLERATION_SECONDS,
            )
            .map(|s| s.to_string());
        add(
            Service::API,
            "default-not-ready-toleration-seconds",
            toleration.clone(),
        );
        add(
            Service::API,
            "default-unreachable-toleration-seconds",
            toleration,
        );
        add(
            Service::GRACEFUL_EVICTION,
            "graceful-eviction-timeout",
            d(self.pick(
                self.graceful_eviction_timeout,
                DemoDefaults::GRACEFUL_EVICTION_TIMEOUT,
            )),
        );
        add(
            Service::WORK_EXECUTOR,
            "status-sync-period",
            d(self.pick(self.status_sync_period, DemoDefaults::STATUS_SYNC_PERIOD)),
        );
        add(
            Service::WORK_EXECUTOR,
            "member-timeout",
            d(self.pick(self.member_timeout, DemoDefaults::MEMBER_TIMEOUT)),
        );
        flags
    }
}

/// Adds `extra` flags (`SERVICE:--flag=value`, from `--service-flag`) to `flags`; a flag
/// given there replaces the same flag set by a timer.
pub fn merge_service_flags(
    flags: &mut BTreeMap<Service, Vec<String>>,
    extra: &[String],
) -> anyhow::Result<()> {
    for raw in extra {
        let (service, flag) = raw.split_once(':').ok_or_else(|| {
            anyhow!(
                "--service-flag {raw:?}: expected SERVICE:--flag=value, e.g. scheduler:--workers=8"
            )
        })?;
        let service = Service::parse(service.trim()).ok_or_else(|| {
            anyhow!(
                "--service-flag {raw:?}: unknown service {service:?} (one of {})",
                Service::ALL.map(Service::name).join(", ")
            )
        })?;
        let flag = flag.trim();
        if !flag.starts_with("--") {
            anyhow::bail!("--service-flag {raw:?}: the flag must start with -- (--flag=value)");
        }
        let name = flag.split_once('=').map_or(flag, |(n, _)| n).to_owned();
        let list = flags.entry(service).or_default();
        list.retain(|f| f.split_once('=').map_or(f.as_str(), |(n, _)| n) != name);
        list.push(flag.to_owned());
    }
    Ok(())
}

/// The timers the services run with, read back from their parsers.
#[derive(Clone, Copy, Debug)]
pub struct Effective {
    /// cluster-health probe period.
    pub status_update_frequency: Duration,
    /// cluster-health failure threshold.
    pub failure_threshold: Duration,
    /// cluster-health success threshold.
    pub success_threshold: Duration,
    /// cluster-health NoExecute delay.
    pub failover_eviction_timeout: Duration,
    /// cluster-health probe timeout.
    pub probe_timeout: Duration,
    /// api default NoExecute tolerations (not-ready; unreachable is the same unless set apart).
    pub toleration: Duration,
    /// graceful-eviction default task timeout.
    pub graceful_eviction_timeout: Duration,
    /// work-executor status collection period.
    pub status_sync_period: Duration,
    /// work-executor member call deadline.
    pub member_timeout: Duration,
    /// member-sim pod start-up delay.
    pub pod_startup_delay: Duration,
}

impl Effective {
    /// Parses the services' flags as the suite will, and reads the timers back.
    pub fn resolve(
        flags: &BTreeMap<Service, Vec<String>>,
        pod_startup_delay: Duration,
    ) -> anyhow::Result<Self> {
        let of = |s: Service| flags.get(&s).cloned().unwrap_or_default();
        let health: flotilla_cluster_health::Args =
            parse_service_args(Service::CLUSTER_HEALTH, &of(Service::CLUSTER_HEALTH))?;
        let api: flotilla_api::Args = parse_service_args(Service::API, &of(Service::API))?;
        let ge: flotilla_graceful_eviction::Args =
            parse_service_args(Service::GRACEFUL_EVICTION, &of(Service::GRACEFUL_EVICTION))?;
        let we: flotilla_work_executor::Args =
            parse_service_args(Service::WORK_EXECUTOR, &of(Service::WORK_EXECUTOR))?;
        Ok(Effective {
            status_update_frequency: health.cluster_status_update_frequency,
            failure_threshold: health.cluster_failure_threshold,
            success_threshold: health.cluster_success_threshold,
            failover_eviction_timeout: health.failover_eviction_timeout,
            probe_timeout: health.probe_timeout,
            toleration: Duration::from_secs(
                u64::try_from(
                    api.default_not_ready_toleration_seconds
                        .max(api.default_unreachable_toleration_seconds),
                )
                .unwrap_or(0),
            ),
            graceful_eviction_timeout: ge.graceful_eviction_timeout,
            status_sync_period: we.status_sync_period,
            member_timeout: we.member_timeout,
            pod_startup_delay,
        })
    }

    /// How long one step of the demo may take: 30 s plus twice every timer a step can wait
    /// on (the timers differ by orders of magnitude between demo and production).
    pub fn step_timeout(&self) -> Duration {
        Duration::from_secs(30)
            + 2 * (self.status_update_frequency
                + self.probe_timeout
                + self.failure_threshold
                + self.success_threshold
                + self.failover_eviction_timeout
                + self.toleration
                + self.pod_startup_delay
                + self.status_sync_period
                + self.member_timeout)
    }
}

impl fmt::Display for Effective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = |d: Duration| humantime::format_duration(d).to_string();
        write!(
            f,
            "probe every {} (timeout {}), failure/success threshold {}/{}, NoExecute taint \
             after {}, default tolerations {}, graceful eviction timeout {}, pods Ready after \
             {}, status sync every {}, member calls time out after {}",
            h(self.status_update_frequency),
            h(self.probe_timeout),
            h(self.failure_threshold),
            h(self.success_threshold),
            h(self.failover_eviction_timeout),
            h(self.toleration),
            h(self.graceful_eviction_timeout),
            h(self.pod_startup_delay),
            h(self.status_sync_period),
            h(self.member_timeout),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn demo_defaults_reach_the_services_and_production_uses_theirs() {
        let demo = TimerFlags::default();
        let flags = demo.service_flags();
        let eff = Effective::resolve(&flags, demo.pod_startup_delay()).unwrap();
        assert_eq!(eff.failure_threshold, DemoDefaults::FAILURE_THRESHOLD);
        assert_eq!(eff.toleration, Duration::from_secs(2));
        assert_eq!(eff.status_sync_period, DemoDefaults::STATUS_SYNC_PERIOD);
        assert_eq!(eff.member_timeout, DemoDefaults::MEMBER_TIMEOUT);

        let prod = TimerFlags {
            production: true,
            failure_threshold: Some(Duration::from_millis(1500)),
            ..TimerFlags::default()
        };
        let flags = prod.service_flags();
        let eff = Effective::resolve(&flags, prod.pod_startup_delay()).unwrap();
        assert_eq!(eff.failure_threshold, Duration::from_millis(1500));
        // The services' own (Karmada) defaults.
        assert_eq!(eff.success_threshold, Duration::from_secs(30));
        assert_eq!(eff.failover_eviction_timeout, Duration::from_secs(300));
        assert_eq!(eff.toleration, Duration::from_secs(300));
        assert_eq!(eff.graceful_eviction_timeout, Duration::from_secs(600));
        assert_eq!(eff.pod_startup_delay, Duration::from_secs(2));
        assert_eq!(eff.member_timeout, Duration::from_secs(5));
    }

    #[test]
    fn service_flags_replace_timer_flags() {
        let mut flags = TimerFlags::default().service_flags();
        merge_service_flags(
            &mut flags,
            &[
                "cluster-health:--cluster-failure-threshold=7s".into(),
                "flotilla-scheduler:--workers=8".into(),
            ],
        )
        .unwrap();
        let health = &flags[&Service::CLUSTER_HEALTH];
        assert!(health.contains(&"--cluster-failure-threshold=7s".to_owned()));
        assert_eq!(
            health
                .iter()
                .filter(|f| f.starts_with("--cluster-failure-threshold"))
                .count(),
            1
        );
        assert_eq!(flags[&Service::SCHEDULER], vec!["--workers=8".to_owned()]);
        assert!(merge_service_flags(&mut flags, &["nope:--x=1".into()]).is_err());
        assert!(merge_service_flags(&mut flags, &["api".into()]).is_err());
    }

    #[test]
    fn durations_round_trip_through_humantime() {
        for d in [
            Duration::from_millis(1500),
            Duration::ZERO,
            Duration::from_nanos(1_234_567),
        ] {
            assert_eq!(humantime::parse_duration(&flag_duration(d)).unwrap(), d);
        }
    }
}
