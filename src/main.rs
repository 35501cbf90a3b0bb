//! The `clockwork` command line: a thin shell over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use clockwork::config::Config;
use tracing_subscriber::EnvFilter;

/// A model-serving runtime with predictable latency.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the configured models on the configured devices over HTTP.
    Serve {
        /// Configuration file.
        #[arg(long, default_value = "config.toml")]
        config: PathBuf,
        /// Overrides `server.listen` (port 0 picks a free port).
        #[arg(long)]
        listen: Option<String>,
    },
}

fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    let result = match Cli::parse().command {
        Command::Serve { config, listen } => serve(config, listen),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(path: PathBuf, listen: Option<String>) -> anyhow::Result<()> {
    let mut config = Config::load(&path)?;
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    actix_web::rt::System::new().block_on(clockwork::serve::run(config))
}
