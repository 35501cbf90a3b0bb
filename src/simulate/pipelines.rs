//! The built-in emulated pipelines of `clockwork simulate --pipeline`: their stage models
//! (built-in V100 profiles, `gpu::profiles`) and their declarations, written in the
//! repository's `[pipeline]` format so that the simulator serves them exactly as a
//! repository would.
//!
//! - `traffic`: a traffic-monitoring cascade. A detector finds cars and people in a frame;
//!   a car classifier runs once per car and a person classifier once per person. On `sim`
//!   devices the number of each is drawn from a seeded distribution (`--fanout-mean`,
//!   `--fanout-var`), the same for both branches.
//! - `cascade`: a conditional two-model cascade. A cheap classifier answers every image
//!   and says how unsure it is; the expensive one runs only when it is unsure, on the
//!   image's features (`[512]`), for a fraction `--escalate` of the images (a draw of 0 or 1
//!   per image).

use std::fmt::{self, Write as _};
use std::str::FromStr;

use crate::pipeline::BudgetKind;
use crate::time::Nanos;

/// A built-in emulated pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinPipeline {
    Traffic,
    Cascade,
}

/// Names of the built-in pipelines, as `--pipeline` takes them.
pub const PIPELINES: &[&str] = &["traffic", "cascade"];

/// `--pipeline` named no built-in pipeline.
#[derive(Debug, thiserror::Error)]
#[error("no built-in pipeline '{0}' (there are: traffic, cascade)")]
pub struct UnknownPipeline(pub String);

impl FromStr for BuiltinPipeline {
    type Err = UnknownPipeline;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "traffic" => Ok(Self::Traffic),
            "cascade" => Ok(Self::Cascade),
            _ => Err(UnknownPipeline(s.to_owned())),
        }
    }
}

impl fmt::Display for BuiltinPipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Traffic => "traffic",
            Self::Cascade => "cascade",
        })
    }
}

/// The distribution of downstream requests per upstream answer on emulated devices
/// (the declaration's `emulated_fan_out`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmulatedFanOut {
    pub mean: f64,
    pub variance: f64,
}

/// How a built-in pipeline is run: which one, and its emulated fan-outs.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineArgs {
    pub which: BuiltinPipeline,
    /// Objects per frame on each branch of `traffic`.
    pub fan_out: EmulatedFanOut,
    /// Fraction of images `cascade` sends on to its expensive model.
    pub escalate: f64,
    /// How the objective is split into stage deadlines (`budget` in the declaration).
    pub budget: BudgetKind,
}

/// How a stage's requests are made from its parent's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Edge {
    /// On the root's inputs.
    Root,
    /// One request per row of `rows`, below the parent `after`.
    Rows {
        after: &'static str,
        rows: &'static str,
    },
    /// One request per row of `rows` whose `score` is at least `min`.
    Threshold {
        after: &'static str,
        rows: &'static str,
        score: &'static str,
        min: f64,
    },
}

/// One stage of a built-in pipeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stage {
    pub name: &'static str,
    /// The stage's model: a built-in profile, registered under the same name.
    pub model: &'static str,
    pub edge: Edge,
    /// (model input, pipeline tensor).
    pub input_map: &'static [(&'static str, &'static str)],
    /// (model output, pipeline tensor).
    pub output_map: &'static [(&'static str, &'static str)],
}

const TRAFFIC: &[Stage] = &[
    Stage {
        name: "detect",
        model: "traffic-detector",
        edge: Edge::Root,
        input_map: &[("image", "image")],
        output_map: &[("cars", "cars"), ("people", "people")],
    },
    Stage {
        name: "cars",
        model: "car-classifier",
        edge: Edge::Rows {
            after: "detect",
            rows: "cars",
        },
        input_map: &[("crop", "cars")],
        output_map: &[("make", "makes")],
    },
    Stage {
        name: "people",
        model: "person-classifier",
        edge: Edge::Rows {
            after: "detect",
            rows: "people",
        },
        input_map: &[("crop", "people")],
        output_map: &[("identity", "identities")],
    },
];

const CASCADE: &[Stage] = &[
    Stage {
        name: "quick",
        model: "cheap-classifier",
        edge: Edge::Root,
        input_map: &[("image", "image")],
        output_map: &[
            ("probs", "quick"),
            ("doubt", "doubt"),
            ("escalate", "escalate"),
        ],
    },
    Stage {
        name: "careful",
        model: "expensive-classifier",
        edge: Edge::Threshold {
            after: "quick",
            rows: "escalate",
            score: "doubt",
            min: 0.5,
        },
        input_map: &[("features", "escalate")],
        output_map: &[("probs", "careful")],
    },
];

impl BuiltinPipeline {
    /// Its stages, parents before children.
    pub fn stages(self) -> &'static [Stage] {
        match self {
            Self::Traffic => TRAFFIC,
            Self::Cascade => CASCADE,
        }
    }

    /// The root's input: (name, shape of one item), all FP32.
    pub fn input(self) -> (&'static str, &'static [i64]) {
        match self {
            Self::Traffic => ("image", &[3, 300, 300]),
            Self::Cascade => ("image", &[3, 224, 224]),
        }
    }

    /// The pipeline tensors it answers with.
    pub fn outputs(self) -> &'static [&'static str] {
        match self {
            Self::Traffic => &["makes", "identities"],
            Self::Cascade => &["quick", "careful"],
        }
    }
}

impl PipelineArgs {
    /// The emulated fan-out of a stage below a fan-out edge.
    pub fn emulated(&self) -> EmulatedFanOut {
        match self.which {
            BuiltinPipeline::Traffic => self.fan_out,
            // A Bernoulli draw: escalated or not.
            BuiltinPipeline::Cascade => EmulatedFanOut {
                mean: self.escalate,
                variance: self.escalate * (1.0 - self.escalate),
            },
        }
    }

    /// Its `config.toml`, with `slo` as the end-to-end objective.
    pub fn declaration(&self, slo: Nanos) -> String {
        let which = self.which;
        let mut toml = String::from("[pipeline]\n");
        let (input, shape) = which.input();
        let _ = writeln!(toml, "slo = \"{}us\"", slo / 1_000);
        toml.push_str("partial_results = false\n");
        let _ = writeln!(toml, "budget = \"{}\"", self.budget.name());
        let _ = writeln!(
            toml,
            "inputs = [{{ name = \"{input}\", datatype = \"FP32\", shape = {shape:?} }}]"
        );
        let _ = writeln!(toml, "outputs = {:?}", which.outputs());
        let emulated = self.emulated();
        for stage in which.stages() {
            let _ = write!(
                toml,
                "\n[[pipeline.stages]]\nname = \"{}\"\nmodel = \"{}\"\n",
                stage.name, stage.model
            );
            let fan_out = match stage.edge {
                Edge::Root => None,
                Edge::Rows { after, rows } => Some((after, format!("{{ rows = \"{rows}\" }}"))),
                Edge::Threshold {
                    after,
                    rows,
                    score,
                    min,
                } => Some((
                    after,
                    format!("{{ rows = \"{rows}\", score = \"{score}\", min = {min:?} }}"),
                )),
            };
            if let Some((after, fan_out)) = fan_out {
                let _ = writeln!(toml, "after = \"{after}\"\nfan_out = {fan_out}");
                let _ = writeln!(
                    toml,
                    "emulated_fan_out = {{ mean = {:?}, variance = {:?} }}",
                    emulated.mean, emulated.variance
                );
            }
            let _ = writeln!(toml, "input_map = {}", table(stage.input_map));
            let _ = writeln!(toml, "output_map = {}", table(stage.output_map));
        }
        toml
    }
}

/// An inline TOML table of string values.
fn table(pairs: &[(&str, &str)]) -> String {
    let items: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k} = \"{v}\""))
        .collect();
    format!("{{ {} }}", items.join(", "))
}

#[cfg(test)]
#[path = "pipelines_tests.rs"]
mod tests;
