//! The `mannerly` command: run the proxy, manage its CA, check robots.txt
//! rules, verify audit logs, manage the Web Bot Auth identity, see and
//! reset hosts, report on conduct.

#[cfg_attr(feature = "heap-profile", allow(dead_code))]
mod alloc;
mod nofile;
mod sched;
mod settings;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use mannerly_proxy::{AuditTarget, CertificateAuthority, Proxy};

#[cfg(not(feature = "heap-profile"))]
#[global_allocator]
static GLOBAL: alloc::Mimalloc = alloc::Mimalloc;

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
    /// Log format on standard error: `text` (coloured only on a terminal)
    /// or `json` (one object per line, for container log collectors).
    #[arg(
        long,
        global = true,
        env = "MANNERLY_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Args)]
struct RunArgs {
    /// Address to listen on (`proxy.listen`), e.g. `0.0.0.0:3128` or `localhost:3128`.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Where the CA, the audit log and stored state live (`data_dir`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Try mannerly against origins on this machine: loopback and private
    /// targets allowed, ORIGIN_CA (a PEM file, if given) trusted for HTTPS
    /// origins. Listens on loopback only.
    #[arg(long, value_name = "ORIGIN_CA", num_args = 0..=1)]
    local: Option<Option<PathBuf>>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Run(RunArgs),
    /// Check or print the configuration (defaults + file + environment).
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
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
enum ConfigCommand {
    /// Load and validate the configuration: exit 0 when it is usable, 2 with
    /// the key, value and source of the first problem otherwise.
    Check,
    /// Print the effective configuration as TOML, each value with where it came from.
    Show,
}

#[derive(Subcommand)]
enum CaCommand {
    /// Create the CA (in `ca_dir`, else the data dir) if it does not exist; print its path.
    Init,
    /// Print the CA certificate (PEM), creating the CA if needed.
    Export {
        /// Write the certificate to this file (mode 0644) instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
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
        /// A witness of the log's checkpoint heads (`audit.witness`): its
        /// URL (GET, one head per line) or a file of the heads it holds.
        /// A log lacking the witness's newest head was cut: exit 1.
        #[arg(long, requires = "pubkey")]
        witness: Option<String>,
        /// Log files in order, or directories (rotated files first, then the current one).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write the evidence for one site: its lines of the log, each with a
    /// Merkle inclusion proof against its file's last signed checkpoint,
    /// and the count the checkpoint commits to, so that its owner can check
    /// with the public key alone that none was left out. Other sites' lines
    /// appear only as hashes.
    Evidence {
        /// The site's host name, as in the lines' `host`.
        #[arg(long)]
        host: String,
        /// The evidence file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Log files in order, or directories (rotated files first, then the current one).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Check an evidence file: exit 0 when every line is in the sealed log
    /// and none was left out; 1 naming the line otherwise; 3: every line
    /// holds, but the evidence cannot show where the log ends (it stops at
    /// an interval checkpoint, or a file of a format that cannot prove a
    /// site absent holds none of its lines); 2: error.
    VerifyEvidence {
        /// The audit public key (hex, or a file holding it).
        #[arg(long)]
        pubkey: String,
        /// The log's witness (`audit.witness`): its URL or a file of the
        /// heads it holds. The evidence must reach its newest head: exit 1
        /// when the log goes on past the evidence.
        #[arg(long)]
        witness: Option<String>,
        /// The evidence file.
        file: PathBuf,
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
mod evidence_cmd;
mod hosts_cmd;
mod identity_cmd;
mod report;
mod robots_cmd;
mod robots_fetch;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(cli.config, args, cli.log_format),
        Command::Config { command } => config_cmd(cli.config, command),
        Command::Ca { command } => ca(cli.config, command),
        Command::Audit {
            command:
                AuditCommand::Verify {
                    pubkey,
                    witness,
                    files,
                },
        } => audit_cmd::verify(
            cli.config.as_deref(),
            pubkey.as_deref(),
            &files,
            witness.as_deref(),
        ),
        Command::Audit {
            command: AuditCommand::Evidence { host, out, files },
        } => evidence_cmd::write(&host, &out, &files),
        Command::Audit {
            command:
                AuditCommand::VerifyEvidence {
                    pubkey,
                    witness,
                    file,
                },
        } => evidence_cmd::verify(&pubkey, &file, witness.as_deref()),
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
            eprintln!("mannerly: {}", describe(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, each said once (a cause whose text is already
/// part of the message is not repeated), plus a hint where there is one.
fn describe(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    let in_use = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
    });
    if in_use {
        // The message names the listener whose address is taken.
        msg.push_str(if msg.contains("(admin.listen)") {
            "\nhint: another program listens on that address; change admin.listen \
             (MANNERLY_ADMIN__LISTEN or the config file; empty turns the admin listener off)"
        } else {
            "\nhint: another program listens on that address; change proxy.listen \
             (--listen ADDR, MANNERLY_PROXY__LISTEN or the config file)"
        });
    }
    msg
}

fn init_tracing(format: LogFormat) -> Result<()> {
    use std::io::IsTerminal;
    let filter = match std::env::var("MANNERLY_LOG") {
        Ok(v) if !v.trim().is_empty() => log_filter(&v)?,
        _ => tracing_subscriber::EnvFilter::new("info"),
    };
    // A log line that cannot be written (stderr on a full disk, a closed
    // pipe) is lost, never fatal: by default the library reports the
    // failure with `eprintln!`, which panics when stderr fails too, on
    // whichever thread logged (on the store's, a second panic while
    // unwinding aborted the process).
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    match format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => {
            // Colour codes only for a person at a terminal, never in a file or a collector.
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            logs.with_ansi(colour).init()
        }
    }
    Ok(())
}

/// `MANNERLY_LOG`, checked: tracing reads a bare word as a target name, so
/// a misspelt level (`debugg`) would silently turn every log off.
fn log_filter(value: &str) -> Result<tracing_subscriber::EnvFilter> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    for directive in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[', ':']);
        if bare && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            anyhow::bail!(
                "MANNERLY_LOG={value}: {directive:?} is not a level ({}) nor target=level (e.g. mannerly_proxy=debug)",
                LEVELS.join(", ")
            );
        }
    }
    tracing_subscriber::EnvFilter::try_new(value).with_context(|| format!("MANNERLY_LOG={value}"))
}

fn config_cmd(config: Option<PathBuf>, command: ConfigCommand) -> Result<ExitCode> {
    let loaded = settings::load_with(config.as_deref(), &settings::Flags::default())?;
    match command {
        ConfigCommand::Check => {
            let from = match &loaded.file {
                Some(f) => format!("defaults + {}", f.display()),
                None => "defaults".to_string(),
            };
            let vars = loaded
                .values
                .values()
                .filter(|(_, s)| matches!(s, settings::Source::Env(_)))
                .count();
            println!("configuration OK ({from} + {vars} MANNERLY_* variables)");
        }
        ConfigCommand::Show => {
            let file = match &loaded.file {
                Some(f) => f.display().to_string(),
                None => "(no file)".to_string(),
            };
            let header = format!(
                "mannerly effective configuration\n\
                 layers, later wins: defaults < {file} < MANNERLY_* environment < flags"
            );
            print!("{}", settings::render(&loaded.values, &header));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run(config: Option<PathBuf>, args: RunArgs, log_format: LogFormat) -> Result<ExitCode> {
    init_tracing(log_format)?;
    let local = args.local.is_some();
    let flags = settings::Flags {
        listen: args.listen,
        data_dir: args.data_dir,
        local: args.local.map(Option::unwrap_or_default),
    };
    let cfg = settings::load_with(config.as_deref(), &flags)?.config;
    // Before anything in the data dir is opened or any port tried: a second
    // proxy on a dir in use must leave the first one's files alone.
    let _held = mannerly_proxy::lock_data_dir(&cfg.data_dir)?;
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
    mannerly_state::background::on_start(sched::yield_to_serving);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let ca = CertificateAuthority::load_or_create(&cfg.ca_dir(), cfg.proxy.leaf_cache)
            .context("interception CA")?;
        let target = cfg.audit_target();
        let mut opened = None;
        let proxy = Proxy::start(cfg, Arc::new(ca), |cfg| {
            let (sink, writer) = mannerly_proxy::open_audit(cfg)?;
            opened = Some((sink.clone(), writer));
            Ok(sink)
        })
        .await?;
        let (hup_sink, writer) = opened.context("the audit log was not opened")?;
        on_sighup(hup_sink, proxy.reloader(), config.clone(), flags.clone());
        let addr = proxy.local_addr()?;
        let admin = proxy.admin_addr();
        let ca_path = proxy.ca_path();
        let audit = match &target {
            AuditTarget::Stdout => "standard output".to_string(),
            AuditTarget::File(p) => p.display().to_string(),
        };
        let shutdown = shutdown_signal();
        // The banner is the program's output (stdout); logs go to stderr.
        print!("{}", banner(addr, &ca_path, &audit));
        if local {
            println!("LOCAL MODE (--local): loopback and private targets are allowed; for trying mannerly on this machine, never for a crawl");
        }
        if let Some(a) = admin {
            println!("admin: http://{a}/ (dashboard; /metrics, /hosts, /healthz, /readyz)");
        }
        let _ = std::io::Write::flush(&mut std::io::stdout());
        proxy.run(shutdown).await;
        let lines = tokio::task::spawn_blocking(move || writer.close())
            .await
            .context("audit writer")?
            .context("flushing the audit log")?;
        tracing::info!("stopped; {lines} audit lines written");
        Ok(ExitCode::SUCCESS)
    })
}

/// SIGHUP: seal the audit file and open the configured path again (for
/// logrotate's `create` mode), and read the configuration again: `[policy]`,
/// `[crawler]` and `[budget]` apply at once, other changed sections are named
/// in a warning (they need a restart). A configuration that does not load
/// changes nothing and says why.
fn on_sighup(
    sink: mannerly_proxy::AuditSink,
    reloader: mannerly_proxy::Reloader,
    config: Option<PathBuf>,
    flags: settings::Flags,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP: reopening the audit log");
                        sink.reopen();
                        reload(&reloader, config.as_deref(), &flags);
                    }
                });
            }
            Err(e) => tracing::warn!("SIGHUP handler not installed: {e}"),
        }
    }
    #[cfg(not(unix))]
    let _ = (sink, reloader, config, flags);
}

fn reload(
    reloader: &mannerly_proxy::Reloader,
    config: Option<&std::path::Path>,
    flags: &settings::Flags,
) {
    let applied = settings::load_with(config, flags)
        .map_err(|e| format!("{e:#}"))
        .and_then(|loaded| reloader.reload(loaded.config).map_err(|e| e.to_string()));
    match applied {
        Ok(r) => {
            if r.changed.is_empty() {
                tracing::info!(
                    "SIGHUP: configuration reloaded; nothing that applies while running changed"
                );
            } else {
                tracing::info!(
                    "SIGHUP: configuration reloaded; now in force: {}",
                    r.changed.join(", ")
                );
            }
            if !r.restart.is_empty() {
                tracing::warn!(
                    "SIGHUP: changed but only read at start (restart to apply): {}",
                    r.restart.join(", ")
                );
            }
        }
        Err(why) => {
            tracing::warn!("SIGHUP: configuration not reloaded, the running one stays: {why}")
        }
    }
}

/// What a user needs to point a crawler at the proxy. curl and wget read
/// only the lowercase proxy variables, most other clients the uppercase.
fn banner(addr: std::net::SocketAddr, ca: &std::path::Path, audit: &str) -> String {
    let url = format!("http://{addr}");
    let ca = ca.display();
    format!(
        "mannerly listening on {url}\n\
         CA certificate: {ca}\n\
         audit log: {audit}\n\
         Point your crawler at it:\n  \
         export http_proxy={url} https_proxy={url} HTTP_PROXY={url} HTTPS_PROXY={url}\n  \
         export SSL_CERT_FILE={ca} REQUESTS_CA_BUNDLE={ca} CURL_CA_BUNDLE={ca} NODE_EXTRA_CA_CERTS={ca}\n"
    )
}

/// SIGTERM or SIGINT. The handlers are installed when this is called, not
/// when the future is first polled: a supervisor may send SIGTERM as soon as
/// the banner is out, and that must drain, not kill.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
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
    let ca = CertificateAuthority::load_or_create(&cfg.ca_dir(), 1).context("interception CA")?;
    match command {
        CaCommand::Init => println!("{}", ca.cert_path().display()),
        CaCommand::Export { out: None } => print!("{}", ca.cert_pem()),
        CaCommand::Export { out: Some(path) } => write_public(&path, ca.cert_pem())?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The certificate is public: written readable by all, so a crawler running
/// as another user can trust it without access to the key next to it.
fn write_public(path: &std::path::Path, pem: &str) -> Result<()> {
    std::fs::write(path, pem).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("chmod 644 {}", path.display()))?;
    }
    println!("{}", path.display());
    Ok(())
}
