//! The `[cluster]` section: remote workers (see `crate::remote`).

use serde::Deserialize;

/// Where workers join the controller, and what they must show.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// The controller's address for workers (`"0.0.0.0:7070"`); absent: no workers join,
    /// the runtime stays one process. Set, the controller may have no devices of its own.
    pub listen: Option<String>,
    /// A secret every worker must send; absent: any worker may join. A worker reads its
    /// own from here or from `CLOCKWORK_CLUSTER_TOKEN`, which wins.
    pub token: Option<String>,
    /// Readiness (`GET /v2/health/ready`) answers 503 until this many devices have joined
    /// (the controller's own count too).
    pub wait_for_devices: usize,
}

/// The environment variable a worker's token may come from (it wins over the file's).
pub const TOKEN_ENV: &str = "CLOCKWORK_CLUSTER_TOKEN";

impl ClusterConfig {
    /// The token in force: the environment's if set, else the file's.
    pub fn token_with_env(&self) -> Option<String> {
        std::env::var(TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| self.token.clone())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn the_cluster_section_is_read_and_off_by_default() {
        let config = Config::parse("").unwrap();
        assert_eq!(config.cluster.listen, None);
        let text = "[cluster]\nlisten = \"127.0.0.1:7070\"\ntoken = \"s\"\nwait_for_devices = 2\n";
        let config = Config::parse(text).unwrap();
        assert_eq!(config.cluster.listen.as_deref(), Some("127.0.0.1:7070"));
        assert_eq!(config.cluster.token.as_deref(), Some("s"));
        assert_eq!(config.cluster.wait_for_devices, 2);
        assert!(Config::parse("[cluster]\nlisen = \"x\"\n").is_err());
    }
}
