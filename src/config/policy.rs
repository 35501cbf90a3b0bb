//! The `[policy]` table: the scheduling policy's constants, each with the measurement
//! behind its default.

use std::time::Duration;

use serde::Deserialize;

use super::{DriftMargin, PolicyName};

/// Constants of the scheduling policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Which policy decides: `clockwork`, `clockwork-nodrop` (ablation: no early
    /// refusal) or `reactive` (a Clipper-like baseline).
    pub name: PolicyName,
    /// How far ahead of now each device's exec and load lanes are kept busy: more hides
    /// dispatch latency, less keeps batching decisions late and informed.
    #[serde(with = "humantime_serde")]
    pub schedule_ahead: Duration,
    /// Measurements kept per (model, batch size, device kind) estimate.
    pub estimate_window: usize,
    /// Percentile of the window used as the estimate (99 is in effect the max of 10).
    pub estimate_percentile: f64,
    /// Measurements older than this no longer count: before a model's requests are
    /// refused on its estimates, estimates not measured for this long go back to the
    /// profile. Without it a slow spell that raised an estimate past every objective
    /// would refuse that model forever (nothing runs, so nothing is measured again).
    /// Learned margins age the same way: when a request's objective leaves no room for a
    /// run besides the learned buffer and no device has learned from a report for this
    /// long, those whose margins are that old go back to `expected_lag` and `buffer`.
    #[serde(with = "humantime_serde")]
    pub estimate_max_age: Duration,
    /// Expected delay between the controller sending an action and an executor seeing it:
    /// the starting point of each device's learned lag (with `learn_margins`, replaced
    /// after a device's first `WARM_UP` (32) INFER reports by the 90th percentile of the
    /// lag it measured, `LAG_PERCENTILE`; a remote worker's measured trip stays a floor).
    #[serde(with = "humantime_serde")]
    pub expected_lag: Duration,
    /// Work overdue by more than this is assumed to have started this long ago.
    #[serde(with = "humantime_serde")]
    pub lag_allowance: Duration,
    /// Safety margin taken off every deadline for runs that take longer than their
    /// estimate: the starting point of the learned one (with `learn_margins`, each
    /// device's is replaced after its first 32 INFER reports by a high percentile of how
    /// much later than planned its answers were known: overrun plus the report's trip;
    /// the widest over the devices is taken off).
    #[serde(with = "humantime_serde")]
    pub buffer: Duration,
    /// Learn each device's lag and overrun margin from its reports (`expected_lag` and
    /// `buffer` are then starting points); off, they stay the fixed constants of the
    /// Clockwork paper, which hold back devices with exact timing at tight objectives.
    pub learn_margins: bool,
    /// Reports per device that the learned lag and overrun margin are taken over.
    pub margin_window: usize,
    /// Percentile of that window used as the overrun margin (100: the largest seen); the
    /// lag takes the lower of this and `estimate::LAG_PERCENTILE` (90).
    pub margin_percentile: f64,
    /// Admission projects the batches queued ahead of a new request at the mean of their
    /// estimate windows (the new request's own batch still at the estimate). Off, every
    /// batch counts at the estimate, as in the Clockwork paper: a sum of high percentiles,
    /// which on a device with a tail of slow runs (a cpu core) refuses requests it then
    /// serves with room to spare. Either way a queued request runs only if, when its turn
    /// comes, its own batch still fits at the estimate; what this changes is how many are
    /// admitted to wait for that turn.
    pub queue_at_mean: bool,
    /// Where admission keeps, before the objective of a request that would wait behind
    /// other work for at least 8 runs alone, a share of the time until it would finish:
    /// the drift of the devices in service that hold its model (the narrowest: it runs on
    /// whichever frees first), the 99th percentile over their last `margin_window`
    /// stretches of 8 consecutive runs of how much longer than their means a stretch
    /// took, as a share of those means (`scheduler::estimate::Drift`; a shorter wait is
    /// what the estimates' percentiles cover). Nothing on devices with exact
    /// timing (the simulator's); on a device whose runs drift in slow spells (a cpu core),
    /// without it the requests admitted last under overload wait most of their objective
    /// and are then refused as timed out. `"alone"` (the default): only while the model's
    /// traffic has its devices to itself (no other resident model with requests queued or
    /// arriving in the last two seconds); there, on one model at twice its capacity (the
    /// edge bench), it brought the refusals' p99 from 92 ms to 4-12 in 7 runs of 8 at no
    /// cost in what was served (at 1.5x in 4 of 8). `"always"`: on shared devices too,
    /// where under the zoo's burst it moved service from the models of 50 ms objectives to
    /// cnn's 100 ms and a quarter to half fewer requests were served in time
    /// (docs/EXPERIMENTS.md, "The drift margin again", "The drift margin where a model is
    /// alone"). `"off"`: never. Learned only with `learn_margins`.
    pub drift_margin: DriftMargin,
    /// Admission also counts, on each device that holds the model, the work the other
    /// resident models will run before the new request (`scheduler/clockwork/shared.rs`):
    /// their queued requests due before it and those still to come that will be, each
    /// model's at the share of what it admits that it serves. Without it, on a device
    /// shared by several busy models each admits as if it had the device alone, and under
    /// overload most of what is refused is refused after waiting most of its objective
    /// (docs/EXPERIMENTS.md, "Other models' work counted at arrival").
    pub shared_arrival: bool,
    /// Admission also keeps the promise made to the requests already queued: a request
    /// that would be queued ahead of some (an earlier deadline: a tighter objective, or
    /// a model's direct request beside a pipeline's sub-requests) is refused when it
    /// arrives if the projection shows it would push one of them past its latest finish
    /// (`scheduler/clockwork/behind.rs`). Without it, under overload the requests
    /// admitted with looser objectives wait most of them and are then refused as timed
    /// out. A model whose requests all share one objective never has any behind a new
    /// one in the simulator: nothing changes for it. Off by default: on a real server
    /// requests reach admission a little out of their arrival order, so one objective
    /// also puts requests behind newcomers, and under overload on the zoo the check
    /// refused work the device would have served (fewer answered in time in both runs
    /// with it); with objectives within a few runs of a batch it may serve a few percent
    /// fewer (docs/EXPERIMENTS.md, "Admitted requests keep their place").
    pub protect_admitted: bool,
    /// On a device shared with models of tighter objectives that are busy (requests in
    /// the rate window), a request with a looser objective is admitted only if it books
    /// the device no further ahead than the tightest of those objectives (and its own
    /// run): `scheduler/clockwork/horizon.rs`. Only on an overloaded device (its
    /// residents' arrivals over the last 2 s ask for more than its time, or, at a burst's
    /// onset, those over the last 100-200 ms do while the busy neighbours asked for 5% of it or
    /// more): below that the bound would only refuse the tail of a burst the device has
    /// time for. Without it, under overload a
    /// model of long objectives books the device to the end of them, and every request of
    /// a tight objective then finds work due before its deadline and is refused, whatever
    /// its cost: with the zoo's device emulated and the client on its own core, resnet
    /// (200 ms, 1.3 ms an item) took 17.8 of 20 s of the device and the 50 ms models
    /// (0.01-0.05 ms an item) were refused nearly whole (docs/EXPERIMENTS.md, "A model of
    /// long objectives books the device").
    pub booking_horizon: bool,
    /// Admission learns, per model, which of its last 200 admitted requests finished in
    /// time, by the time their projections left them to spare, and refuses at arrival a
    /// request with less to spare than where those that missed (served late, or refused
    /// after waiting) outweighed those served in time, a miss weighing `hindsight_weight`
    /// (`scheduler/clockwork/hindsight.rs`); after 200 ms without learning anything, one
    /// request is admitted without it, so that a model refused at arrival comes back.
    /// Without it, under overload on a device shared by models of different objectives,
    /// the projection's expectation of the other models' work is a mean, and a fifth of
    /// what it admits with a few ms to spare is refused after waiting most of its
    /// objective. With it and its floor (`hindsight_floor`), in virtual time, over 192
    /// random cpu-like mixes 0.9% more is served and 21% fewer are refused after waiting,
    /// and at the load sweep's 1.5x half as many, goodput within 0.2%. A request that
    /// would time out is dropped before it runs, so refusing it at arrival saves no
    /// device time, and those below the margin that would have been served are lost: at
    /// objectives of twice a batch-1 run on noisy GPU-shaped devices (the SLO sweep) it
    /// served up to 11% less, until tight objectives were judged without it
    /// (`hindsight_min_runs`); with that gate the SLO sweep is the same as without it
    /// (docs/EXPERIMENTS.md, "Admission in hindsight", "Then the SLO sweep", "A gate by
    /// objective length").
    pub admission_hindsight: bool,
    /// With `admission_hindsight`, how many requests served in time one refused after
    /// waiting (or served late) weighs: 1 refuses only where more missed than were served;
    /// more trades requests served for fewer refusals after waiting (at 4, over the random
    /// mixes, half as many of those again and 5% more served, but 0.8% fewer served at
    /// the load sweep's 1.5x). At least 1: 0 is refused at start.
    pub hindsight_weight: u32,
    /// With `admission_hindsight`, the share of its arrivals below which a model is
    /// admitted without its margin in hindsight: one that lost requests over the last 2 s
    /// (refused at arrival or after waiting) and had fewer than this share of its
    /// arrivals taken into batches is judged as if hindsight were off for it, until it
    /// has (`scheduler/clockwork/floor.rs`). Without it, hindsight moves service under
    /// overload from the model whose admitted requests miss most (long runs, a loose
    /// objective) to the others, down to a few percent of its requests (over the random
    /// mixes, a model under 5% of its requests in time where it had more without
    /// hindsight: 47 of 192 mixes alone, 6 with a floor of 5%, held at 4.5-4.9%, none at
    /// 10%, which serves 1.2% less than without hindsight). A floor, not a guarantee: a
    /// model below it is served as without hindsight, not more. Within 0..=1; 0 turns it
    /// off.
    pub hindsight_floor: f64,
    /// With `admission_hindsight`, only a request whose objective is at least this many
    /// of its own runs (alone, at the estimate) is judged with its model's margin in
    /// hindsight; a tighter one is judged without. At objectives of a few runs nothing
    /// queues, a miss is a run before it that overran, and what the margin refuses that
    /// would have been served is lost: at twice a batch-1 run on noisy GPU-shaped devices
    /// (the SLO sweep) hindsight served up to 11% less without this gate, the same as
    /// without hindsight with it (docs/EXPERIMENTS.md, "A gate by objective length").
    /// 0 judges every request in hindsight.
    pub hindsight_min_runs: u32,
    /// Plan a device that runs much slower than the other devices of its kind at its own
    /// pace: once its last 3 runs (of models a peer of its kind holds too) each took at
    /// least twice its kind's quickest recent run of that batch, its estimates are scaled
    /// by the least of those ratios, and its runs are scaled back before its kind learns
    /// them (`scheduler::estimate::Slowdown`). Without it, such a device (throttled, its
    /// core taken by another process) is planned at its kind's pace: its actions overrun
    /// their plans until the watchdog takes it out as slow, and its slow runs raise its
    /// healthy peers' estimates. Off by default: in virtual time (exact timing) it keeps
    /// a slow device's capacity (at 1200 requests/s on two V100s, 83 refused against 260
    /// with one 4x slow), but two cpu devices on a noisy host run in stretches at twice
    /// their quickest anyway, and there it refused a few more requests than without
    /// (docs/EXPERIMENTS.md, "A device planned at its own pace"). For devices with steady
    /// timing.
    pub device_slowdown: bool,
    /// Horizon over which a queued request's demand for a device is counted when deciding
    /// which model to load: a request needs its batch-1 time within this much device time.
    #[serde(with = "humantime_serde")]
    pub load_budget: Duration,
    /// Largest batch ever formed.
    pub max_batch: u32,
    /// Longest estimated execution of one batch; larger batches are not formed.
    #[serde(with = "humantime_serde")]
    pub max_exec_time: Duration,
    /// Busy share of a device a model's replicas are sized for: a model gets as many
    /// replicas as its measured arrival rate times its per-request device time, divided
    /// by this (at least one while it has traffic). Below 1 so that bursts find room.
    pub target_utilisation: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        let ms = Duration::from_millis;
        Self {
            name: PolicyName::Clockwork,
            schedule_ahead: ms(5),
            estimate_window: 10,
            estimate_percentile: 99.0,
            estimate_max_age: ms(1000),
            expected_lag: ms(1),
            lag_allowance: ms(10),
            buffer: ms(5),
            learn_margins: true,
            margin_window: 256,
            margin_percentile: 100.0,
            queue_at_mean: true,
            drift_margin: DriftMargin::Alone,
            shared_arrival: true,
            protect_admitted: false,
            booking_horizon: true,
            admission_hindsight: true,
            hindsight_weight: 1,
            hindsight_floor: 0.05,
            hindsight_min_runs: 10,
            device_slowdown: false,
            load_budget: ms(25),
            max_batch: 16,
            max_exec_time: ms(250),
            target_utilisation: 0.4,
        }
    }
}
