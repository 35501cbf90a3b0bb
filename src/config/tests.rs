//! Tests of the server configuration: defaults, parsing, validation.

use super::*;

#[test]
fn empty_file_takes_paper_defaults() {
    let config = Config::parse("").unwrap();
    assert_eq!(config.policy.schedule_ahead, Duration::from_millis(5));
    assert_eq!(config.policy.estimate_window, 10);
    assert_eq!(config.runtime.page_bytes, 16 << 20);
    assert_eq!(config.policy.name, PolicyName::Clockwork);
}

#[test]
fn policy_names_round_trip_and_unknown_ones_are_named() {
    for name in PolicyName::ALL {
        assert_eq!(name.as_str().parse::<PolicyName>(), Ok(name));
        let text = format!("[policy]\nname = \"{name}\"\n");
        assert_eq!(Config::parse(&text).unwrap().policy.name, name);
    }
    let err = Config::parse("[policy]\nname = \"fifo\"\n").unwrap_err();
    let ConfigError::Parse { source, .. } = err else {
        panic!("expected a parse error, got {err}");
    };
    let message = source.to_string();
    assert!(message.contains("unknown policy 'fifo'"), "{message}");
    assert!(message.contains("clockwork-nodrop"), "{message}");
}

/// Mutation that breaks it: the grpc_listen/tls check removed from `validate`.
#[test]
fn grpc_with_tls_is_refused_until_grpc_has_tls() {
    let text = "[server]\ngrpc_listen = \"127.0.0.1:0\"\n[server.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n";
    let err = Config::parse(text).unwrap_err();
    assert!(
        err.to_string().contains("grpc_listen cannot be combined"),
        "{err}"
    );
    assert!(Config::parse("[server]\ngrpc_listen = \"127.0.0.1:0\"\n").is_ok());
}

#[test]
fn moved_keys_name_their_new_place() {
    let err = Config::parse("[policy]\npage_bytes = 1024\n").unwrap_err();
    assert!(err.to_string().contains("runtime.page_bytes"), "{err}");
    let err = Config::parse("[policy]\ndefault_slo = \"1s\"\n").unwrap_err();
    assert!(err.to_string().contains("runtime.default_slo"), "{err}");
    let text = "[runtime]\npage_bytes = 1024\ndefault_slo = \"1s\"\n";
    let config = Config::parse(text).unwrap();
    assert_eq!(config.runtime.page_bytes, 1024);
    assert_eq!(config.runtime.default_slo, Duration::from_secs(1));
}

#[test]
fn unknown_keys_are_named() {
    let err = Config::parse("[policy]\nschedule_ahaed = \"5ms\"\n").unwrap_err();
    let ConfigError::Parse { source, .. } = err else {
        panic!("expected a parse error, got {err}");
    };
    assert!(
        source
            .to_string()
            .contains("unknown field `schedule_ahaed`"),
        "{source}"
    );
}

#[test]
fn durations_are_humane() {
    let text = "[policy]\nschedule_ahead = \"10ms\"\n[[models]]\nname = \"a\"\nprofile = \"resnet50\"\nslo = \"250ms\"\n";
    let config = Config::parse(text).unwrap();
    assert_eq!(config.policy.schedule_ahead, Duration::from_millis(10));
    assert_eq!(config.models[0].slo, Some(Duration::from_millis(250)));
}

#[test]
fn bad_values_are_refused() {
    let err = Config::parse("[policy]\nmax_batch = 0\n").unwrap_err();
    assert!(err.to_string().contains("max_batch"), "{err}");
    let err = Config::parse("[policy]\nhindsight_weight = 0\n").unwrap_err();
    assert!(err.to_string().contains("hindsight_weight"), "{err}");
    let sim_auto = "[[devices]]\nbackend = \"sim\"\nprofile = \"v100\"\ncount = \"auto\"\n";
    let err = Config::parse(sim_auto).unwrap_err();
    assert!(err.to_string().contains("auto"), "{err}");
}
