//! `loadctl`: the command-line face of the engine.
//!
//! Subcommands: `check` validates policy documents; `classify` decides requests given as JSON
//! Lines; `explain` shows how one request is decided; `demo` runs the embedded default policy;
//! `simulate` runs the SIP-server models (PRSM vs FIFO); `notifier` pushes policies to
//! subscribers over UDP.
//! Exit codes: 0 success, 1 an invalid document, 2 usage or I/O errors.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod check;
mod classify;
mod demo;
mod explain;
mod notifier;
mod policy_file;
mod simulate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The policy `loadctl demo` uses when given none.
pub const DEFAULT_POLICY: &str = include_str!("default-policy.xml");

#[derive(Parser)]
#[command(
    name = "loadctl",
    version,
    about = "SIP load control (RFC 7200) engine tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate load-control policy documents; `-` reads standard input.
    Check {
        /// Documents to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
    },
    /// Classify requests read as JSON Lines from standard input; one JSON decision per line.
    Classify {
        /// The policy document.
        #[arg(long, value_name = "FILE")]
        policy: String,
        /// Wall-clock time at t = 0 (e.g. 2026-11-30T12:00:00Z); default: now.
        #[arg(long, value_name = "RFC3339")]
        now: Option<String>,
        /// Transport of requests that name none.
        #[arg(long, default_value = "udp", value_name = "udp|tcp|tls|sctp|ws|wss")]
        transport: String,
        #[command(flatten)]
        exemptions: ExemptionFlags,
        #[command(flatten)]
        numbers: NumberFlag,
    },
    /// Show how one request is classified and why.
    Explain {
        /// The policy document.
        #[arg(long, value_name = "FILE")]
        policy: String,
        /// Request method.
        #[arg(long)]
        method: String,
        /// From header value.
        #[arg(long)]
        from: Option<String>,
        /// To header value.
        #[arg(long)]
        to: Option<String>,
        /// Request-URI.
        #[arg(long)]
        ruri: Option<String>,
        /// P-Asserted-Identity header value; repeat for several header lines (RFC 3325 §9.1
        /// allows a sip/sips and a tel identity).
        #[arg(long)]
        pai: Vec<String>,
        /// Target entity (next hop) URI.
        #[arg(long)]
        target: Option<String>,
        /// Transport.
        #[arg(long, default_value = "udp")]
        transport: String,
        /// Wall-clock time (default: now).
        #[arg(long, value_name = "RFC3339")]
        now: Option<String>,
        /// Event header value.
        #[arg(long)]
        event: Option<String>,
        /// The request is inside a dialog the caller keeps (not filtered).
        #[arg(long)]
        in_dialog: bool,
        /// The address the request came from (its Resource-Priority counts only from
        /// --priority-peers).
        #[arg(long, value_name = "IP")]
        source: Option<std::net::IpAddr>,
        /// Resource-Priority header value (RFC 4412, e.g. "ets.0, wps.2"); repeat for several
        /// header lines.
        #[arg(long, value_name = "VALUE")]
        resource_priority: Vec<String>,
        #[command(flatten)]
        exemptions: ExemptionFlags,
        #[command(flatten)]
        numbers: NumberFlag,
    },
    /// Run the engine on all cores against a synthetic SIP request mix, with a policy update
    /// half-way, and print per-rule results (embedded default policy unless --policy FILE).
    Demo {
        /// A policy document to use instead of the embedded one.
        #[arg(long, value_name = "FILE")]
        policy: Option<String>,
        /// How long to run, in seconds.
        #[arg(long, default_value_t = 4.0, value_name = "SECONDS")]
        duration: f64,
        /// Worker threads (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
        #[command(flatten)]
        numbers: NumberFlag,
    },
    /// Simulate an overloaded SIP server (PRSM vs FIFO) with the discrete-event or fluid
    /// model; `--sweep` runs the whole grid and draws plots.
    Simulate(simulate::Args),
    /// Run an RFC 7200 notifier on a UDP socket: push one policy to every subscriber, or share
    /// a capacity among them (--capacity with --template).
    Notifier {
        /// Where to listen (IP:PORT).
        #[arg(long, value_name = "IP:PORT")]
        listen: String,
        /// This notifier's URI (default sip:loadctl@LISTEN).
        #[arg(long)]
        uri: Option<String>,
        /// The policy every subscriber gets.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["capacity", "template"])]
        policy: Option<String>,
        /// Requests/s shared among the subscribers (with --template).
        #[arg(long, value_name = "R", requires = "template")]
        capacity: Option<f64>,
        /// A policy whose first rule each subscriber gets, with its share as the rate.
        #[arg(long, value_name = "FILE", requires = "capacity")]
        template: Option<String>,
        /// Seconds to run before the graceful stop (as on SIGTERM); default: until a signal.
        #[arg(long)]
        duration: Option<f64>,
        /// Least spacing of NOTIFYs on one subscription, milliseconds.
        #[arg(long, default_value_t = 1000)]
        pacing_ms: u64,
        /// The graceful stop (SIGTERM, SIGINT, the end of --duration) ends every subscription
        /// with `terminated;reason=probation;retry-after=S`: subscribers SUBSCRIBE again S
        /// seconds later (1 to 86400).
        #[arg(long, value_name = "S", default_value_t = 2,
              value_parser = clap::value_parser!(u32).range(1..=86_400))]
        retry_after: u32,
        /// The graceful stop takes the notifier out of service for good: `terminated;
        /// reason=noresource`, after which subscribers do not come back until told.
        #[arg(long)]
        decommission: bool,
        /// Also read the policy (or template) file again when it changes (checked every
        /// second), as on SIGHUP.
        #[arg(long)]
        watch: bool,
        /// Keep the subscriptions' dialogs in FILE, so that after a hard stop (SIGKILL, a
        /// crash) the next process started with the same FILE ends them at once with
        /// `terminated;reason=deactivated` and the subscribers subscribe to it.
        #[arg(long, value_name = "FILE")]
        state_file: Option<String>,
        /// Subscriptions last at most S seconds (default 3600); without --state-file a hard
        /// stop goes unnoticed by a subscriber until its refresh, up to this long.
        #[arg(long, value_name = "S", default_value_t = 3600,
              value_parser = clap::value_parser!(u32).range(60..))]
        max_expires: u32,
        /// Where to receive demand reports (UDP, IP:PORT): datagrams of lines
        /// `SUBSCRIBER-URI COUNT`, the requests of the template's class that arrived from that
        /// subscriber since its last report. Without it the capacity is split without
        /// knowing demand (equal shares).
        #[arg(long, value_name = "IP:PORT", requires = "capacity")]
        observe: Option<String>,
        /// A subscriber that may subscribe (others get 403, RFC 7200 §4.6): a SIP URI
        /// compared with the SUBSCRIBE's From, a host, or a domain (`example.net`,
        /// `*.example.net`). Repeatable.
        #[arg(long, value_name = "ENTRY")]
        allow: Vec<String>,
        /// A file of --allow entries, one per line; `#` starts a comment. Repeatable.
        #[arg(long, value_name = "FILE")]
        allow_file: Vec<String>,
        /// Accept every subscriber (only where the SIP layer authenticates them).
        #[arg(long, conflicts_with_all = ["allow", "allow_file"])]
        allow_any: bool,
    },
}

/// What `classify` and `explain` let through before any rule is tried (besides RFC 7200 §5.1
/// requests, which are never filtered).
#[derive(clap::Args)]
struct ExemptionFlags {
    /// Filter emergency calls like any other request. By default a request whose Request-URI
    /// (or To, when the Request-URI is not a URN) is urn:service:sos or urn:service:sos.*
    /// (RFC 5031) is never throttled (RFC 7200 §4.8).
    #[arg(long)]
    no_emergency_exempt: bool,
    /// Resource-Priority namespaces (RFC 4412) whose requests are never throttled,
    /// comma-separated, case-insensitive; "" for none. Default: ets,wps.
    #[arg(long, value_name = "LIST")]
    priority_namespaces: Option<String>,
    /// Address blocks whose Resource-Priority markings count (RFC 4412 §11.3: only peers in
    /// the operator's trust domain), comma-separated, e.g. 192.0.2.0/24,2001:db8::/32.
    /// Default: none (a request's "source" must be in one of them).
    #[arg(long, value_name = "LIST")]
    priority_peers: Option<String>,
    /// A To tag alone makes a request in-dialog. Default: only "known_dialog" requests are.
    #[arg(long)]
    to_tag_is_dialog: bool,
}

/// How the commands that classify read SIP user parts without `user=phone` (the engine's
/// `CompileConfig::sip_user_numbers`, the C ABI's `lc_engine_config.sip_user_numbers`).
#[derive(clap::Args)]
struct NumberFlag {
    /// How a sip:/sips: user part without ;user=phone is read (RFC 3261 §19.1.1: recipients
    /// "MAY interpret the pre-@ part as a telephone number"): user-phone = only with
    /// ;user=phone (strict); global = also "+" then digits and visual separators -.() only
    /// (sip:+1-555-0100@gw is tel:+15550100); digits = also digits and separators alone, a
    /// local number in the context of the host (sip:7042@pbx is
    /// tel:7042;phone-context=pbx). Policy ids are read the same way.
    #[arg(
        long,
        value_name = "user-phone|global|digits",
        default_value = "global"
    )]
    sip_user_numbers: loadctl::uri::SipUserNumbers,
}

impl ExemptionFlags {
    fn exemptions(&self) -> Result<loadctl::runtime::Exemptions, u8> {
        let mut e = policy_file::exemptions(
            self.no_emergency_exempt,
            self.priority_namespaces.as_deref(),
        )?;
        e.to_tag_is_dialog = self.to_tag_is_dialog;
        e.priority_peers =
            loadctl::runtime::Network::parse_list(self.priority_peers.as_deref().unwrap_or(""))
                .map_err(|err| {
                    eprintln!("loadctl: --priority-peers: {err}");
                    2u8
                })?;
        Ok(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Check { files } => check::run(&files),
        Command::Classify {
            policy,
            now,
            transport,
            exemptions,
            numbers,
        } => match exemptions.exemptions() {
            Ok(e) => classify::run(
                &policy,
                now.as_deref(),
                &transport,
                &e,
                numbers.sip_user_numbers,
            ),
            Err(code) => code,
        },
        Command::Explain {
            policy,
            method,
            from,
            to,
            ruri,
            pai,
            target,
            transport,
            now,
            event,
            in_dialog,
            source,
            resource_priority,
            exemptions,
            numbers,
        } => {
            // Repeated header lines are one comma-separated list (RFC 3261 §7.3.1).
            let pai = (!pai.is_empty()).then(|| pai.join(", "));
            let resource_priority =
                (!resource_priority.is_empty()).then(|| resource_priority.join(", "));
            match exemptions.exemptions() {
                Ok(exemptions) => explain::run(&explain::Args {
                    policy: &policy,
                    method: &method,
                    identities: loadctl::compile::Identities {
                        from: from.as_deref(),
                        to: to.as_deref(),
                        request_uri: ruri.as_deref(),
                        p_asserted_identity: pai.as_deref().into(),
                        target: target.as_deref(),
                    },
                    transport: &transport,
                    now: now.as_deref(),
                    event: event.as_deref(),
                    in_dialog,
                    source,
                    resource_priority: resource_priority.as_deref(),
                    exemptions,
                    numbers: numbers.sip_user_numbers,
                }),
                Err(code) => code,
            }
        }
        Command::Demo {
            policy,
            duration,
            threads,
            numbers,
        } => {
            if !(duration.is_finite() && duration > 0.0 && duration <= 3600.0) {
                eprintln!("loadctl: --duration must be between 0 and 3600 seconds");
                return ExitCode::from(2);
            }
            demo::run(&demo::Options {
                policy: policy.as_deref(),
                duration: std::time::Duration::from_secs_f64(duration),
                threads,
                numbers: numbers.sip_user_numbers,
            })
        }
        Command::Simulate(args) => simulate::run(&args),
        Command::Notifier {
            listen,
            uri,
            policy,
            capacity,
            template,
            duration,
            pacing_ms,
            retry_after,
            decommission,
            watch,
            state_file,
            max_expires,
            observe,
            allow,
            allow_file,
            allow_any,
        } => notifier::run(&notifier::Options {
            listen: &listen,
            uri: uri.as_deref(),
            policy: policy.as_deref(),
            capacity,
            template: template.as_deref(),
            duration,
            pacing_ms,
            retry_after,
            decommission,
            watch,
            state_file: state_file.as_deref(),
            max_expires,
            observe: observe.as_deref(),
            allow: &allow,
            allow_files: &allow_file,
            allow_any,
        }),
    };
    ExitCode::from(code)
}

/// Reads a file, or standard input for `-`.
pub fn read_input(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    if path == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(path)
    }
}
