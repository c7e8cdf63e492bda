//! The machine a harness run is on: CPU model, online CPUs, cache sizes and the kernel's
//! transparent huge page mode, read from procfs and sysfs so that figures taken on different
//! machines are never compared blind; and how busy the other processes kept the CPUs while a
//! figure was measured ([`CpuTimes`]), so a noisy neighbour is named, not guessed.
//!
//! Every field is optional: a file that is missing or says something unexpected gives `None`
//! (shown as "unknown"), never a panic. The parsers take the files' text so they can be tested
//! on fixed inputs; [`Machine::probe_at`] takes a root directory for the same reason.

use std::fmt;
use std::path::Path;

/// What the kernel says about the machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    /// The first `model name` of `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
    /// Online CPUs (`/sys/devices/system/cpu/online`).
    pub cpus: Option<usize>,
    /// Level-1 data cache of cpu0, bytes (one instance, i.e. per core).
    pub l1d_bytes: Option<u64>,
    /// Level-2 cache of cpu0, bytes (one instance).
    pub l2_bytes: Option<u64>,
    /// Level-3 cache of cpu0, bytes (one instance, usually shared by several cores).
    pub l3_bytes: Option<u64>,
    /// Transparent huge page mode: the bracketed word of
    /// `/sys/kernel/mm/transparent_hugepage/enabled` (`always`, `madvise` or `never`).
    pub thp: Option<String>,
}

const CACHE_DIR: &str = "sys/devices/system/cpu/cpu0/cache";

impl Machine {
    /// Reads this machine's procfs and sysfs.
    pub fn probe() -> Self {
        Self::probe_at(Path::new("/"))
    }

    /// Reads `proc/` and `sys/` under `root` (tests point it at a fixed tree).
    pub fn probe_at(root: &Path) -> Self {
        let read = |path: &str| std::fs::read_to_string(root.join(path)).ok();
        let caches: Vec<Cache> = std::fs::read_dir(root.join(CACHE_DIR))
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
                    .filter_map(|e| {
                        let field = |name: &str| std::fs::read_to_string(e.path().join(name)).ok();
                        Cache::parse(&field("level")?, &field("type")?, &field("size")?)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let size = |level: u8| {
            caches
                .iter()
                .find(|c| c.level == level && c.holds_data)
                .map(|c| c.bytes)
        };
        Self {
            cpu_model: read("proc/cpuinfo").as_deref().and_then(parse_cpu_model),
            cpus: read("sys/devices/system/cpu/online")
                .as_deref()
                .and_then(parse_cpu_list),
            l1d_bytes: size(1),
            l2_bytes: size(2),
            l3_bytes: size(3),
            thp: read("sys/kernel/mm/transparent_hugepage/enabled")
                .as_deref()
                .and_then(parse_thp),
        }
    }

    /// The JSON object of the harness's `"machine"` key: unknown numbers are `null`, unknown
    /// words `"unknown"`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "cpu_model": self.cpu_model.as_deref().unwrap_or("unknown"),
            "cpus": self.cpus,
            "l1d_bytes": self.l1d_bytes,
            "l2_bytes": self.l2_bytes,
            "l3_bytes": self.l3_bytes,
            "thp": self.thp.as_deref().unwrap_or("unknown"),
        })
    }
}

impl fmt::Display for Machine {
    /// One line: `AMD EPYC, 2 CPUs online, L1d 32 KiB, L2 1 MiB, L3 32 MiB (cpu0), THP madvise`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpus = self
            .cpus
            .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
        write!(
            f,
            "{}, {cpus} CPUs online, L1d {}, L2 {}, L3 {} (cpu0's), THP {}",
            self.cpu_model.as_deref().unwrap_or("unknown CPU"),
            Size(self.l1d_bytes),
            Size(self.l2_bytes),
            Size(self.l3_bytes),
            self.thp.as_deref().unwrap_or("unknown"),
        )
    }
}

/// A byte count in KiB / MiB, or "unknown".
struct Size(Option<u64>);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("unknown"),
            Some(b) if b >= 1 << 20 && b % (1 << 20) == 0 => write!(f, "{} MiB", b >> 20),
            Some(b) if b >= 1 << 10 && b % (1 << 10) == 0 => write!(f, "{} KiB", b >> 10),
            Some(b) => write!(f, "{b} B"),
        }
    }
}

/// One `cache/indexN` directory of sysfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cache {
    level: u8,
    /// `Data` or `Unified` (an `Instruction` cache holds no data).
    holds_data: bool,
    bytes: u64,
}

impl Cache {
    /// From the texts of the `level`, `type` and `size` files.
    fn parse(level: &str, kind: &str, size: &str) -> Option<Self> {
        Some(Self {
            level: level.trim().parse().ok()?,
            holds_data: matches!(kind.trim(), "Data" | "Unified"),
            bytes: parse_cache_size(size)?,
        })
    }
}

/// The machine's CPU time counters and this process's own, at one moment (`/proc/stat`'s
/// `cpu` line, `/proc/self/stat`), all in the kernel's clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTimes {
    /// All CPUs, busy (user, nice, system, irq, softirq).
    busy: u64,
    /// All CPUs, time the hypervisor ran something else (steal).
    steal: u64,
    /// All CPUs, every state (busy, idle, iowait, steal).
    total: u64,
    /// This process, user and system (all its threads, finished ones included).
    own: u64,
}

/// How the machine's CPU time was spent between two [`CpuTimes`], as shares of all CPUs' time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    /// Busy with other processes (and the kernel on their behalf).
    pub others: f64,
    /// Taken by the hypervisor (steal).
    pub steal: f64,
}

impl CpuTimes {
    /// This machine's counters now, `None` where procfs is missing or unreadable.
    pub fn now() -> Option<Self> {
        Self::parse(
            &std::fs::read_to_string("/proc/stat").ok()?,
            &std::fs::read_to_string("/proc/self/stat").ok()?,
        )
    }

    /// From the texts of `/proc/stat` and `/proc/self/stat`.
    pub fn parse(proc_stat: &str, self_stat: &str) -> Option<Self> {
        let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice: already in user]
        let field = |i: usize| f.get(i).copied().unwrap_or(0);
        if f.len() < 4 {
            return None;
        }
        let busy = field(0) + field(1) + field(2) + field(5) + field(6);
        let steal = field(7);
        // The command name (field 2) may hold spaces and parentheses: fields are counted from
        // after its last `)`; utime and stime are fields 14 and 15.
        let (_, rest) = self_stat.rsplit_once(')')?;
        let mut own = rest.split_whitespace().skip(11);
        let utime: u64 = own.next()?.parse().ok()?;
        let stime: u64 = own.next()?.parse().ok()?;
        Some(Self {
            busy,
            steal,
            total: busy + field(3) + field(4) + steal,
            own: utime + stime,
        })
    }

    /// The load between `earlier` and `self`; `None` if no time passed.
    pub fn since(&self, earlier: &Self) -> Option<Load> {
        let total = self.total.checked_sub(earlier.total).filter(|&t| t > 0)? as f64;
        let busy = self.busy.saturating_sub(earlier.busy);
        let own = self.own.saturating_sub(earlier.own);
        Some(Load {
            others: busy.saturating_sub(own) as f64 / total,
            steal: self.steal.saturating_sub(earlier.steal) as f64 / total,
        })
    }
}

impl fmt::Display for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "other processes {:.0} % of CPU time, steal {:.0} %",
            self.others * 100.0,
            self.steal * 100.0
        )
    }
}

/// The first `model name` of a `/proc/cpuinfo` text (x86 kernels write one per CPU; others may
/// write none).
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        (key.trim() == "model name" && !value.is_empty()).then(|| value.to_owned())
    })
}

/// The number of CPUs in a kernel CPU list such as `0-1`, `0,2-5` or `3`.
pub fn parse_cpu_list(list: &str) -> Option<usize> {
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    list.split(',').try_fold(0usize, |n, part| {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ),
            None => {
                let c = part.trim().parse::<usize>().ok()?;
                (c, c)
            }
        };
        n.checked_add(last.checked_sub(first)?.checked_add(1)?)
    })
}

/// A sysfs cache size (`32K`, `1024K`, `32M`, or plain bytes) in bytes.
pub fn parse_cache_size(size: &str) -> Option<u64> {
    let size = size.trim();
    let (digits, unit) = match size.as_bytes().last()? {
        b'K' | b'k' => (&size[..size.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&size[..size.len() - 1], 1 << 20),
        b'G' | b'g' => (&size[..size.len() - 1], 1 << 30),
        _ => (size, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// The selected mode of `/sys/kernel/mm/transparent_hugepage/enabled`: the bracketed word of
/// `always [madvise] never`.
pub fn parse_thp(enabled: &str) -> Option<String> {
    let (_, rest) = enabled.split_once('[')?;
    let (word, _) = rest.split_once(']')?;
    let word = word.trim();
    (!word.is_empty()).then(|| word.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMD_CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
        model\t\t: 17\nmodel name\t: AMD EPYC\nstepping\t: 1\n\nprocessor\t: 1\n\
        model name\t: AMD EPYC\n";
    const ARM_CPUINFO: &str = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n\
        CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n";

    #[test]
    fn cpu_model_is_the_first_model_name() {
        assert_eq!(parse_cpu_model(AMD_CPUINFO).as_deref(), Some("AMD EPYC"));
        // `model` alone is a number, not the name.
        assert_eq!(parse_cpu_model("model\t\t: 17\n"), None);
        assert_eq!(parse_cpu_model(ARM_CPUINFO), None);
        assert_eq!(parse_cpu_model("model name\t:\n"), None);
        assert_eq!(parse_cpu_model(""), None);
    }

    #[test]
    fn cpu_lists_count_every_listed_cpu() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0,2-5,7\n"), Some(6));
        assert_eq!(parse_cpu_list("0-63"), Some(64));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("\n"), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("0-"), None);
        assert_eq!(parse_cpu_list("a-b"), None);
        assert_eq!(parse_cpu_list("0,,1"), None);
    }

    #[test]
    fn cache_sizes_in_bytes() {
        assert_eq!(parse_cache_size("32K\n"), Some(32 * 1024));
        assert_eq!(parse_cache_size("1024K"), Some(1 << 20));
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(parse_cache_size("-1K"), None);
        assert_eq!(parse_cache_size("99999999999999999999K"), None);
        assert_eq!(parse_cache_size("18014398509481984G"), None);
    }

    #[test]
    fn thp_mode_is_the_bracketed_word() {
        assert_eq!(
            parse_thp("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            parse_thp("[always] madvise never").as_deref(),
            Some("always")
        );
        assert_eq!(
            parse_thp("always madvise [never]").as_deref(),
            Some("never")
        );
        assert_eq!(parse_thp("always madvise never"), None);
        assert_eq!(parse_thp("[] never"), None);
        assert_eq!(parse_thp("[always"), None);
    }

    #[test]
    fn instruction_caches_hold_no_data() {
        let l1i = Cache::parse("1\n", "Instruction\n", "32K\n").expect("parses");
        assert!(!l1i.holds_data);
        let l2 = Cache::parse("2\n", "Unified\n", "1024K\n").expect("parses");
        assert_eq!((l2.level, l2.holds_data, l2.bytes), (2, true, 1 << 20));
        assert_eq!(Cache::parse("x", "Data", "32K"), None);
    }

    const PROC_STAT_0: &str = "cpu  1000 10 200 5000 40 0 30 5 0 0\n\
        cpu0 500 5 100 2500 20 0 15 2 0 0\nintr 1 2 3\n";
    const PROC_STAT_1: &str = "cpu  1300 10 250 5300 40 0 50 15 0 0\n\
        cpu0 650 5 125 2650 20 0 25 7 0 0\nintr 1 2 3\n";
    // A command name with a space and a parenthesis; utime 100, stime 20.
    const SELF_STAT_0: &str = "4242 (loadctl (b) x) R 1 1 1 0 -1 4194304 10 0 0 0 100 20 0 0 \
        20 0 3 0 100 3133440 394\n";
    const SELF_STAT_1: &str = "4242 (loadctl (b) x) R 1 1 1 0 -1 4194304 10 0 0 0 260 40 0 0 \
        20 0 3 0 100 3133440 394\n";

    #[test]
    fn cpu_times_and_the_load_between_them() {
        let a = CpuTimes::parse(PROC_STAT_0, SELF_STAT_0).expect("parses");
        assert_eq!(
            a,
            CpuTimes {
                busy: 1000 + 10 + 200 + 30,
                steal: 5,
                total: 1240 + 5000 + 40 + 5,
                own: 120,
            }
        );
        let b = CpuTimes::parse(PROC_STAT_1, SELF_STAT_1).expect("parses");
        // 680 ticks passed on all CPUs: 370 busy, of which 180 ours; 10 stolen; 300 idle.
        let load = b.since(&a).expect("time passed");
        assert!((load.others - 190.0 / 680.0).abs() < 1e-12, "{load:?}");
        assert!((load.steal - 10.0 / 680.0).abs() < 1e-12, "{load:?}");
        assert_eq!(a.since(&a), None);
        assert_eq!(
            load.to_string(),
            "other processes 28 % of CPU time, steal 1 %"
        );
    }

    #[test]
    fn cpu_times_refuse_what_they_cannot_read() {
        assert_eq!(CpuTimes::parse("", SELF_STAT_0), None);
        assert_eq!(CpuTimes::parse("cpu  1 2 x 4\n", SELF_STAT_0), None);
        assert_eq!(CpuTimes::parse("cpu  1 2\n", SELF_STAT_0), None);
        assert_eq!(CpuTimes::parse(PROC_STAT_0, "4242 (x) R 1 2"), None);
        assert_eq!(CpuTimes::parse(PROC_STAT_0, "no parenthesis"), None);
        // Older kernels without steal still parse (steal 0).
        let old = CpuTimes::parse("cpu  10 0 5 100\n", SELF_STAT_0).expect("parses");
        assert_eq!((old.busy, old.steal, old.total), (15, 0, 115));
    }

    /// A unique scratch directory under the system temp dir, removed on drop.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "loadctl-bench-machine-{name}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("scratch dir");
            Self(dir)
        }

        fn write(&self, path: &str, text: &str) {
            let file = self.0.join(path);
            std::fs::create_dir_all(file.parent().expect("has a parent")).expect("dirs");
            std::fs::write(file, text).expect("write");
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn probe_reads_a_fixed_tree() {
        let root = Scratch::new("tree");
        root.write("proc/cpuinfo", AMD_CPUINFO);
        root.write("sys/devices/system/cpu/online", "0-1\n");
        root.write(
            "sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never\n",
        );
        for (i, (level, kind, size)) in [
            ("1", "Data", "32K"),
            ("1", "Instruction", "64K"),
            ("2", "Unified", "1024K"),
            ("3", "Unified", "32768K"),
        ]
        .into_iter()
        .enumerate()
        {
            let dir = format!("{CACHE_DIR}/index{i}");
            root.write(&format!("{dir}/level"), &format!("{level}\n"));
            root.write(&format!("{dir}/type"), &format!("{kind}\n"));
            root.write(&format!("{dir}/size"), &format!("{size}\n"));
        }
        let m = Machine::probe_at(&root.0);
        assert_eq!(
            m,
            Machine {
                cpu_model: Some("AMD EPYC".into()),
                cpus: Some(2),
                l1d_bytes: Some(32 << 10),
                l2_bytes: Some(1 << 20),
                l3_bytes: Some(32 << 20),
                thp: Some("madvise".into()),
            }
        );
        assert_eq!(
            m.to_string(),
            "AMD EPYC, 2 CPUs online, L1d 32 KiB, L2 1 MiB, L3 32 MiB (cpu0's), THP madvise"
        );
        assert_eq!(m.to_json()["l2_bytes"], serde_json::json!(1 << 20));
        assert_eq!(m.to_json()["thp"], serde_json::json!("madvise"));
    }

    #[test]
    fn missing_files_say_unknown() {
        let root = Scratch::new("empty");
        // A cache directory whose size file is missing counts as no cache, not a panic.
        root.write(&format!("{CACHE_DIR}/index0/level"), "1\n");
        root.write(&format!("{CACHE_DIR}/index0/type"), "Data\n");
        let m = Machine::probe_at(&root.0);
        assert_eq!(m, Machine::default());
        assert_eq!(
            m.to_string(),
            "unknown CPU, unknown CPUs online, L1d unknown, L2 unknown, L3 unknown (cpu0's), \
             THP unknown"
        );
        let json = m.to_json();
        assert_eq!(json["cpu_model"], serde_json::json!("unknown"));
        assert_eq!(json["l1d_bytes"], serde_json::Value::Null);
        assert_eq!(json["thp"], serde_json::json!("unknown"));
    }
}
