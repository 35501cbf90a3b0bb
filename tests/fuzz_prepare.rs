//! Fuzzing a whole repository `prepare` (`src/repository/prepare.rs`): a model directory
//! whose graph, `config.toml` and stored `profile.json` are mutated is read, configured,
//! compiled and profiled (or its stored profile reused), and what it registers seeds the
//! Clockwork policy, which then serves requests on the in-memory testbed. Each step may
//! refuse with an error; none panics, and every request admitted gets exactly one answer.
//!
//! The profile is outside data too: `profile.json` is read back on every restart, and a
//! hand-edited or damaged one must not take the controller down.

mod cpu_support;
mod fuzz_support;

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use clockwork::config::PolicyConfig;
use clockwork::gpu::cpu::profile::ProfileSettings;
use clockwork::model::{BatchLatency, ModelId, ModelProfile, RequestId};
use clockwork::repository::zoo::{self, Batch};
use clockwork::repository::{
    prepare, PrepareSettings, Registration, Repository, CONFIG_FILE, MODEL_FILE, PROFILE_FILE,
};
use clockwork::scheduler::testbed::Testbed;
use clockwork::scheduler::{ClockworkPolicy, DeviceInfo, ModelInfo, Policy, Request};
use clockwork::time::{Nanos, MS, US};
use cpu_support::TempDir;
use fuzz_support::{apply, cases, config, edit, Edit};
use proptest::prelude::*;

/// Small models of three shapes (dense, convolutional, two inputs); profiling each takes
/// milliseconds with [`settings`].
const MODELS: [&str; 3] = ["mlp", "cnn", "detector"];

/// Pages of the testbed's device, and bytes per page: the zoo's models fit.
const DEVICE_PAGES: u32 = 64;
const PAGE_BYTES: u64 = 16 << 20;

/// One model's files, as the zoo writes them and a first `prepare` completes them.
struct Seed {
    name: &'static str,
    graph: Vec<u8>,
    config: String,
    profile: String,
}

/// Profiling as short as it can be: these inputs test reading, not timing.
fn settings() -> PrepareSettings {
    let profiling = ProfileSettings {
        threads: 1,
        warmup: 0,
        runs: 1,
        loads: 1,
    };
    PrepareSettings::single_cpu(Duration::from_millis(100), profiling)
}

/// Writes a model directory `name` into `root` holding these files (`profile.json` only
/// when given).
fn write(root: &Path, name: &str, graph: &[u8], config: &[u8], profile: Option<&[u8]>) {
    let version = root.join(name).join("1");
    let _ = std::fs::remove_dir_all(root.join(name));
    std::fs::create_dir_all(&version).expect("create the version directory");
    std::fs::write(root.join(name).join(CONFIG_FILE), config).expect("write the config");
    std::fs::write(version.join(MODEL_FILE), graph).expect("write the graph");
    if let Some(profile) = profile {
        std::fs::write(version.join(PROFILE_FILE), profile).expect("write the profile");
    }
}

/// Every model prepared once, unmutated, and the profile that wrote.
fn seeds() -> &'static [Seed] {
    static SEEDS: OnceLock<Vec<Seed>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let root = TempDir::new("fuzz-prepare-seeds");
        MODELS
            .iter()
            .map(|&name| {
                let graph = zoo::build(name, Batch::Dynamic, zoo::SEED).expect("zoo model");
                let config = zoo::config_text(name).to_owned();
                write(root.path(), name, &graph, config.as_bytes(), None);
                let stored = Repository::new(root.path()).read(name).expect("read");
                prepare(&stored, &settings()).expect("a zoo model is prepared");
                let written = stored.dir.join(PROFILE_FILE);
                let profile = std::fs::read_to_string(written).expect("profile.json written");
                Seed {
                    name,
                    graph,
                    config,
                    profile,
                }
            })
            .collect()
    })
}

/// What a device of the registration's first kind really takes: 2 ms and 0.5 ms an item,
/// at the batch sizes it registered (whatever its profile claims).
fn truth(registration: &Registration) -> ModelProfile {
    let batches = registration
        .spec
        .profile
        .batches
        .iter()
        .map(|b| BatchLatency {
            batch: b.batch,
            latency: 2 * MS + u64::from(b.batch) * 500 * US,
        });
    ModelProfile {
        weight_bytes: registration.spec.profile.weight_bytes,
        load_latency: 10 * MS,
        batches: batches.collect(),
    }
}

/// Registers the model with the Clockwork policy as the runtime does, then offers it a
/// request every 2 ms for 200 ms on one device of its kind; answers what went wrong.
fn serve(registration: &Registration) -> Vec<String> {
    let mut policy = ClockworkPolicy::new(&PolicyConfig::default());
    policy.add_device(DeviceInfo {
        kind: registration.profiles[0].kind.clone(),
        pages: DEVICE_PAGES,
    });
    let pages = registration.spec.profile.pages(PAGE_BYTES);
    policy.add_model(ModelInfo {
        pages,
        profile: registration.spec.profile.clone(),
        by_kind: registration.kind_profiles(),
        devices: None,
    });
    let max_batch = PolicyConfig::default().max_batch as usize;
    let truth = vec![(pages, truth(registration))];
    let mut testbed = Testbed::new(policy, &[DEVICE_PAGES], truth, max_batch);
    let slo: Nanos = registration.spec.slo;
    let requests = (0..100u64).map(|i| Request {
        id: RequestId(i),
        model: ModelId(0),
        arrival: i * 2 * MS,
        slo,
        latest_finish: None,
        items: 1,
    });
    testbed.run(requests).violations
}

/// Numbers that break arithmetic, put in place of a stored profile's numbers (its
/// durations are nanoseconds as floats; its sizes and batch sizes integers).
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "0.4",
    "1e300",
    "-1e300",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
];

/// `text` with its `k`-th number (modulo how many there are) replaced by `value`.
fn renumber(text: &str, k: usize, value: &str) -> String {
    let bytes = text.as_bytes();
    let mut numbers = Vec::new();
    let (mut i, mut quoted) = (0, false);
    while i < bytes.len() {
        // Not inside a string (hex hashes, kind names such as `cpu-4t`).
        quoted ^= bytes[i] == b'"';
        if !quoted && (bytes[i].is_ascii_digit() || bytes[i] == b'-') {
            let end = (i + 1..bytes.len())
                .find(|&j| !matches!(bytes[j], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'))
                .unwrap_or(bytes.len());
            numbers.push(i..end);
            i = end;
        } else {
            i += 1;
        }
    }
    if numbers.is_empty() {
        return text.to_owned();
    }
    let range = numbers[k % numbers.len()].clone();
    format!("{}{value}{}", &text[..range.start], &text[range.end..])
}

/// What one case changes: edits of the graph, the configuration and the stored profile,
/// and numbers of the stored profile replaced (by index and [`NUMBERS`] entry) first.
#[derive(Clone, Debug)]
struct Mutation {
    edits: [Vec<Edit>; 3],
    numbers: Vec<(usize, usize)>,
}

/// Mostly one file at a time: a stored profile is reused only beside the graph and
/// configuration it was measured for, so its own mutations reach the policy only when
/// the others are left alone.
fn mutation() -> impl Strategy<Value = Mutation> {
    let edits = |max| proptest::collection::vec(edit(), 0..=max);
    let numbers = proptest::collection::vec((any::<usize>(), 0..NUMBERS.len()), 0..=3);
    (0usize..5, [edits(4), edits(4), edits(4)], numbers).prop_map(|(which, edits, numbers)| {
        let keep = |i: usize, e: &Vec<Edit>| {
            if which >= 3 || which == i {
                e.clone()
            } else {
                Vec::new()
            }
        };
        Mutation {
            edits: [keep(0, &edits[0]), keep(1, &edits[1]), keep(2, &edits[2])],
            numbers: if which == 4 || which == 2 {
                numbers
            } else {
                Vec::new()
            },
        }
    })
}

/// Prepares the model directory written from `seed` with `mutation`; a registration must
/// then serve.
fn prepare_mutated(root: &Path, seed: &Seed, mutation: &Mutation) {
    let [graph, config, profile] = &mutation.edits;
    let graph = apply(&seed.graph, graph);
    let config = apply(seed.config.as_bytes(), config);
    let mut renumbered = seed.profile.clone();
    for &(k, value) in &mutation.numbers {
        renumbered = renumber(&renumbered, k, NUMBERS[value]);
    }
    let profile = apply(renumbered.as_bytes(), profile);
    write(root, seed.name, &graph, &config, Some(&profile));
    let Ok(stored) = Repository::new(root).read(seed.name) else {
        return;
    };
    if let Ok(registration) = prepare(&stored, &settings()) {
        let violations = serve(&registration);
        assert!(violations.is_empty(), "{violations:?}");
    }
}

#[test]
fn the_seeds_are_prepared_and_served() {
    let root = TempDir::new("fuzz-prepare-seed-serve");
    for seed in seeds() {
        write(
            root.path(),
            seed.name,
            &seed.graph,
            seed.config.as_bytes(),
            Some(seed.profile.as_bytes()),
        );
        let stored = Repository::new(root.path()).read(seed.name).expect("read");
        let registration = prepare(&stored, &settings()).expect("prepared");
        assert!(
            registration.reused_profile(),
            "{}: profile.json reused",
            seed.name
        );
        assert_eq!(serve(&registration), Vec::<String>::new(), "{}", seed.name);
    }
}

#[test]
fn renumbering_replaces_numbers_only() {
    let text = r#"{"kind": "cpu-4t", "hash": "00ff", "p99": 1.5e6, "batch": 4}"#;
    assert_eq!(renumber(text, 0, "-1"), text.replace("1.5e6", "-1"));
    assert_eq!(renumber(text, 1, "0"), text.replace(": 4}", ": 0}"));
}

proptest! {
    // Each case profiles a model (milliseconds): a quarter of the cases.
    #![proptest_config(ProptestConfig { cases: cases().div_ceil(4), ..config() })]

    #[test]
    fn a_mutated_model_directory_is_prepared_or_refused(
        model in 0..MODELS.len(),
        mutation in mutation(),
    ) {
        let root = TempDir::new("fuzz-prepare-cases");
        prepare_mutated(root.path(), &seeds()[model], &mutation);
    }
}
