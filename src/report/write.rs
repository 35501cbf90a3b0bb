//! Writing a [`Report`] to a directory: `report.json`, `report.md` and SVG plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{plots, Report};
use crate::outcome::Outcome;

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
            let wait = &p.refusal_ms;
            format!(
                "{}; answered after p50 {:.2} ms, p99 {:.2} ms",
                reasons.join(", "),
                wait.p50,
                wait.p99
            )
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
    pipeline_tables(&mut md, report);
    over_time_tables(&mut md, report);
    md.push_str("\nPlots: `latency_cdf.svg`, `goodput.svg`, `timeline_<policy>.svg`.\n");
    md
}

/// For each policy whose requests were not all answered in time, when the others
/// arrived: one row per time bucket that holds any, one column per answer seen.
fn over_time_tables(md: &mut String, report: &Report) {
    for p in &report.policies {
        let ok = Outcome::Ok.as_str();
        let missed = |answers: &BTreeMap<String, u64>| answers.keys().any(|k| k != ok);
        let rows: Vec<_> = p
            .outcomes_over_time
            .iter()
            .filter(|b| missed(&b.answers))
            .collect();
        if rows.is_empty() {
            continue;
        }
        let mut names: Vec<&str> = rows
            .iter()
            .flat_map(|b| b.answers.keys().map(String::as_str))
            .filter(|&k| k != ok)
            .collect();
        names.sort_unstable();
        names.dedup();
        let _ = writeln!(
            md,
            "\n`{}`, the buckets whose requests were not all answered in time, by the \
             bucket of their arrival:\n",
            p.policy
        );
        let _ = writeln!(md, "| from s | offered | ok | {} |", names.join(" | "));
        let _ = writeln!(md, "|---:|---:|---:|{}", "---:|".repeat(names.len()));
        for b in rows {
            let count = |name: &str| b.answers.get(name).copied().unwrap_or(0).to_string();
            let others: Vec<String> = names.iter().map(|n| count(n)).collect();
            let _ = writeln!(
                md,
                "| {:.2} | {} | {} | {} |",
                b.t_s,
                b.offered,
                count(ok),
                others.join(" | ")
            );
        }
    }
}

/// The stages of each policy's pipeline run, if the runs drove a pipeline.
fn pipeline_tables(md: &mut String, report: &Report) {
    let runs: Vec<_> = report
        .policies
        .iter()
        .filter_map(|p| Some((&p.policy, p.pipeline.as_ref()?)))
        .collect();
    let Some((_, first)) = runs.first() else {
        return;
    };
    let _ = writeln!(
        md,
        "\nPipeline `{}`, end-to-end objective {} ms: the table above counts its root \
         requests (goodput: answered within the end-to-end objective / offered; latencies \
         end to end; late: roots answered after it). Its stages (fan-out: requests per \
         answer of the parent; latency: from the stage request's submission to its answer):\n",
        first.pipeline, first.slo_ms
    );
    md.push_str(
        "| policy | stage | model | requests | in time | late | not ok | fan-out mean | fan-out p99 | fan-out max | p50 ms | p99 ms | p99.9 ms |\n",
    );
    md.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (policy, pipeline) in runs {
        for s in &pipeline.stages {
            let fan_out = match &s.fan_out {
                Some(f) => format!("{:.2} | {} | {}", f.mean, f.p99, f.max),
                None => "- | - | -".to_owned(),
            };
            let l = &s.latency_ms;
            let _ = writeln!(
                md,
                "| {policy} | {} | {} | {} | {} | {} | {} | {fan_out} | {:.2} | {:.2} | {:.2} |",
                s.stage,
                s.model,
                s.requests,
                s.ok_in_slo,
                s.late,
                s.not_ok.values().sum::<u64>(),
                l.p50,
                l.p99,
                l.p999
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Recorder, StageOutline};
    use crate::time::MS;

    #[test]
    fn a_pipeline_run_gets_its_stage_table_and_others_none() {
        let mut recorder = Recorder::new(1_000 * MS, 10, 10 * MS);
        let stage = |name: &str, fanned| StageOutline {
            stage: name.into(),
            model: format!("{name}-model"),
            fanned,
        };
        recorder.pipeline(
            "traffic",
            250 * MS,
            vec![stage("detect", false), stage("cars", true)],
        );
        recorder.fan_out("cars", 4);
        recorder.stage_answered("cars", 3 * MS, Outcome::Ok);
        let plain = Recorder::new(1_000 * MS, 10, 10 * MS).finish("plain", 1.0);
        let report = Report {
            command: "test".into(),
            setup: BTreeMap::new(),
            policies: vec![recorder.finish("clockwork", 1.0), plain.clone()],
        };
        let md = markdown(&report);
        assert!(
            md.contains("Pipeline `traffic`, end-to-end objective 250 ms"),
            "{md}"
        );
        assert!(
            md.contains("| clockwork | cars | cars-model | 1 | 1 | 0 | 0 | 4.00 | 4 | 4 | 3.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| clockwork | detect | detect-model | 0 | 0 | 0 | 0 | - | - | - |"),
            "{md}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["policies"][0]["pipeline"]["stages"][1]["fan_out"]["max"],
            4
        );
        assert!(
            json["policies"][1].get("pipeline").is_none(),
            "absent, not null"
        );
        let only_plain = Report {
            policies: vec![plain],
            ..report
        };
        assert!(!markdown(&only_plain).contains("Pipeline"));
    }

    /// A run with answers not in time gets the table of when their requests arrived;
    /// one with every answer in time gets none.
    #[test]
    fn answers_not_in_time_are_tabled_by_arrival() {
        let mut recorder = Recorder::new(1_000 * MS, 10, 10 * MS);
        for (at, how) in [
            (10, Outcome::Ok),
            (120, Outcome::Ok),
            (130, Outcome::TimedOut),
        ] {
            recorder.offered(at * MS);
            recorder.answered(at * MS, at * MS + MS, how.into());
        }
        let report = Report {
            command: "test".into(),
            setup: BTreeMap::new(),
            policies: vec![recorder.finish("clockwork", 1.0)],
        };
        let md = markdown(&report);
        assert!(md.contains("| from s | offered | ok | timed_out |"), "{md}");
        assert!(md.contains("| 0.10 | 2 | 1 | 1 |"), "{md}");
        assert!(
            !md.contains("| 0.00 | 1 | 1 |"),
            "the bucket all in time: {md}"
        );
        let mut calm = Recorder::new(1_000 * MS, 10, 10 * MS);
        calm.offered(0);
        calm.answered(0, MS, Outcome::Ok.into());
        let calm = Report {
            policies: vec![calm.finish("clockwork", 1.0)],
            ..report
        };
        assert!(!markdown(&calm).contains("from s"));
    }
}
