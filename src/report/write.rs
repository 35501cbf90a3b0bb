//! Writing a [`Report`] to a directory: `report.json`, `report.md` and SVG plots.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{plots, Report};

/// Why the report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode the report: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot draw {path}: {message}")]
    Plot { path: PathBuf, message: String },
}

fn write(path: PathBuf, text: &str) -> Result<(), ReportError> {
    std::fs::write(&path, text).map_err(|source| ReportError::Io { path, source })
}

/// Writes everything into `dir` (created if missing); returns the files written.
pub fn write_all(dir: &Path, report: &Report) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut files = vec![dir.join("report.json"), dir.join("report.md")];
    write(files[0].clone(), &serde_json::to_string_pretty(report)?)?;
    write(files[1].clone(), &markdown(report))?;
    files.extend(plots::draw_all(dir, report)?);
    Ok(files)
}

/// A readable table of the report.
pub fn markdown(report: &Report) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Simulation report\n\n`{}`\n", report.command);
    for (key, value) in &report.setup {
        let _ = writeln!(md, "- {key}: {value}");
    }
    md.push_str(
        "\n| policy | offered | ok in SLO | late | refused | failed | goodput | p50 ms | p99 ms | p99.9 ms | p99.99 ms | max ms | cold loads | mean batch | pred. err p99 ms | req/wall s |\n",
    );
    md.push_str(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for p in &report.policies {
        let refused: u64 = p.refused.values().sum();
        let l = &p.latency_ms;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:.4} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.3} | {:.0} |",
            p.policy,
            p.offered,
            p.ok_in_slo,
            p.late,
            refused,
            p.failed,
            p.goodput,
            l.p50,
            l.p99,
            l.p999,
            l.p9999,
            l.max,
            p.cold_loads,
            p.mean_batch,
            p.prediction_error_ms.p99,
            p.sim_requests_per_wall_s
        );
    }
    md.push_str("\nRefusals by reason:\n\n");
    for p in &report.policies {
        let reasons: Vec<String> = p.refused.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let reasons = if reasons.is_empty() {
            "none".to_owned()
        } else {
            reasons.join(", ")
        };
        let _ = writeln!(md, "- {}: {reasons}", p.policy);
    }
    if report.policies.iter().any(|p| !p.errors.is_empty()) {
        md.push_str("\nErrors by kind:\n\n");
        for p in &report.policies {
            let errors: Vec<String> = p.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(md, "- {}: {}", p.policy, errors.join(", "));
        }
    }
    md.push_str("\nPlots: `latency_cdf.svg`, `goodput.svg`, `timeline_<policy>.svg`.\n");
    md
}
