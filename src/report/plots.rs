//! SVG plots of a report: latency CDF per policy, goodput over time, device timelines.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::{PolicyReport, Report, ReportError};
use crate::protocol::ActionTag;

const SIZE: (u32, u32) = (900, 500);
const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

fn failed(path: &Path) -> impl Fn(String) -> ReportError + '_ {
    move |message| ReportError::Plot {
        path: path.to_owned(),
        message,
    }
}

/// Draws every plot into `dir`; returns the files.
pub fn draw_all(dir: &Path, report: &Report) -> Result<Vec<PathBuf>, ReportError> {
    let mut files = vec![dir.join("latency_cdf.svg"), dir.join("goodput.svg")];
    latency_cdf(&files[0], &report.policies).map_err(failed(&files[0]))?;
    goodput(&files[1], &report.policies).map_err(failed(&files[1]))?;
    for policy in &report.policies {
        let path = dir.join(format!("timeline_{}.svg", policy.policy));
        timeline(&path, policy).map_err(failed(&path))?;
        files.push(path);
    }
    Ok(files)
}

/// Latency (log scale) against the fraction of successful answers at or below it, with
/// the tail stretched: y is the number of nines, so 99.99% sits at 4.
fn latency_cdf(path: &Path, policies: &[PolicyReport]) -> Result<(), String> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let max = policies
        .iter()
        .flat_map(|p| p.latency_cdf.iter().map(|c| c.0))
        .fold(1.0, f64::max);
    let nines = |q: f64| -(1.0 - q).max(1e-6).log10();
    let mut chart = ChartBuilder::on(&root)
        .caption("Latency of successful answers", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.01f64..max * 1.2).log_scale(), 0f64..5.2f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("latency (ms)")
        .y_desc("percentile (nines)")
        .y_label_formatter(&|y| format!("{:.4}%", 100.0 * (1.0 - 10f64.powf(-y))))
        .draw()
        .map_err(|e| e.to_string())?;
    let lines = policies.iter().map(|p| {
        let points = p
            .latency_cdf
            .iter()
            .map(|&(ms, q)| (ms.max(0.01), nines(q)));
        (p.policy.as_str(), points.collect())
    });
    draw_lines(&mut chart, lines)?;
    root.present().map_err(|e| e.to_string())
}

/// One labelled line per policy, and the legend.
fn draw_lines<'a, 'b, X, Y>(
    chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<X, Y>>,
    lines: impl Iterator<Item = (&'a str, Vec<(f64, f64)>)>,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (label, points)) in lines.enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// Goodput of the requests arriving in each bucket, per policy.
fn goodput(path: &Path, policies: &[PolicyReport]) -> Result<(), String> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let end = policies
        .iter()
        .flat_map(|p| p.goodput_over_time.iter().map(|t| t.t_s))
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption("Goodput over time", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..end, 0f64..1.05f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("answered in SLO / offered")
        .draw()
        .map_err(|e| e.to_string())?;
    let lines = policies.iter().map(|p| {
        let points = p.goodput_over_time.iter().map(|t| (t.t_s, t.value));
        (p.policy.as_str(), points.collect())
    });
    draw_lines(&mut chart, lines)?;
    root.present().map_err(|e| e.to_string())
}

/// Device lanes in a short window: INFERs (darker by batch size) and LOADs.
fn timeline(path: &Path, policy: &PolicyReport) -> Result<(), String> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let devices = policy
        .timeline
        .iter()
        .map(|s| s.device + 1)
        .max()
        .unwrap_or(1);
    let end = policy.timeline.iter().map(|s| s.end_ms).fold(1.0, f64::max);
    let caption = format!("{}: device timeline (window from mid-run)", policy.policy);
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..f64::from(devices))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time in window (ms)")
        .y_desc("device (upper: exec, lower: load)")
        .draw()
        .map_err(|e| e.to_string())?;
    let spans = policy.timeline.iter().map(|s| {
        let base = f64::from(s.device);
        let (low, high, color) = if s.kind == ActionTag::Load {
            (base + 0.05, base + 0.35, RGBColor(214, 39, 40).mix(0.8))
        } else {
            let shade = (0.3 + 0.05 * f64::from(s.batch)).min(1.0);
            (base + 0.45, base + 0.95, RGBColor(31, 119, 180).mix(shade))
        };
        Rectangle::new([(s.begin_ms, low), (s.end_ms, high)], color.filled())
    });
    chart.draw_series(spans).map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
