//! The process's limit of open files. Every connection (HTTP or gRPC), model file and
//! link to a worker takes a descriptor, and a process out of them accepts nothing more.
//! At start the soft limit is raised to the hard one, as servers do (a shell's default
//! soft limit is often 1,024, far below what `[server.connections]` allows), and what the
//! connection bounds let one HTTP worker and the gRPC port hold is compared with it.

/// The open-file limits after [`raise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit now: what the process may hold.
    pub soft: u64,
    /// The hard limit: how far the soft one may be raised without privileges.
    pub hard: u64,
    /// The soft limit before, where it was raised.
    pub raised_from: Option<u64>,
}

/// Raises the soft open-file limit to the hard one; `None` where the system did not say
/// what they are. An unlimited hard limit leaves the soft one as it is (the kernel caps
/// it at `nr_open` and refuses more).
pub fn raise() -> Option<OpenFiles> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limits into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    if soft >= hard || hard == libc::RLIM_INFINITY {
        return Some(OpenFiles {
            soft,
            hard,
            raised_from: None,
        });
    }
    let raised = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the limits from the struct it is given.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
    Some(OpenFiles {
        soft: if set { hard } else { soft },
        hard,
        raised_from: set.then_some(soft),
    })
}

/// Logs the limits beside what the connection bounds let one HTTP worker and the gRPC
/// port hold at once (`connections`), warning where that exceeds the limit: a client
/// could then run the process out of descriptors before a bound holds it.
pub fn report(files: Option<OpenFiles>, connections: u64) {
    let Some(files) = files else {
        tracing::warn!("open files: the system did not say the process's limit");
        return;
    };
    tracing::info!(
        soft = files.soft,
        hard = files.hard,
        raised_from = files.raised_from,
        connections,
        "open files: the process may hold {} (one HTTP worker and the gRPC port may hold {connections} connections)",
        files.soft
    );
    if connections > files.soft {
        tracing::warn!(
            "open files: one HTTP worker and the gRPC port may hold {connections} connections \
             ([server.connections] max_connections, grpc_max_connections), more than the {} \
             descriptors the process may hold: lower them, or raise the hard limit (`ulimit \
             -Hn`, a container's `nofile`)",
            files.soft
        );
    }
}
