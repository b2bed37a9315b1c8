//! Printing: JSON and YAML (objects are shaped by `shape`), kubectl style tables, ages and
//! durations.

use std::time::{Duration, SystemTime};

use anyhow::Context as _;

/// Output formats of `get` (kubectl's `-o`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table (the default).
    #[default]
    Table,
    /// A table with more columns.
    Wide,
    /// The objects in the proto3 JSON mapping of their wire types.
    Json,
    /// The same as YAML.
    Yaml,
    /// `kind/name` per object.
    Name,
}

/// A wire message with its fully qualified protobuf name, so that it can be printed in the
/// proto3 JSON mapping.
pub trait Named: prost::Message {
    /// e.g. `flotilla.v1.Cluster`.
    const FULL_NAME: &'static str;
}

macro_rules! named {
    ($($ty:ident),* $(,)?) => {$(
        impl Named for flotilla_proto::v1::$ty {
            const FULL_NAME: &'static str = concat!("flotilla.v1.", stringify!($ty));
        }
    )*};
}
pub(crate) use named;

// The api objects and their list responses are named where they are declared (`api_object!`).
named!(
    SimulateResponse,
    ExplainResponse,
    GracefulEvictionAssessResponse,
    PlanResponse,
);

/// Prints a JSON value as pretty JSON or as YAML.
pub fn print_value(value: &serde_json::Value, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Yaml => {
            let text = serde_norway::to_string(value).context("writing YAML")?;
            print!("{text}");
        }
        _ => println!("{}", serde_json::to_string_pretty(value)?),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------

/// A kubectl-style table: upper-case headers, columns separated by three spaces.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    widths: Vec<usize>,
}

// === impl Table ===

impl Table {
    /// A table with these headers.
    pub fn new<I, S>(headers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let headers: Vec<String> = headers.into_iter().map(Into::into).collect();
        let widths = headers.iter().map(|h| h.chars().count()).collect();
        Table {
            headers,
            rows: vec![],
            widths,
        }
    }

    /// Appends a row (missing cells are empty).
    pub fn row(&mut self, cells: Vec<String>) {
        for (i, c) in cells.iter().enumerate() {
            if let Some(w) = self.widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
        self.rows.push(cells);
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row, header first.
    pub fn render(&self) -> String {
        let mut out = self.format_line(&self.headers);
        for row in &self.rows {
            out.push_str(&self.format_line(row));
        }
        out
    }

    /// One row formatted with the current column widths (for watch output).
    pub fn format_line(&self, cells: &[String]) -> String {
        let mut line = String::new();
        let last = self.headers.len().saturating_sub(1);
        for (i, width) in self.widths.iter().enumerate() {
            let cell = cells.get(i).map_or("", String::as_str);
            line.push_str(cell);
            if i < last {
                let pad = width.saturating_sub(cell.chars().count()) + 3;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        let trimmed = line.trim_end().len();
        line.truncate(trimmed);
        line.push('\n');
        line
    }
}

// ---------------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------------

/// The wall clock as a protobuf timestamp.
pub fn now() -> prost_types::Timestamp {
    prost_types::Timestamp::from(SystemTime::now())
}

/// Milliseconds since the epoch of a timestamp.
pub fn millis(ts: &prost_types::Timestamp) -> i64 {
    ts.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(ts.nanos / 1_000_000))
}

/// How long ago `then` was, kubectl style (`45s`, `3m20s`, `2h`, `4d`); `<unknown>` without
/// a time.
pub fn age(then: Option<&prost_types::Timestamp>, now: &prost_types::Timestamp) -> String {
    match then {
        None => "<unknown>".into(),
        Some(t) => {
            let ms = millis(now).saturating_sub(millis(t)).max(0);
            human_duration(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
        }
    }
}

/// `5m`, or `5m30s` when the rest in the smaller unit is not zero.
fn with_rest(n: u64, unit: &str, rest: u64, rest_unit: &str) -> String {
    if rest == 0 {
        format!("{n}{unit}")
    } else {
        format!("{n}{unit}{rest}{rest_unit}")
    }
}

/// A duration the way kubectl prints ages: two significant units while they matter.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (m, h, days) = (s / 60, s / 3600, s / 86_400);
    if s < 1 && d.as_millis() > 0 {
        format!("{}ms", d.as_millis())
    } else if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        with_rest(m, "m", s % 60, "s")
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        with_rest(h, "h", m % 60, "m")
    } else if h < 48 {
        format!("{h}h")
    } else if days < 8 {
        with_rest(days, "d", h % 24, "h")
    } else if days < 365 * 2 {
        format!("{days}d")
    } else {
        format!("{}y", days / 365)
    }
}

/// A protobuf duration as a std one (negative = zero).
pub fn std_duration(d: &prost_types::Duration) -> Duration {
    if d.seconds < 0 || d.nanos < 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(d.seconds).unwrap_or(0),
        u32::try_from(d.nanos).unwrap_or(0),
    )
}

/// A timestamp as RFC 3339 (UTC, to the millisecond when it has a fraction).
pub fn rfc3339(ts: &prost_types::Timestamp) -> String {
    let whole = prost_types::Timestamp {
        seconds: ts.seconds,
        nanos: 0,
    };
    let text = whole.to_string();
    if ts.nanos / 1_000_000 == 0 {
        return text;
    }
    // `…:SSZ` → `…:SS.mmmZ`
    let stem = text.strip_suffix('Z').unwrap_or(&text);
    format!("{stem}.{:03}Z", ts.nanos / 1_000_000)
}

/// Parses `--now`: an RFC 3339 time.
pub fn parse_rfc3339(text: &str) -> Result<prost_types::Timestamp, String> {
    text.parse::<prost_types::Timestamp>()
        .map_err(|e| format!("not an RFC 3339 time such as 2025-01-02T15:04:05Z: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let d = |s| human_duration(Duration::from_secs(s));
        assert_eq!(d(0), "0s");
        assert_eq!(d(45), "45s");
        assert_eq!(d(119), "119s");
        assert_eq!(d(200), "3m20s");
        assert_eq!(d(600), "10m");
        assert_eq!(d(4 * 3600 + 60), "4h1m");
        assert_eq!(d(30 * 3600), "30h");
        assert_eq!(d(3 * 86_400 + 3600), "3d1h");
        assert_eq!(d(100 * 86_400), "100d");
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn timestamps_print_to_the_millisecond() {
        let ts = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(rfc3339(&ts(0, 0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(&ts(1, 929_296_700)), "1970-01-01T00:00:01.929Z");
        assert_eq!(
            parse_rfc3339("2025-06-01T12:00:00Z").unwrap().seconds,
            1_748_779_200
        );
        assert!(parse_rfc3339("yesterday").is_err());
    }

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(["NAME", "READY"]);
        t.row(vec!["member1".into(), "True".into()]);
        t.row(vec!["m2".into(), "False".into()]);
        assert_eq!(
            t.render(),
            "NAME      READY\nmember1   True\nm2        False\n"
        );
    }
}
