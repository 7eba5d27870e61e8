//! Output: aligned tables for people on stdout, JSON for scripts (`--json FILE`, `-` for stdout).
//! Every command's report goes through [`emit`]; the report types live with their commands, and
//! their JSON field names are a contract (docs/cli.md): fields may be added, never renamed.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::error::{CliError, Result};

/// Writes `text` to stdout. A closed pipe (`saggar cache ls | head`) is not an error.
pub fn print_stdout(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failure(format!("cannot write to stdout: {e}"), "check where stdout is redirected")),
    }
}

/// Whether `--json` names stdout.
pub fn json_to_stdout(json: Option<&Path>) -> bool {
    json.is_some_and(|p| p.as_os_str() == "-")
}

/// Writes `value` as pretty JSON to `path` (`-`: stdout).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::failure(format!("cannot encode the JSON report: {e}"), "this is a bug in saggar"))?;
    text.push('\n');
    if path.as_os_str() == "-" {
        return print_stdout(&text);
    }
    std::fs::write(path, text).map_err(|e| {
        CliError::failure(
            format!("cannot write the JSON report to {}: {e}", path.display()),
            "check that the folder exists and is writable",
        )
    })
}

/// Prints the table `table()` (unless `--json -` takes stdout) and writes the JSON if asked.
pub fn emit<T: Serialize>(json: Option<&Path>, value: &T, table: impl FnOnce() -> String) -> Result<()> {
    if !json_to_stdout(json) {
        print_stdout(&table())?;
    }
    match json {
        Some(path) => write_json(path, value),
        None => Ok(()),
    }
}

/// A table of left-aligned columns separated by two spaces.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a header row.
    pub fn with_header(header: &[&str]) -> Table {
        Table { rows: vec![header.iter().map(|h| h.to_string()).collect()] }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The rows, aligned, each ending in a newline; trailing spaces trimmed.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1536` -> `1.5 KiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// `90 s` -> `1m`, the largest whole unit.
pub fn format_age(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let mut t = Table::with_header(&["A", "LONG HEADER"]);
        t.row(vec!["wide cell".into(), "x".into()]);
        assert_eq!(t.render(), "A          LONG HEADER\nwide cell  x\n");
    }

    #[test]
    fn sizes_and_ages_are_human() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
        assert_eq!(format_age(Duration::from_secs(59)), "59s");
        assert_eq!(format_age(Duration::from_secs(90)), "1m");
        assert_eq!(format_age(Duration::from_secs(7200)), "2h");
        assert_eq!(format_age(Duration::from_secs(200_000)), "2d");
    }
}
