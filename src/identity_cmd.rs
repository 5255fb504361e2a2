//! `mannerly identity`: the Web Bot Auth key (init, rotate), the key
//! directory to publish, and a Signature Agent Card.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Result};
use clap::Subcommand;
use mannerly_policy::identity::{card_json, DIRECTORY_MEDIA_TYPE, DIRECTORY_PATH};
use mannerly_proxy::KeyStore;

use crate::settings;

#[derive(Subcommand)]
pub enum IdentityCommand {
    /// Write a new Ed25519 signing key (identity.key_file, mode 0600).
    Init {
        /// Replace an existing key outright (its signatures stop verifying
        /// once verifiers refetch the directory; `rotate` keeps it listed).
        #[arg(long)]
        force: bool,
    },
    /// Print the key directory (JWKS) to serve at the signature_agent URL
    /// (the admin listener serves it signed at
    /// /.well-known/http-message-signatures-directory).
    Directory,
    /// Sign with a new key from now on; the old one stays in the directory
    /// for the overlap so signatures already sent keep verifying.
    Rotate {
        /// How long the old key stays in the directory (e.g. 7d, 36h).
        #[arg(long, default_value = "7d", value_parser = parse_duration)]
        overlap: Duration,
    },
    /// Print a Signature Agent Card whose rate expectations are the
    /// [budget] this proxy enforces.
    Card,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 7d, 36h)"))
}

pub fn run(config: Option<PathBuf>, command: IdentityCommand) -> Result<ExitCode> {
    let cfg = settings::load(config.as_deref())?;
    let store = KeyStore::of(&cfg);
    let now = SystemTime::now();
    match command {
        IdentityCommand::Init { force } => {
            let keyid = store.init(force)?;
            println!("{}", store.key_path().display());
            eprintln!("keyid {keyid}");
            if cfg.identity.signature_agent.is_empty() {
                eprintln!(
                    "next: set identity.signature_agent to the https origin whose {DIRECTORY_PATH} \
                     reaches the admin listener (or serves `mannerly identity directory`), \
                     and identity.enabled = true"
                );
            }
        }
        IdentityCommand::Directory => {
            print!("{}", store.directory(now)?);
            println!();
            eprintln!(
                "serve at the signature_agent URL ({DIRECTORY_PATH} for an origin) with \
                 Content-Type: {DIRECTORY_MEDIA_TYPE}; the admin listener serves it signed"
            );
        }
        IdentityCommand::Rotate { overlap } => {
            let r = store.rotate(overlap, now)?;
            let until = humantime::format_rfc3339_seconds(
                SystemTime::UNIX_EPOCH + Duration::from_secs(r.until),
            );
            println!("{}", r.new);
            eprintln!(
                "signing key is now {} (was {}); the old key stays in the directory until {until}. \
                 Publish the new directory now; a running proxy switches keys within seconds.",
                r.new, r.old
            );
        }
        IdentityCommand::Card => {
            if cfg.identity.signature_agent.is_empty() {
                bail!("identity.signature_agent is not set: the card names the origin that serves the key directory");
            }
            println!(
                "{}",
                card_json(
                    &cfg.identity.signature_agent,
                    &cfg.crawler.agent,
                    &cfg.crawler.purposes,
                    &cfg.budget,
                )
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
