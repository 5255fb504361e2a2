//! The `mannerly` command: run the proxy, manage its CA, check robots.txt
//! rules, verify audit logs, manage the Web Bot Auth identity, see and
//! reset hosts, report on conduct.

mod nofile;
mod settings;

use std::io::BufRead;
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
    /// Check the hash chain of an audit log; names the first broken line.
    Verify {
        /// The log file.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum RobotsCommand {
    /// Decide one URL against a robots.txt: exit 0 allowed, 1 disallowed, 2 error.
    Check(robots_cmd::CheckArgs),
}

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
            command: AuditCommand::Verify { file },
        } => verify(&file),
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
    match nofile::raise() {
        Ok(n) if n.soft_before < n.soft => tracing::info!(
            "open files limit raised from {} to {} (hard limit {})",
            n.soft_before,
            n.soft,
            n.hard
        ),
        Ok(n) => tracing::info!("open files limit {} (hard limit {})", n.soft, n.hard),
        Err(e) => tracing::warn!("open files limit could not be raised: {e}"),
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let ca = CertificateAuthority::load_or_create(&cfg.data_dir, cfg.proxy.leaf_cache)
            .context("interception CA")?;
        let target = cfg.audit_target();
        let (sink, writer) = mannerly_proxy::open_audit(&target).context("audit log")?;
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

fn ca(config: Option<PathBuf>, command: CaCommand) -> Result<ExitCode> {
    let cfg = settings::load(config.as_deref())?;
    let ca = CertificateAuthority::load_or_create(&cfg.data_dir, 1).context("interception CA")?;
    match command {
        CaCommand::Init => println!("{}", ca.cert_path().display()),
        CaCommand::Export => print!("{}", ca.cert_pem()),
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(file: &PathBuf) -> Result<ExitCode> {
    let f = std::fs::File::open(file).with_context(|| format!("{}", file.display()))?;
    let lines: Vec<String> = std::io::BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", file.display()))?;
    match mannerly_policy::verify_chain(lines.iter().map(String::as_str)) {
        Ok((n, _)) => {
            println!("{}: {n} lines, chain intact", file.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("{}: {e}", file.display());
            Ok(ExitCode::from(1))
        }
    }
}
