//! Which cores do what: cpu devices each on a core of their own, the front end (HTTP
//! workers, decoding, the controller, the executors' arbiters) on the others.
//!
//! A cpu device's run time is only predictable if nothing else runs on its core: a
//! request decoded on the same core delays the batch that runs there, and the plan that
//! counted on its estimate is late. So the cores are split once, at start: [`plan`] is the
//! pure rule (which core each device gets, which the front end keeps, how many devices
//! `count = "auto"` means), [`Machine::detect`], [`pin_current`] and [`lower_current`]
//! are the only places that ask or tell the operating system.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A core the process may run on (the operating system's number for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Core(pub usize);

impl fmt::Display for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How many devices a group has: a number, or `"auto"` (cpu groups: the cores left once
/// the front end has its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceCount {
    /// One device per core the front end does not keep (at least one).
    Auto,
    /// Exactly this many.
    Fixed(u32),
}

impl From<u32> for DeviceCount {
    fn from(count: u32) -> Self {
        DeviceCount::Fixed(count)
    }
}

impl Default for DeviceCount {
    fn default() -> Self {
        DeviceCount::Fixed(1)
    }
}

impl<'de> Deserialize<'de> for DeviceCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl Visitor<'_> for CountVisitor {
            type Value = DeviceCount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of devices or \"auto\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DeviceCount, E> {
                u32::try_from(v)
                    .map(DeviceCount::Fixed)
                    .map_err(|_| E::custom(format!("{v} is not a number of devices")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DeviceCount, E> {
                u32::try_from(v)
                    .map(DeviceCount::Fixed)
                    .map_err(|_| E::custom(format!("{v} is not a number of devices")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DeviceCount, E> {
                match v {
                    "auto" => Ok(DeviceCount::Auto),
                    other => Err(E::custom(format!(
                        "'{other}' is not a number of devices or \"auto\""
                    ))),
                }
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

/// The cores this process may use, as far as the operating system tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// The cores of the process's affinity mask, in order.
    pub cores: Vec<Core>,
    /// Whether threads can be pinned here; if not, `cores` only counts them.
    pub pinnable: bool,
}

impl Machine {
    /// Asks the operating system. Call it before any thread is pinned: it reads the
    /// calling thread's mask.
    pub fn detect() -> Self {
        match core_affinity::get_core_ids() {
            Some(ids) if !ids.is_empty() => Self {
                cores: ids.into_iter().map(|c| Core(c.id)).collect(),
                pinnable: true,
            },
            _ => {
                let n = std::thread::available_parallelism().map_or(1, |n| n.get());
                Self {
                    cores: (0..n).map(Core).collect(),
                    pinnable: false,
                }
            }
        }
    }
}

/// Who runs where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorePlan {
    /// Devices of each cpu group, in the groups' order (`auto` resolved).
    pub counts: Vec<u32>,
    /// The core of each cpu device in order; `None`: not pinned.
    pub devices: Vec<Option<Core>>,
    /// The cores the front end's threads are pinned to, round robin; empty: not pinned
    /// (it shares the cores with the devices).
    pub front_end: Vec<Core>,
    /// HTTP worker threads: one per core the front end may use.
    pub workers: usize,
    /// What was chosen and why, in words, for the start-up log.
    pub reason: String,
}

impl CorePlan {
    /// The front-end core for its `i`-th thread, if the front end is pinned.
    pub fn front_core(&self, i: usize) -> Option<Core> {
        (!self.front_end.is_empty()).then(|| self.front_end[i % self.front_end.len()])
    }
}

/// Splits the machine's cores between the cpu groups (`counts`, in order) and a front end
/// that wants `front_end_cores` of them. `auto` groups share the cores nobody else has,
/// at least one device each. Devices take the last cores, one each, while there are
/// enough; the front end keeps the rest if that leaves it at least one, else it is not
/// pinned. More devices than cores: nothing is pinned.
pub fn plan(machine: &Machine, counts: &[DeviceCount], front_end_cores: usize) -> CorePlan {
    let n = machine.cores.len().max(1);
    let front = front_end_cores.max(1);
    let fixed: u32 = counts
        .iter()
        .map(|c| match c {
            DeviceCount::Fixed(k) => *k,
            DeviceCount::Auto => 0,
        })
        .sum();
    let autos = counts.iter().filter(|c| **c == DeviceCount::Auto).count() as u32;
    let spare = (n.saturating_sub(front) as u32).saturating_sub(fixed);
    let resolved: Vec<u32> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| match c {
            DeviceCount::Fixed(k) => *k,
            // Spare cores split evenly, the first auto groups taking the remainder.
            DeviceCount::Auto => {
                let rank = counts[..i]
                    .iter()
                    .filter(|c| **c == DeviceCount::Auto)
                    .count();
                (spare / autos + u32::from((rank as u32) < spare % autos)).max(1)
            }
        })
        .collect();
    let d = resolved.iter().sum::<u32>() as usize;
    let mut why = format!(
        "{d} cpu device(s) on {n} core(s), {front} wanted by the front end{}",
        if autos > 0 { " (count = \"auto\")" } else { "" }
    );
    let (devices, front_end) = if !machine.pinnable {
        why.push_str("; threads cannot be pinned here, nothing pinned");
        (vec![None; d], Vec::new())
    } else if d > n {
        why.push_str("; more devices than cores, nothing pinned");
        (vec![None; d], Vec::new())
    } else {
        let devices = machine.cores[n - d..].iter().copied().map(Some).collect();
        let rest = machine.cores[..n - d].to_vec();
        if rest.is_empty() {
            why.push_str("; each device pinned to a core, the front end shares them");
        } else {
            why.push_str("; each device pinned to a core, the front end to the others");
        }
        (devices, rest)
    };
    let workers = front_end.len().max(n.saturating_sub(d)).max(1);
    CorePlan {
        counts: resolved,
        devices,
        front_end,
        workers,
        reason: why,
    }
}

/// Pins the calling thread to `core`; false (and a warning) if the system refused.
pub fn pin_current(core: Core, what: &str) -> bool {
    let pinned = core_affinity::set_for_current(core_affinity::CoreId { id: core.0 });
    if !pinned {
        tracing::warn!(%core, thread = what, "cannot pin the thread to its core; running unpinned");
    }
    pinned
}

/// Names the calling thread `what` and pins it to `core`, if given: how each of the
/// server's own threads starts.
pub fn enter(core: Option<Core>, what: &str) {
    name_current(what);
    if let Some(core) = core {
        pin_current(core, what);
    }
}

/// Names the calling thread `what` (at most 15 bytes are kept), as the system shows it
/// (`/proc/<pid>/task/<tid>/comm`, `top -H`, perf); elsewhere than Linux, nothing.
pub fn name_current(what: &str) {
    #[cfg(target_os = "linux")]
    {
        let mut name = [0u8; 16];
        let len = what.len().min(15);
        name[..len].copy_from_slice(&what.as_bytes()[..len]);
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from the
        // pointer, which `name` is (its last byte stays 0); it touches nothing else.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = what;
}

/// Lowers the calling thread's scheduling priority to `nice` (Linux: a thread's nice
/// value is its own), never raising it (a server started under a higher nice value keeps
/// it); false if the system refused. For throughput work that shares a core with
/// latency-critical threads: a higher nice value gives way to them whenever they wake.
pub fn lower_current(nice: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes nothing and cannot fail; getpriority and setpriority only
        // read their integer arguments (PRIO_PROCESS with a thread id names that thread).
        let lowered = unsafe {
            let tid = libc::gettid() as libc::id_t;
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            now >= nice || libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0
        };
        if !lowered {
            tracing::warn!(nice, "cannot lower the thread's priority; it keeps its own");
        }
        lowered
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = nice;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(n: usize) -> Machine {
        Machine {
            cores: (0..n).map(Core).collect(),
            pinnable: true,
        }
    }

    #[test]
    fn auto_leaves_the_front_end_its_core() {
        let p = plan(&machine(8), &[DeviceCount::Auto], 1);
        assert_eq!(p.counts, vec![7]);
        assert_eq!(p.devices, (1..8).map(|c| Some(Core(c))).collect::<Vec<_>>());
        assert_eq!(p.front_end, vec![Core(0)]);
        assert_eq!(p.workers, 1);
        let p = plan(&machine(2), &[DeviceCount::Auto], 1);
        assert_eq!((p.counts, p.front_end), (vec![1], vec![Core(0)]));
    }

    #[test]
    fn auto_is_at_least_one_device() {
        let p = plan(&machine(1), &[DeviceCount::Auto], 1);
        assert_eq!(p.counts, vec![1]);
        assert_eq!(p.devices, vec![Some(Core(0))]);
        assert!(p.front_end.is_empty(), "nothing left: the front end shares");
        assert_eq!(p.workers, 1);
    }

    #[test]
    fn auto_groups_share_what_fixed_groups_leave() {
        let counts = [DeviceCount::Fixed(2), DeviceCount::Auto, DeviceCount::Auto];
        let p = plan(&machine(8), &counts, 1);
        assert_eq!(p.counts, vec![2, 3, 2]);
        assert_eq!(p.front_end, vec![Core(0)]);
    }

    #[test]
    fn fixed_counts_are_kept_and_pinned_while_cores_last() {
        let p = plan(&machine(2), &[DeviceCount::Fixed(2)], 1);
        assert_eq!(p.counts, vec![2]);
        assert_eq!(p.devices, vec![Some(Core(0)), Some(Core(1))]);
        assert!(p.front_end.is_empty());
        let p = plan(&machine(2), &[DeviceCount::Fixed(3)], 1);
        assert_eq!(p.devices, vec![None; 3]);
        assert!(p.reason.contains("more devices than cores"), "{}", p.reason);
    }

    #[test]
    fn an_unpinnable_machine_pins_nothing_and_says_so() {
        let m = Machine {
            cores: (0..4).map(Core).collect(),
            pinnable: false,
        };
        let p = plan(&m, &[DeviceCount::Auto], 1);
        assert_eq!(p.counts, vec![3]);
        assert_eq!(p.devices, vec![None; 3]);
        assert!(p.front_end.is_empty() && p.reason.contains("cannot be pinned"));
    }

    #[test]
    fn front_threads_take_front_cores_round_robin() {
        let p = plan(&machine(6), &[DeviceCount::Fixed(3)], 1);
        assert_eq!(p.front_end, vec![Core(0), Core(1), Core(2)]);
        assert_eq!(p.workers, 3);
        assert_eq!(p.front_core(4), Some(Core(1)));
    }

    #[test]
    fn counts_parse_as_numbers_or_auto() {
        #[derive(Deserialize)]
        struct T {
            count: DeviceCount,
        }
        let t: T = toml::from_str("count = \"auto\"").unwrap();
        assert_eq!(t.count, DeviceCount::Auto);
        let t: T = toml::from_str("count = 3").unwrap();
        assert_eq!(t.count, DeviceCount::Fixed(3));
        let err = toml::from_str::<T>("count = \"many\"").err().unwrap();
        assert!(err.to_string().contains("many"), "{err}");
        assert!(toml::from_str::<T>("count = -1").is_err());
    }
}
