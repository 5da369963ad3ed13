//! What happens when in a chaos run: each scenario's events, in time order.

use anyhow::bail;
use fake_provider::{ChaosKind, ChaosRequest};
use rand::Rng;

use super::{Args, READ_TIMEOUT_MS};

#[derive(Debug, Clone)]
pub enum Ev {
    /// SIGKILL a random running worker, start it again 1 s later.
    Kill,
    /// Start one more worker.
    Join,
    /// SIGTERM the newest running worker (not restarted).
    Term,
    /// Stop PostgreSQL (fast), start it again after this many seconds.
    PgRestart(f64),
    /// Blackhole worker 0's database connection for this many seconds.
    Blackhole(f64),
    /// The database connections open now go dark for good (new ones relay): every worker's
    /// (`true`) or worker 0's only.
    Dark { all: bool },
    /// SIGTERM worker 0 (whose connections just went dark; not restarted).
    TermWorker0,
    /// A provider misbehaviour.
    Provider(ChaosRequest),
    /// Reset every open connection to the provider.
    Reset,
    /// Commit opt-outs.
    OptOut,
}

fn chaos(kind: ChaosKind, seconds: f64) -> Ev {
    Ev::Provider(ChaosRequest {
        kind,
        seconds,
        retry_after_s: 2,
        stall_ms: READ_TIMEOUT_MS + 2000,
        ..Default::default()
    })
}

/// (seconds into the run, event), and how many workers start.
pub fn schedule(a: &Args, rng: &mut impl Rng) -> anyhow::Result<(usize, Vec<(f64, Ev)>)> {
    let mut ev = vec![(5.0, Ev::OptOut), (30.0, Ev::OptOut), (60.0, Ev::OptOut)];
    let kills = |ev: &mut Vec<(f64, Ev)>, rng: &mut dyn rand::RngCore, from: f64, every: f64| {
        let mut t = from;
        while t < 85.0 {
            ev.push((t, Ev::Kill));
            t += every + rng.random_range(0.0..2.0);
        }
    };
    let provider = |ev: &mut Vec<(f64, Ev)>, at: [f64; 4]| {
        ev.push((at[0], chaos(ChaosKind::Storm429, 5.0)));
        ev.push((at[1], chaos(ChaosKind::Burst5xx, 3.0)));
        ev.push((at[2], chaos(ChaosKind::Stall, 3.0)));
        for k in 0..3 {
            ev.push((at[3] + 2.0 * k as f64, Ev::Reset));
        }
    };
    let workers = match a.scenario.as_str() {
        "kill" => {
            kills(&mut ev, rng, 8.0, 4.0);
            a.workers
        }
        "pg-restart" => {
            ev.push((20.0, Ev::PgRestart(a.pg_down_s)));
            ev.push((55.0, Ev::PgRestart(2.0)));
            a.workers
        }
        "blackhole" => {
            ev.push((15.0, Ev::Blackhole(3.0 * a.lease_s as f64)));
            a.workers
        }
        "dark" | "dark-one" => {
            let all = a.scenario == "dark";
            ev.push((10.0, Ev::Dark { all }));
            ev.push((30.0, Ev::Dark { all }));
            ev.push((30.5, Ev::TermWorker0));
            a.workers
        }
        "provider" => {
            provider(&mut ev, [10.0, 25.0, 40.0, 55.0]);
            a.workers
        }
        "scale" => {
            for k in 0..7 {
                ev.push((5.0 + 3.0 * k as f64, Ev::Join));
                ev.push((50.0 + 3.0 * k as f64, Ev::Term));
            }
            1
        }
        "all" => {
            kills(&mut ev, rng, 12.0, 8.0);
            ev.push((20.0, Ev::Blackhole(3.0 * a.lease_s as f64)));
            ev.push((50.0, Ev::PgRestart(4.0)));
            provider(&mut ev, [28.0, 65.0, 80.0, 40.0]);
            for k in 0..4 {
                ev.push((8.0 + 2.0 * k as f64, Ev::Join));
                ev.push((90.0 + 3.0 * k as f64, Ev::Term));
            }
            a.workers
        }
        other => {
            bail!("--scenario {other:?}: expected kill, pg-restart, blackhole, dark, dark-one, provider, scale or all")
        }
    };
    ev.sort_by(|x, y| x.0.total_cmp(&y.0));
    Ok((workers, ev))
}

/// The most workers running at once under `events`.
pub fn most_running(events: &[(f64, Ev)], start: usize) -> usize {
    let (mut n, mut most) = (start as i64, start as i64);
    for (_, e) in events {
        match e {
            Ev::Join => n += 1,
            Ev::Term | Ev::TermWorker0 => n -= 1,
            _ => {}
        }
        most = most.max(n);
    }
    most as usize
}
