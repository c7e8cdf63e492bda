//! The harness's command line (see the crate documentation for what each option does).

/// The groups of figures a run can be asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Group {
    /// The standard workload: the figures measured once and the throughput groups of loadctl
    /// and its peers.
    Standard,
    /// The hot-rule contention group ([`super::hot`]).
    Hot,
}

/// What a run was asked to do.
#[derive(Debug, PartialEq)]
pub(crate) struct Options {
    pub(crate) json: bool,
    pub(crate) seconds: f64,
    pub(crate) rounds: usize,
    /// Thread counts, each in 1..=usable cores, none twice.
    pub(crate) threads: Vec<usize>,
    /// The groups to measure, in the order given, none twice.
    pub(crate) groups: Vec<Group>,
    /// Internal: be the child process that measures the compiled policy's memory.
    pub(crate) measure_memory: bool,
}

/// Reads the arguments (without the program name) for a machine with `cores` usable cores.
pub(crate) fn parse(
    args: impl IntoIterator<Item = String>,
    cores: usize,
) -> Result<Options, String> {
    let mut o = Options {
        json: false,
        seconds: 2.0,
        rounds: 5,
        threads: vec![1, 2],
        groups: vec![Group::Standard, Group::Hot],
        measure_memory: false,
    };
    let mut threads_given = false;
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--seconds" => {
                o.seconds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|s: &f64| *s > 0.0 && s.is_finite())
                    .ok_or("--seconds needs a positive number")?
            }
            "--rounds" => {
                o.rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n: &usize| *n > 0)
                    .ok_or("--rounds needs a positive whole number")?
            }
            "--threads" => {
                o.threads = threads(&args.next().unwrap_or_default(), cores)?;
                threads_given = true;
            }
            "--groups" => o.groups = groups(&args.next().unwrap_or_default())?,
            "--bench" => {} // passed by `cargo bench`; ignored
            "--measure-memory" => o.measure_memory = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !threads_given {
        // The default asks for 2 threads; a 1-core machine gets what it has.
        o.threads.retain(|&t| t <= cores.max(1));
    }
    Ok(o)
}

/// A `--threads` list: counts from 1 to `cores`, comma-separated, none twice. A count above the
/// usable cores would put two pinned threads on one core and measure the scheduler.
fn threads(list: &str, cores: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in list.split(',') {
        let t: usize = part
            .trim()
            .parse()
            .map_err(|_| format!("--threads needs a list like 1,2 (got {list:?})"))?;
        if t == 0 || t > cores {
            return Err(format!(
                "--threads: {t} is not between 1 and the {cores} usable cores"
            ));
        }
        if out.contains(&t) {
            return Err(format!("--threads: {t} is given twice"));
        }
        out.push(t);
    }
    Ok(out)
}

/// A `--groups` list: `standard`, `hot`, comma-separated, none twice.
fn groups(list: &str) -> Result<Vec<Group>, String> {
    let mut out = Vec::new();
    for part in list.split(',') {
        let g = match part.trim() {
            "standard" => Group::Standard,
            "hot" => Group::Hot,
            other => {
                return Err(format!(
                    "--groups takes standard and hot, comma-separated (got {other:?})"
                ));
            }
        };
        if out.contains(&g) {
            return Err(format!("--groups: {} is given twice", part.trim()));
        }
        out.push(g);
    }
    Ok(out)
}
