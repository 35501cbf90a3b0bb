use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::gpu::cpu::profile::ProfileSettings;
use crate::model::DataType;

/// A fresh directory under the system's temporary directory, removed on drop.
struct TempRoot(PathBuf);

impl TempRoot {
    fn new(tag: &str) -> Self {
        let unique = format!(
            "clockwork-repo-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let root = std::env::temp_dir().join(unique.replace(['(', ')'], ""));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Self(root)
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn quick() -> PrepareSettings {
    let profiling = ProfileSettings {
        threads: 1,
        warmup: 1,
        runs: 3,
        loads: 1,
    };
    PrepareSettings::single_cpu(Duration::from_millis(100), profiling)
}

#[test]
fn the_zoo_is_written_read_and_prepared() {
    let root = TempRoot::new("zoo");
    let written = zoo::write_missing(&root.0).unwrap();
    assert_eq!(written, zoo::MODELS);
    // A second call leaves existing models alone.
    assert!(zoo::write_missing(&root.0).unwrap().is_empty());
    let repository = Repository::new(&root.0);
    assert_eq!(
        repository.names().unwrap(),
        ["classifier", "cnn", "detector", "mlp", "resnet"]
    );
    let stored = repository.read("mlp").unwrap();
    assert_eq!(stored.version, 1);
    let prepared = prepare(&stored, &quick()).unwrap();
    let spec = &prepared.spec;
    assert!(spec.batched);
    assert_eq!(spec.inputs[0].shape, vec![256]);
    assert_eq!(spec.outputs[0].name, "output");
    assert_eq!(spec.outputs[0].shape, vec![10]);
    assert_eq!(spec.outputs[0].datatype, DataType::Fp32);
    assert_eq!(spec.slo, 50_000_000);
    let sizes: Vec<u32> = spec.profile.batches.iter().map(|b| b.batch).collect();
    assert_eq!(sizes, [1, 2, 4, 8, 16]);
    assert!(spec.profile.batches.iter().all(|b| b.latency > 0));
    // Five plans, each with its own (repacked, slightly padded) copy of ~1.6 MB of weights.
    let weights = (256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10) * 4;
    let held = spec.profile.weight_bytes;
    assert!(
        held >= 5 * weights && held < 5 * weights * 11 / 10,
        "{held}"
    );
    assert!(!prepared.reused_profile());
    // A restart reuses the stored profile.
    let again = prepare(&repository.read("mlp").unwrap(), &quick()).unwrap();
    assert!(again.reused_profile());
    assert_eq!(again.spec, prepared.spec);
    // A changed graph is profiled anew.
    zoo::write(&root.0, "mlp", zoo::Batch::Dynamic, 7).unwrap();
    let changed = prepare(&repository.read("mlp").unwrap(), &quick()).unwrap();
    assert!(!changed.reused_profile());
}

#[test]
fn a_fixed_batch_dimension_serves_batch_one_only() {
    let root = TempRoot::new("fixed");
    zoo::write(&root.0, "cnn", zoo::Batch::FixedOne, 1).unwrap();
    let stored = Repository::new(&root.0).read("cnn").unwrap();
    let spec = prepare(&stored, &quick()).unwrap().spec;
    assert!(spec.batched);
    assert_eq!(spec.inputs[0].shape, vec![3, 32, 32]);
    assert_eq!(spec.profile.batches.len(), 1);
    assert_eq!(spec.profile.batches[0].batch, 1);
    // Asking for more than the graph allows is refused, naming the problem.
    std::fs::write(root.0.join("cnn").join(CONFIG_FILE), "max_batch_size = 4\n").unwrap();
    let stored = Repository::new(&root.0).read("cnn").unwrap();
    let err = prepare(&stored, &quick()).unwrap_err().to_string();
    assert!(err.contains("cnn") && err.contains("fixed to 1"), "{err}");
}

#[test]
fn broken_models_are_refused_with_the_reason() {
    let root = TempRoot::new("broken");
    zoo::write(&root.0, "mlp", zoo::Batch::Dynamic, 1).unwrap();
    let repository = Repository::new(&root.0);
    // Not a graph at all.
    let garbage = root.0.join("garbage").join("1");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join(MODEL_FILE), b"\x08\x07not onnx at all").unwrap();
    let err = prepare(&repository.read("garbage").unwrap(), &quick()).unwrap_err();
    assert!(matches!(err, RepositoryError::Graph { .. }), "{err}");
    assert!(err.to_string().starts_with("model 'garbage'"), "{err}");
    // A misspelt configuration key.
    let typo = root.0.join("typo");
    std::fs::create_dir_all(typo.join("1")).unwrap();
    std::fs::copy(
        root.0.join("mlp/1").join(MODEL_FILE),
        typo.join("1").join(MODEL_FILE),
    )
    .unwrap();
    std::fs::write(typo.join(CONFIG_FILE), "max_batchsize = 4\n").unwrap();
    let err = repository.read("typo").unwrap_err().to_string();
    assert!(err.contains("max_batchsize"), "{err}");
    // Declared tensors that disagree with the graph.
    std::fs::write(
        typo.join(CONFIG_FILE),
        "inputs = [{ name = \"input\", datatype = \"FP32\", shape = [255] }]\n",
    )
    .unwrap();
    let err = prepare(&repository.read("typo").unwrap(), &quick()).unwrap_err();
    assert!(err.to_string().contains("255"), "{err}");
    // No version directory, an unknown name, a path out of the repository.
    std::fs::create_dir_all(root.0.join("empty")).unwrap();
    let err = repository.read("empty").unwrap_err();
    assert!(matches!(err, RepositoryError::NoVersion { .. }), "{err}");
    assert!(matches!(
        repository.read("nope"),
        Err(RepositoryError::NotFound { .. })
    ));
    for name in ["../etc", "..", ".", "/etc", "a\\b", ""] {
        let err = repository.read(name).unwrap_err();
        assert!(
            matches!(err, RepositoryError::Outside { .. }),
            "{name}: {err}"
        );
        let err = repository.pipeline(name).unwrap_err();
        assert!(
            matches!(err, RepositoryError::Outside { .. }),
            "{name}: {err}"
        );
    }
    // The good model is unaffected by its neighbours.
    assert!(prepare(&repository.read("mlp").unwrap(), &quick()).is_ok());
}

#[test]
fn the_configured_version_is_served() {
    let root = TempRoot::new("versions");
    zoo::write(&root.0, "mlp", zoo::Batch::Dynamic, 1).unwrap();
    let dir = root.0.join("mlp");
    std::fs::create_dir_all(dir.join("3")).unwrap();
    std::fs::copy(
        dir.join("1").join(MODEL_FILE),
        dir.join("3").join(MODEL_FILE),
    )
    .unwrap();
    let repository = Repository::new(&root.0);
    assert_eq!(repository.read("mlp").unwrap().version, 3);
    std::fs::write(dir.join(CONFIG_FILE), "version = 1\n").unwrap();
    assert_eq!(repository.read("mlp").unwrap().version, 1);
    std::fs::write(dir.join(CONFIG_FILE), "version = 2\n").unwrap();
    assert!(matches!(
        repository.read("mlp"),
        Err(RepositoryError::MissingVersion { version: 2, .. })
    ));
}

#[test]
fn each_device_kind_gets_its_own_stored_profile() {
    let root = TempRoot::new("kinds");
    zoo::write(&root.0, "mlp", zoo::Batch::Dynamic, 1).unwrap();
    let repository = Repository::new(&root.0);
    let two_kinds = PrepareSettings {
        threads: vec![1, 2, 1],
        ..quick()
    };
    let prepared = prepare(&repository.read("mlp").unwrap(), &two_kinds).unwrap();
    let kinds: Vec<&str> = prepared.profiles.iter().map(|p| p.kind.as_str()).collect();
    assert_eq!(kinds, ["cpu", "cpu-2t"], "one profile per distinct kind");
    let seeds = prepared.kind_profiles();
    assert_eq!(
        seeds[0].profile, prepared.spec.profile,
        "the first is the fallback"
    );
    assert_eq!(seeds[1].profile, prepared.profiles[1].profile.seed());
    // One build serves every kind; its LOAD is the cheap one, not the build.
    let plans = prepared.prepared.cpu.as_ref().expect("plans built");
    assert_eq!(plans.weight_bytes(), prepared.spec.profile.weight_bytes);
    assert!((prepared.profile().load.p99 as u64) < prepared.build);
    // Both are stored and reused on restart; each kind is matched on its own.
    let again = prepare(&repository.read("mlp").unwrap(), &two_kinds).unwrap();
    assert!(again.reused_profile());
    let seed = |r: &Registration, i: usize| r.profiles[i].profile.seed();
    assert_eq!(seed(&again, 1), seed(&prepared, 1));
    let only_two = PrepareSettings {
        threads: vec![2],
        ..quick()
    };
    let two = prepare(&repository.read("mlp").unwrap(), &only_two).unwrap();
    assert!(two.reused_profile());
    assert_eq!(two.spec.profile, prepared.profiles[1].profile.seed());
    let four = PrepareSettings {
        threads: vec![4, 1],
        ..quick()
    };
    let mixed = prepare(&repository.read("mlp").unwrap(), &four).unwrap();
    let reused: Vec<(&str, bool)> = mixed
        .profiles
        .iter()
        .map(|p| (p.kind.as_str(), p.reused))
        .collect();
    assert_eq!(reused, [("cpu-4t", false), ("cpu", true)]);
    let stored = super::store::load_all(&root.0.join("mlp").join("1"));
    let mut kinds: Vec<&str> = stored.iter().map(|s| s.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["cpu", "cpu-2t", "cpu-4t"]);
}

#[test]
fn ort_groups_add_their_kinds_and_alone_leave_no_cpu_kind() {
    let both = PrepareSettings {
        threads: vec![1],
        ort_threads: vec![1, 2, 1],
        ..quick()
    };
    let names = |kinds: Vec<(String, ProfileSettings)>| -> Vec<String> {
        kinds.into_iter().map(|(k, _)| k).collect()
    };
    assert_eq!(names(both.kinds()), ["cpu"]);
    assert_eq!(names(both.ort_kinds()), ["ort", "ort-2t"]);
    // Only ort groups: the first ort kind is the fallback, no cpu kind is profiled.
    let alone = PrepareSettings {
        threads: Vec::new(),
        ..both
    };
    assert!(alone.kinds().is_empty());
    // No group at all: one single-threaded cpu kind, and nothing for ONNX Runtime.
    let none = PrepareSettings {
        threads: Vec::new(),
        ort_threads: Vec::new(),
        ..quick()
    };
    assert_eq!(names(none.kinds()), ["cpu"]);
    assert!(none.ort_kinds().is_empty());
}

/// A model directory that is a symbolic link out of the repository is refused, though
/// its name is plain; a link inside the repository is served.
#[cfg(unix)]
#[test]
fn links_out_of_the_repository_are_refused() {
    let root = TempRoot::new("links");
    let outside = TempRoot::new("links-outside");
    std::fs::create_dir_all(outside.0.join("1")).unwrap();
    std::fs::create_dir_all(root.0.join("inside/1")).unwrap();
    std::os::unix::fs::symlink(&outside.0, root.0.join("escape")).unwrap();
    std::os::unix::fs::symlink(root.0.join("inside"), root.0.join("alias")).unwrap();
    let repository = Repository::new(&root.0);
    let err = repository.read("escape").unwrap_err();
    assert!(matches!(err, RepositoryError::Outside { .. }), "{err}");
    assert!(err.to_string().contains("outside the repository"), "{err}");
    assert!(repository.model_dir("alias").is_ok());
}

#[test]
fn a_stored_profile_no_measurement_could_have_made_is_measured_anew() {
    let root = TempRoot::new("implausible");
    zoo::write(&root.0, "mlp", zoo::Batch::Dynamic, 1).unwrap();
    let repository = Repository::new(&root.0);
    let first = prepare(&repository.read("mlp").unwrap(), &quick()).unwrap();
    let dir = root.0.join("mlp").join("1");
    let rewrite = |edit: &dyn Fn(&mut store::StoredProfile)| {
        let mut records = store::load_all(&dir);
        records.iter_mut().for_each(edit);
        std::fs::write(
            dir.join(PROFILE_FILE),
            serde_json::to_string(&records).unwrap(),
        )
        .unwrap();
        prepare(&repository.read("mlp").unwrap(), &quick()).unwrap()
    };
    // Edited within what a measurement could be: trusted.
    let slower = rewrite(&|r| r.profile.load.p99 *= 2.0);
    assert!(slower.reused_profile());
    assert_eq!(
        slower.spec.profile.load_latency,
        2 * first.spec.profile.load_latency
    );
    // What the plans tell is taken from them, whatever the file says.
    let heavy = rewrite(&|r| r.profile.weight_bytes = u64::MAX);
    assert!(heavy.reused_profile());
    assert_eq!(
        heavy.spec.profile.weight_bytes,
        first.spec.profile.weight_bytes
    );
    let damaged: [&dyn Fn(&mut store::StoredProfile); 4] = [
        &|r| r.profile.load.p99 = 1e300,
        &|r| r.profile.batches[1].latency.min = -1.0,
        &|r| r.profile.batches[2].latency.cv = f64::NAN,
        &|r| r.profile.batches.truncate(4),
    ];
    for edit in damaged {
        let again = rewrite(edit);
        assert!(!again.reused_profile());
        assert!(again.spec.profile.load_latency < crate::time::LONGEST);
        assert_eq!(again.spec.profile.batches.len(), 5);
        // The new measurement replaced the damaged record.
        assert!(store::load_all(&dir)
            .iter()
            .all(store::StoredProfile::plausible));
    }
}
