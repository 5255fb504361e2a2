//! The `mannerly` command: run the proxy, manage its CA, check robots.txt
//! rules, verify audit logs, manage the Web Bot Auth identity, see and
//! reset hosts, report on conduct.

mod settings;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use mannerly_proxy::{AuditTarget, CertificateAuthority, Proxy};

#[derive(Parser)]
#[command(
    name = "mannerly",
    version,
    about = "A forward HTTP/HTTPS proxy that gives any crawler good manners"
)]
struct Cli {
    /// Configuration file (TOML). Without it the embedded defaults apply;
    /// `MANNERLY_*` variables override either.
    #[arg(long, short, global = true, env = "MANNERLY_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Run,
    /// Manage the interception CA.
    Ca {
        #[command(subcommand)]
        command: CaCommand,
    },
    /// Audit log tools.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Proxy users (`proxy.auth = "basic"`).
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
    /// robots.txt tools.
    Robots {
        #[command(subcommand)]
        command: RobotsCommand,
    },
    /// Web Bot Auth: the key requests are signed with, its directory, a card.
    Identity {
        #[command(subcommand)]
        command: identity_cmd::IdentityCommand,
    },
    /// See and reset hosts through the admin listener of a running proxy.
    Hosts(hosts_cmd::HostsArgs),
    /// Conduct report from audit logs: per host and overall, as a table or
    /// (--html) a page with a chart per host. Exit 1 when a chain is broken.
    Report(report::ReportArgs),
}

#[derive(Subcommand)]
enum CaCommand {
    /// Create the CA in the data dir if it does not exist; print its path.
    Init,
    /// Print the CA certificate (PEM), creating it if needed.
    Export,
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check an audit log: the hash chain (names the first broken line)
    /// and, with --pubkey, the signed checkpoints. Exit 0: intact (and, with
    /// a key, sealed to the end); 1: edited, cut or re-chained; 3: intact
    /// but the last lines are not sealed (crash, or cut); 2: error.
    Verify {
        /// The audit public key (hex, as `mannerly audit pubkey` prints
        /// it, or a file holding it). Without it, truncation and
        /// re-chaining cannot be detected.
        #[arg(long)]
        pubkey: Option<String>,
        /// Log files in order, or directories (rotated files first, then the current one).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the public key that verifies this proxy's checkpoints
    /// (creates the key in the data dir if needed).
    Pubkey,
}

#[derive(Subcommand)]
enum UsersCommand {
    /// Add a user (or set a user's password) in proxy.users_file. The
    /// password is read from the first line of standard input.
    Add {
        /// User name: letters, digits and . _ - @.
        name: String,
    },
}

#[derive(Subcommand)]
enum RobotsCommand {
    /// Decide one URL against a robots.txt: exit 0 allowed, 1 disallowed, 2 error.
    Check(robots_cmd::CheckArgs),
}

mod audit_cmd;
mod hosts_cmd;
mod identity_cmd;
mod report;
mod robots_cmd;
mod robots_fetch;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run => run(cli.config),
        Command::Ca { command } => ca(cli.config, command),
        Command::Audit {
            command: AuditCommand::Verify { pubkey, files },
        } => audit_cmd::verify(pubkey.as_deref(), &files),
        Command::Audit {
            command: AuditCommand::Pubkey,
        } => audit_cmd::pubkey(cli.config.as_deref()),
        Command::Users {
            command: UsersCommand::Add { name },
        } => users_add(cli.config, &name),
        Command::Robots {
            command: RobotsCommand::Check(args),
        } => return robots_cmd::check(cli.config, args),
        Command::Identity { command } => identity_cmd::run(cli.config, command),
        Command::Hosts(args) => hosts_cmd::run(cli.config, args),
        Command::Report(args) => report::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mannerly: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MANNERLY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn run(config: Option<PathBuf>) -> Result<ExitCode> {
    init_tracing();
    let cfg = settings::load(config.as_deref())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let ca = CertificateAuthority::load_or_create(&cfg.data_dir, cfg.proxy.leaf_cache)
            .context("interception CA")?;
        let target = cfg.audit_target();
        let (sink, writer) = mannerly_proxy::open_audit(&cfg).context("audit log")?;
        reopen_on_sighup(sink.clone());
        let proxy = Proxy::bind(cfg, Arc::new(ca), sink).await?;
        let addr = proxy.local_addr()?;
        let admin = proxy.admin_addr();
        let ca_path = proxy.ca_path();
        let audit = match &target {
            AuditTarget::Stdout => "standard output".to_string(),
            AuditTarget::File(p) => p.display().to_string(),
        };
        eprintln!("mannerly listening on http://{addr}");
        eprintln!("CA certificate: {}", ca_path.display());
        eprintln!("audit log: {audit}");
        if let Some(a) = admin {
            eprintln!("admin: http://{a}/ (dashboard; /metrics, /hosts, /healthz, /readyz)");
        }
        eprintln!("Point your crawler at it:");
        eprintln!("  export HTTP_PROXY=http://{addr} HTTPS_PROXY=http://{addr}");
        eprintln!(
            "  export SSL_CERT_FILE={} REQUESTS_CA_BUNDLE={} NODE_EXTRA_CA_CERTS={}",
            ca_path.display(),
            ca_path.display(),
            ca_path.display()
        );
        proxy.run(shutdown_signal()).await;
        let lines = tokio::task::spawn_blocking(move || writer.close())
            .await
            .context("audit writer")?
            .context("flushing the audit log")?;
        tracing::info!("stopped; {lines} audit lines written");
        Ok(ExitCode::SUCCESS)
    })
}

/// SIGHUP: seal the audit file and open the configured path again, for
/// logrotate's `create` mode (it has moved the file away).
fn reopen_on_sighup(sink: mannerly_proxy::AuditSink) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP: reopening the audit log");
                        sink.reopen();
                    }
                });
            }
            Err(e) => tracing::warn!("SIGHUP handler not installed: {e}"),
        }
    }
    #[cfg(not(unix))]
    let _ = sink;
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn users_add(config: Option<PathBuf>, name: &str) -> Result<ExitCode> {
    let cfg = settings::load(config.as_deref())?;
    let path = mannerly_proxy::users_path(&cfg);
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprint!("password for {name} (shown as typed): ");
    }
    let mut password = String::new();
    std::io::stdin()
        .read_line(&mut password)
        .context("reading the password from standard input")?;
    let password = password.trim_end_matches(['\n', '\r']);
    mannerly_proxy::add_user(&path, name, password)?;
    println!("{name} added to {}", path.display());
    Ok(ExitCode::SUCCESS)
}

fn ca(config: Option<PathBuf>, command: CaCommand) -> Result<ExitCode> {
    let cfg = settings::load(config.as_deref())?;
    let ca = CertificateAuthority::load_or_create(&cfg.data_dir, 1).context("interception CA")?;
    match command {
        CaCommand::Init => println!("{}", ca.cert_path().display()),
        CaCommand::Export => print!("{}", ca.cert_pem()),
    }
    Ok(ExitCode::SUCCESS)
}
