//! The declaration of a pipeline: the `[pipeline]` table of `models/<name>/config.toml`,
//! parsed as written, before it is checked against the registered models (`validate`).
//!
//! ```toml
//! [pipeline]
//! slo = "250ms"
//! partial_results = false
//! inputs = [{ name = "image", datatype = "FP32", shape = [3, 32, 32] }]
//! outputs = ["scores", "labels"]
//!
//! [[pipeline.stages]]
//! name = "detect"
//! model = "detector"
//! input_map = { input = "image" }
//! output_map = { scores = "scores", crops = "crops" }
//!
//! [[pipeline.stages]]
//! name = "classify"
//! model = "classifier"
//! after = "detect"
//! fan_out = { rows = "crops", score = "scores", min = 0.5 }
//! input_map = { input = "crops" }
//! output_map = { probs = "labels" }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::model::TensorSpec;

/// A `config.toml` that declares a pipeline: only the `[pipeline]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// The declaration itself.
    pub pipeline: PipelineDecl,
}

/// A pipeline as declared.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineDecl {
    /// End-to-end objective of root requests that name none.
    #[serde(with = "humantime_serde")]
    pub slo: Duration,
    /// `true`: a sub-request below a fan-out that fails leaves its row out of the answer
    /// (which says so) instead of failing the whole root request.
    #[serde(default)]
    pub partial_results: bool,
    /// How the objective becomes stage deadlines: `"even"` (default) or `"tuned"`.
    #[serde(default)]
    pub budget: BudgetKind,
    /// The root request's tensors, one item each (no batch dimension).
    pub inputs: Vec<TensorSpec>,
    /// Pipeline tensors returned, in this order.
    pub outputs: Vec<String>,
    /// The stages, in any order; `after` makes the tree.
    pub stages: Vec<StageDecl>,
}

/// One stage as declared.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageDecl {
    /// Unique within the pipeline; `after` and the metrics name it.
    pub name: String,
    /// The registered model it runs.
    pub model: String,
    /// The model version it needs; absent: whichever is served.
    pub version: Option<u64>,
    /// The stage whose results it runs on; absent: the root request's inputs.
    pub after: Option<String>,
    /// How many requests one upstream result becomes; absent: one.
    #[serde(default)]
    pub fan_out: FanOut,
    /// Fan-out drawn at random when the upstream answer is emulated (simulator only).
    pub emulated_fan_out: Option<EmulatedFanOut>,
    /// Model input <- pipeline tensor.
    pub input_map: BTreeMap<String, String>,
    /// Model output -> pipeline tensor.
    #[serde(default)]
    pub output_map: BTreeMap<String, String>,
}

/// How a pipeline's end-to-end objective is split into stage deadlines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetKind {
    /// In proportion to the stages' batch-1 estimates (`budget::Proportional`).
    #[default]
    Even,
    /// SLOpt's ahead-of-time plan from the cascade's estimated rates
    /// (`crate::slopt::planner::TunedBudget`).
    Tuned,
}

impl BudgetKind {
    /// Its name in the declaration.
    pub fn name(self) -> &'static str {
        match self {
            BudgetKind::Even => "even",
            BudgetKind::Tuned => "tuned",
        }
    }
}

impl std::str::FromStr for BudgetKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [BudgetKind::Even, BudgetKind::Tuned]
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown budget '{s}': use \"even\" or \"tuned\""))
    }
}

/// How one upstream result becomes downstream requests.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(try_from = "FanOutTable")]
pub enum FanOut {
    /// One downstream request per upstream result.
    #[default]
    One,
    /// One request per row (leading dimension) of `tensor`.
    Rows { tensor: String },
    /// One request per row of `rows` whose entry in `score` is at least `min`.
    Threshold {
        rows: String,
        score: String,
        min: f64,
    },
}

impl FanOut {
    /// The tensor whose rows are fanned out, if any.
    pub fn rows(&self) -> Option<&str> {
        match self {
            FanOut::One => None,
            FanOut::Rows { tensor } => Some(tensor),
            FanOut::Threshold { rows, .. } => Some(rows),
        }
    }
}

/// `fan_out = { rows = ..., score = ..., min = ... }` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FanOutTable {
    rows: String,
    score: Option<String>,
    min: Option<f64>,
}

impl TryFrom<FanOutTable> for FanOut {
    type Error = String;

    fn try_from(table: FanOutTable) -> Result<Self, String> {
        match (table.score, table.min) {
            (None, None) => Ok(FanOut::Rows { tensor: table.rows }),
            (Some(score), Some(min)) if min.is_finite() => Ok(FanOut::Threshold {
                rows: table.rows,
                score,
                min,
            }),
            (Some(_), Some(min)) => Err(format!("fan_out.min must be a finite number, not {min}")),
            (Some(_), None) => Err("fan_out.score needs a threshold: add `min = ...`".into()),
            (None, Some(_)) => {
                Err("fan_out.min needs the tensor it applies to: add `score = ...`".into())
            }
        }
    }
}

/// The distribution of an emulated fan-out: a count with this mean and variance.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulatedFanOut {
    /// Mean number of downstream requests per upstream result.
    pub mean: f64,
    /// Their variance: equal to the mean gives Poisson, above it negative binomial, below
    /// it binomial.
    pub variance: f64,
}

impl PipelineFile {
    /// Parses a `config.toml`; the error names the offending key.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Whether configuration text declares a pipeline (has a `[pipeline]` table), to tell
    /// a pipeline directory from a model's before parsing it as either.
    pub fn declares_pipeline(text: &str) -> bool {
        toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("pipeline"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        [pipeline]
        slo = "250ms"
        inputs = [{ name = "image", datatype = "FP32", shape = [3, 32, 32] }]
        outputs = ["scores", "labels"]

        [[pipeline.stages]]
        name = "detect"
        model = "detector"
        input_map = { input = "image" }
        output_map = { scores = "scores", crops = "crops" }

        [[pipeline.stages]]
        name = "classify"
        model = "classifier"
        version = 2
        after = "detect"
        fan_out = { rows = "crops", score = "scores", min = 0.5 }
        emulated_fan_out = { mean = 2.0, variance = 3.0 }
        input_map = { input = "crops" }
        output_map = { probs = "labels" }
    "#;

    #[test]
    fn the_documented_example_parses() {
        let file = PipelineFile::parse(EXAMPLE).unwrap();
        let p = file.pipeline;
        assert_eq!(p.slo, Duration::from_millis(250));
        assert!(!p.partial_results);
        assert_eq!(p.budget, BudgetKind::Even);
        let tuned = EXAMPLE.replace("slo = ", "budget = \"tuned\"\nslo = ");
        let tuned = PipelineFile::parse(&tuned).unwrap().pipeline;
        assert_eq!(tuned.budget, BudgetKind::Tuned);
        let wrong = EXAMPLE.replace("slo = ", "budget = \"fast\"\nslo = ");
        assert!(PipelineFile::parse(&wrong).unwrap_err().contains("fast"));
        assert_eq!(p.stages[0].fan_out, FanOut::One);
        assert_eq!(
            p.stages[1].fan_out,
            FanOut::Threshold {
                rows: "crops".into(),
                score: "scores".into(),
                min: 0.5
            }
        );
        assert_eq!(p.stages[1].version, Some(2));
        assert_eq!(p.stages[1].emulated_fan_out.unwrap().variance, 3.0);
        assert!(PipelineFile::declares_pipeline(EXAMPLE));
        assert!(!PipelineFile::declares_pipeline("max_batch_size = 4"));
    }

    #[test]
    fn mistakes_are_named() {
        let unknown = EXAMPLE.replace("partial", "x").replace("slo =", "slow =");
        assert!(PipelineFile::parse(&unknown).unwrap_err().contains("slow"));
        let half = EXAMPLE.replace(", min = 0.5", "");
        assert!(PipelineFile::parse(&half).unwrap_err().contains("min"));
        let rows = EXAMPLE.replace("score = \"scores\", ", "");
        assert!(PipelineFile::parse(&rows).unwrap_err().contains("score"));
    }
}
